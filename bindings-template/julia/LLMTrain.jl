# LLMTrain.jl: Julia bindings to libllmtrain through ccall (issue 21).
# src/LibLLMTrain.jl is the raw layer generated from include/llmtrain.h by
# tools/gen_bindings.py; this file is the idiomatic layer on top: Job,
# Spec, Plan, Checkpoint as mutable structs freed by `close` (a finalizer
# is the safety net; a second close is a no-op), failures thrown as
# LLMTrainError(status, message) with the library's message for the calling
# thread (llmt_last_error). Set ENV["LLMT_LIB"] before loading.
#
# NEVER RUN: Julia is not in Debian 12 and cannot be installed on the
# machines that wrote this; test `julia` skips (77) without `julia` on PATH.
# The generated structs' layouts are checked against C everywhere by test
# bindings-generated; this file was checked by reading only.
module LLMTrain

const libllmtrain = get(ENV, "LLMT_LIB", "libllmtrain.so.1")
const ABI_MAJOR = 1

include(joinpath(@__DIR__, "src", "LibLLMTrain.jl"))

export LLMTrainError, Spec, Plan, Job, Checkpoint, degrees, world_size,
       step!, run!, save!, start_step, begin!, add!, set_kv!, get_kv, wait_saved,
       open_latest

version() = unsafe_string(llmt_version())

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

# ------------------------------------------------------------------ errors

"A failing llmt_status with the library's message."
struct LLMTrainError <: Exception
    status::Int32
    message::String
end
Base.showerror(io::IO, e::LLMTrainError) =
    print(io, "llmtrain: ", status_string(e.status), " (status ", e.status, "): ", e.message)

closed_error(what) = LLMTrainError(LLMT_ERR_STATE, "$what: closed")
null_error(what) = LLMTrainError(LLMT_ERR_NULL_POINTER, "$what: nothing where a handle is required")

# Run one C call; on failure throw with this thread's last error. A task
# could migrate between OS threads only at a yield point; ccall does not
# yield, so clear -> call -> read stay on one thread.
function check(f)
    llmt_last_error_clear()
    s = f()
    s == LLMT_OK && return nothing
    msg = llmt_last_error_status() == s ? unsafe_string(llmt_last_error()) : ""
    throw(LLMTrainError(s, msg))
end

# Option structs are immutable isbits: fill defaults with *_opts_init in a
# Ref, then write fields through the Ref's pointer (offsets from the type).
function setf!(r::Base.RefValue{S}, name::Symbol, v) where {S}
    i = findfirst(==(name), fieldnames(S))
    T = fieldtype(S, i)
    GC.@preserve r begin
        p = Base.unsafe_convert(Ptr{S}, r)
        unsafe_store!(Ptr{T}(p + fieldoffset(S, i)), convert(T, v))
    end
    return r
end

function sized(::Type{S}) where {S}
    r = Ref{S}()
    GC.@preserve r ccall(:memset, Ptr{Cvoid}, (Ptr{Cvoid}, Cint, Csize_t),
                         Base.unsafe_convert(Ptr{S}, r), 0, sizeof(S))
    setf!(r, :struct_size, sizeof(S))
end

function new_context()
    out = Ref{Ptr{llmt_context}}(C_NULL)
    check(() -> llmt_context_create(C_NULL, out))
    return out[]
end

# ------------------------------------------------------------------ Spec

"A parsed job spec (immutable; its queries are thread-safe)."
mutable struct Spec
    ctx::Ptr{llmt_context}
    ptr::Ptr{llmt_spec}
    function Spec(json::AbstractString)
        s = new(new_context(), C_NULL)
        out = Ref{Ptr{llmt_spec}}(C_NULL)
        try
            check(() -> llmt_spec_parse_json(s.ctx, json, sizeof(json), out))
        catch
            close(s)
            rethrow()
        end
        s.ptr = out[]
        return finalizer(close, s)
    end
end

function Base.close(s::Spec)
    s.ptr != C_NULL && llmt_spec_destroy(s.ptr)
    s.ctx != C_NULL && llmt_context_destroy(s.ctx)
    s.ptr = C_NULL
    s.ctx = C_NULL
    return nothing
end
live(s::Spec) = s.ptr == C_NULL ? throw(closed_error("spec")) : s.ptr

# ------------------------------------------------------------------ Plan

"A spec placed on a world size. Owns its copy of the spec (close the Spec freely)."
mutable struct Plan
    ctx::Ptr{llmt_context}
    ptr::Ptr{llmt_plan}
    function Plan(spec::Spec, world::Integer=0)
        sp = live(spec)
        p = new(new_context(), C_NULL)
        out = Ref{Ptr{llmt_plan}}(C_NULL)
        try
            check(() -> llmt_plan_create(p.ctx, sp, Int32(world), out))
        catch
            close(p)
            rethrow()
        end
        p.ptr = out[]
        return finalizer(close, p)
    end
