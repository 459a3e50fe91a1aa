# LLMTrain.jl: Julia bindings to libllmtrain through ccall.
# A template: set ENV["LLMT_LIB"] to the library path before `using LLMTrain`.
module LLMTrain

const libllmtrain = get(ENV, "LLMT_LIB", "libllmtrain.so.1")
const ABI_MAJOR = 1

version() = unsafe_string(ccall((:llmt_version, libllmtrain), Cstring, ()))

function abi_version()
    v = ccall((:llmt_abi_version, libllmtrain), UInt32, ())
    return (Int(v >> 16), Int(v & 0xffff))
end

status_string(s::Integer) =
    unsafe_string(ccall((:llmt_status_string, libllmtrain), Cstring, (Cint,), s))

function features()
    bits = ccall((:llmt_build_features, libllmtrain), UInt64, ())
    names = String[]
    for b in 0:63
        if bits & (UInt64(1) << b) != 0
            p = ccall((:llmt_feature_name, libllmtrain), Cstring, (UInt64,), UInt64(1) << b)
            push!(names, unsafe_string(p))
        end
    end
    return names
end

function __init__()
    abi_version()[1] == ABI_MAJOR ||
        error("libllmtrain ABI $(abi_version()) does not match these bindings ($ABI_MAJOR)")
end

end # module
