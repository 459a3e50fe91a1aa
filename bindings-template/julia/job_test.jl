# The Julia job test (issue 21): 20 steps of a tiny GPT on the repo's doc/,
# stopped and saved at 10, resumed in a new Job, losses equal `llmtrain
# train`'s on the same spec; a bad key named in the error; misuse throws
# (use after close, double close, nothing); a tensor saved in halves by 2
# ranks read whole by 1.  NEVER RUN: no julia on the machines that wrote it.
# usage: LLMT_LIB=... julia job_test.jl SOURCE_ROOT LLMTRAIN_EXE
include(joinpath(@__DIR__, "LLMTrain.jl"))
using .LLMTrain

src, exe = ARGS[1], ARGS[2]
fails = 0
function check(ok, what)
    global fails
    println(ok ? "ok   " : "FAIL ", what)
    ok || (fails += 1)
end

function losses(path)
    out = Dict{Int,String}()
    for line in eachline(path)
        (occursin("\"event\"", line) || !occursin("\"loss\":", line)) && continue
        step = parse(Int, split(split(line, "\"step\":")[2], ",")[1])
        out[step] = split(split(line, "\"loss\":")[2], ",")[1]
    end
    return out
end

tmp = mktempdir()
corpus = joinpath(tmp, "corpus")
mkpath(corpus)
for f in readdir(joinpath(src, "doc"))
    endswith(f, ".md") && cp(joinpath(src, "doc", f), joinpath(corpus, f))
end
spec = """{"name": "bind",
 "model": {"arch": "gpt2", "layers": 1, "hidden": 32, "heads": 2, "vocab": 320, "seq_len": 16},
 "batch": {"micro": 2, "grad_accum": 1}, "optimizer": {"lr": 1e-2},
 "train": {"steps": 20, "seed": 3, "eval_interval": 0, "log_interval": 0, "threads": 1, "sample_tokens": 0},
 "data": {"train": "$corpus", "tokenizer": {"kind": "byte"}},
 "checkpoint": {"interval": 10}, "hardware": {"gpu": "cpu"}}"""
write(joinpath(tmp, "spec.json"), spec)
run(`$exe train $(joinpath(tmp, "spec.json")) --out $(joinpath(tmp, "ref"))`)

rd = joinpath(tmp, "jl")
j = Job(spec; run_dir=rd, stop_at=10)
check(run!(j).step == 10, "ran to step 10")
close(j); close(j)
check(try step!(j); false catch e; e isa LLMTrainError && e.status == LLMTrain.LLMT_ERR_STATE end,
      "use after close throws LLMT_ERR_STATE")
j = Job(spec; run_dir=rd, resume=true)
check(start_step(j) == 10, "resumed at 10")
check(run!(j).step == 20, "ran to step 20")
close(j)
a, b = losses(joinpath(tmp, "ref", "metrics.jsonl")), losses(joinpath(rd, "metrics.jsonl"))
check(length(a) == 20 && a == b, "20 losses equal llmtrain train's")

bad = try Job(replace(spec, "\"layers\": 1" => "\"layers\": 1, \"no_such_key\": 1");
              run_dir=joinpath(tmp, "bad")); nothing catch e; e end
check(bad isa LLMTrainError && occursin("no_such_key", bad.message), "bad key named: $bad")
check(try Plan(nothing, 1); false catch e; e isa LLMTrainError && e.status == LLMTrain.LLMT_ERR_NULL_POINTER end,
      "nothing as a spec throws LLMT_ERR_NULL_POINTER")

s = Spec(spec)
p = Plan(s, 1)
close(s)  # the plan owns its copy
check(world_size(p) == 1 && degrees(p)[4] == 1, "plan outlives its spec")
close(p); close(p)

# 2 ranks each save one half (columns, Julia order) of a 3x4 array; 1 reads it
W = reshape(Float32.(0:11) .* 0.5f0, 3, 4)
root = joinpath(tmp, "halves")
cks = [Checkpoint(root; rank=r, world_size=2) for r in 0:1]
for (r, k) in enumerate(cks)
    begin!(k, 1)
    add!(k, "w", W[:, 2r-1:2r]; global_shape=(3, 4), global_offsets=(0, 2r - 2))
end
Threads.@threads for k in cks
    save!(k)
end
foreach(close, cks)
one = Checkpoint(root)
check(open_latest(one) == 1, "the 2-rank checkpoint is committed")
check(read!(one, "w", zeros(Float32, 3, 4)) == W, "halves of 2 ranks read whole by 1")
close(one)
rm(tmp; recursive=true)
exit(fails == 0 ? 0 : 1)