end
Plan(::Nothing, world::Integer=0) = throw(null_error("plan"))
Plan(json::AbstractString, world::Integer=0) = (s = Spec(json); try Plan(s, world) finally close(s) end)

function Base.close(p::Plan)
    p.ptr != C_NULL && llmt_plan_destroy(p.ptr)
    p.ctx != C_NULL && llmt_context_destroy(p.ctx)
    p.ptr = C_NULL
    p.ctx = C_NULL
    return nothing
end
live(p::Plan) = p.ptr == C_NULL ? throw(closed_error("plan")) : p.ptr

"(tp, cp, pp, dp, ep)"
function degrees(p::Plan)
    d = zeros(Int32, LLMT_PLAN_NDIMS)
    pp = live(p)
    check(() -> llmt_plan_degrees(pp, d))
    return Tuple(Int.(d))
end

function world_size(p::Plan)
    w = Ref{Int32}(0)
    pp = live(p)
    check(() -> llmt_plan_world_size(pp, w))
    return Int(w[])
end

# ------------------------------------------------------------------ Job

"A whole training run (one task drives it)."
mutable struct Job
    ctx::Ptr{llmt_context}
    spec::Ptr{llmt_spec}
    ptr::Ptr{llmt_job}
    function Job(spec_json::AbstractString; run_dir::Union{Nothing,AbstractString}=nothing,
                 resume::Bool=false, stop_at::Integer=0, threads::Integer=0)
        j = new(new_context(), C_NULL, C_NULL)
        try
            sp = Ref{Ptr{llmt_spec}}(C_NULL)
            check(() -> llmt_spec_parse_json(j.ctx, spec_json, sizeof(spec_json), sp))
            j.spec = sp[]
            o = sized(llmt_job_opts)
            check(() -> llmt_job_opts_init(o, sizeof(llmt_job_opts)))
            setf!(o, :resume, resume ? 1 : 0)
            setf!(o, :stop_at, stop_at)
            setf!(o, :threads, threads)
            out = Ref{Ptr{llmt_job}}(C_NULL)
            dir = run_dir === nothing ? nothing : String(run_dir)
            GC.@preserve dir begin
                dir !== nothing && setf!(o, :run_dir, pointer(dir))
                check(() -> llmt_job_create(j.ctx, j.spec, o, out))
            end
            j.ptr = out[]
        catch
            close(j)
            rethrow()
        end
        return finalizer(close, j)
    end
end

function Base.close(j::Job)
    j.ptr != C_NULL && llmt_job_destroy(j.ptr)
    j.spec != C_NULL && llmt_spec_destroy(j.spec)
    j.ctx != C_NULL && llmt_context_destroy(j.ctx)
    j.ptr = C_NULL
    j.spec = C_NULL
    j.ctx = C_NULL
    return nothing
end
live(j::Job) = j.ptr == C_NULL ? throw(closed_error("job")) : j.ptr
live(::Nothing) = throw(null_error("handle"))

"One optimizer step; returns the step's llmt_job_metrics (isbits)."
function step!(j::Job)
    m = sized(llmt_job_metrics)
    jp = live(j)
    check(() -> llmt_job_step(jp, m))
    return m[]
end

"Steps until stop_at (n <= 0) or n more; returns the last metrics."
function run!(j::Job, n::Integer=0)
    m = sized(llmt_job_metrics)
    jp = live(j)
    check(() -> llmt_job_run(jp, Int64(n), m))
    return m[]
end

save!(j::Job; async::Bool=false) = (jp = live(j); check(() -> llmt_job_save(jp, async ? 1 : 0)))

function start_step(j::Job)
    i = sized(llmt_job_info)
    jp = live(j)
    check(() -> llmt_job_get_info(jp, i))
    return Int(i[].start_step)
end

# ------------------------------------------------------------------ Checkpoint

"""Tiered asynchronous checkpointing of the host's own arrays.
Julia arrays are column-major: an array of size (a, b) is described to the
library as the row-major tensor of shape (b, a) (dimensions reversed), so
global shapes and offsets are given in Julia's order and reversed here. The
added arrays are kept referenced (not copied) until `save!` returns."""
mutable struct Checkpoint
    ctx::Ptr{llmt_context}
    ptr::Ptr{llmt_ckpt}
    pending::Vector{Any}
    function Checkpoint(root::AbstractString; rank::Integer=0, world_size::Integer=1,
                        keep_last::Integer=3, durable_dir::Union{Nothing,AbstractString}=nothing)
        k = new(new_context(), C_NULL, Any[])
        try
            o = sized(llmt_ckpt_opts)
            check(() -> llmt_ckpt_opts_init(o, sizeof(llmt_ckpt_opts)))
            setf!(o, :rank, rank)
            setf!(o, :world_size, world_size)
            setf!(o, :keep_last, keep_last)
            dd = durable_dir === nothing ? nothing : String(durable_dir)
            out = Ref{Ptr{llmt_ckpt}}(C_NULL)
            GC.@preserve dd begin  # the library copies the path
                dd !== nothing && setf!(o, :durable_dir, pointer(dd))
                check(() -> llmt_ckpt_create(k.ctx, root, o, out))
            end
            k.ptr = out[]
        catch
            close(k)
            rethrow()
        end
        return finalizer(close, k)
    end
