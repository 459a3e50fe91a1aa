# julia --project smoke_test.jl  (with ENV LLMT_LIB set)
include("LLMTrain.jl")
using .LLMTrain
@assert length(split(LLMTrain.version(), ".")) == 3
@assert LLMTrain.status_string(0) == "ok"
@assert LLMTrain.status_string(13) == "timed out"
println("ok: ", LLMTrain.version(), " ", LLMTrain.features())