end

function Base.close(k::Checkpoint)
    k.ptr != C_NULL && llmt_ckpt_destroy(k.ptr)  # waits for a save in flight
    k.ctx != C_NULL && llmt_context_destroy(k.ctx)
    k.ptr = C_NULL
    k.ctx = C_NULL
    empty!(k.pending)
    return nothing
end
live(k::Checkpoint) = k.ptr == C_NULL ? throw(closed_error("checkpoint")) : k.ptr

begin!(k::Checkpoint, step::Integer) = (kp = live(k); empty!(k.pending);
                                       check(() -> llmt_ckpt_begin(kp, Int64(step))))

const DTYPES = Dict{DataType,Int32}(Float32 => LLMT_DTYPE_FP32, Int32 => LLMT_DTYPE_INT32,
                                    Int64 => LLMT_DTYPE_INT64)

function view_of(A::Array{T}) where {T}
    haskey(DTYPES, T) || throw(LLMTrainError(LLMT_ERR_INVALID_ARGUMENT, "dtype $T"))
    t = Ref{llmt_tensor}()
    shape = Int64.(reverse(size(A)))
    check(() -> llmt_tensor_init(t, sizeof(llmt_tensor), DTYPES[T], Int32(ndims(A)), shape,
                                 pointer(A), LLMT_DEVICE_CPU, 0))
    return t
end

"Add `A` (this rank's block) at `global_offsets` of a tensor of `global_shape` (Julia order)."
function add!(k::Checkpoint, name::AbstractString, A::Array;
              global_shape=nothing, global_offsets=nothing)
    kp = live(k)
    t = view_of(A)
    gs = global_shape === nothing ? C_NULL : Int64.(reverse(Tuple(global_shape)))
    go = global_offsets === nothing ? C_NULL : Int64.(reverse(Tuple(global_offsets)))
    check(() -> llmt_ckpt_add_tensor(kp, name, t, gs, go))
    push!(k.pending, A)  # read by save!'s snapshot
    return nothing
end

set_kv!(k::Checkpoint, key::AbstractString, value) =
    (kp = live(k); check(() -> llmt_ckpt_set_kv(kp, key, string(value))))

"Snapshot (async: return after it; a writer thread persists), or save and commit."
function save!(k::Checkpoint; async::Bool=false)
    kp = live(k)
    try
        check(() -> llmt_ckpt_save(kp, async ? 1 : 0))
    finally
        empty!(k.pending)  # the snapshot holds the bytes now
    end
end

wait_saved(k::Checkpoint; timeout_ms::Integer=-1) =
    (kp = live(k); check(() -> llmt_ckpt_wait(kp, Int64(timeout_ms))))

function open_latest(k::Checkpoint)
    s = Ref{Int64}(0)
    kp = live(k)
    check(() -> llmt_ckpt_open_latest(kp, s))
    return Int(s[])
end

"Fill `A` with the region at `global_offsets` (Julia order) of the saved tensor: any sharding."
function Base.read!(k::Checkpoint, name::AbstractString, A::Array; global_offsets=nothing)
    kp = live(k)
    t = view_of(A)
    go = global_offsets === nothing ? C_NULL : Int64.(reverse(Tuple(global_offsets)))
    GC.@preserve A check(() -> llmt_ckpt_read(kp, name, t, go))
    return A
end

function get_kv(k::Checkpoint, key::AbstractString)
    kp = live(k)
    need = Ref{Csize_t}(0)
    llmt_ckpt_get_kv(kp, key, C_NULL, 0, need)
    buf = Vector{UInt8}(undef, max(need[], 1))
    check(() -> llmt_ckpt_get_kv(kp, key, buf, length(buf), need))
    return unsafe_string(pointer(buf))
end

function __init__()
    abi_version()[1] == ABI_MAJOR ||
        error("libllmtrain ABI $(abi_version()) does not match these bindings ($ABI_MAJOR)")
    for (T, id) in STRUCT_IDS
        n = ccall((:llmt_sizeof, libllmtrain), Csize_t, (Int32,), id)
        n == sizeof(T) || error("$(T): $(sizeof(T)) bytes here, $n in the library")
    end
end

end # module
