# LLMTrain.jl: Julia bindings to libllmtrain through ccall (issue 21).
# src/LibLLMTrain.jl is the raw layer generated from include/llmtrain.h by
# tools/gen_bindings.py; this file is the idiomatic layer on top, covering
# Spec, Plan, Job, Checkpoint, Model, Trainer, Comm, Tokenizer, Dataset,
# Loader and prepare_data: handles are mutable structs freed by `close` (a
# finalizer is the safety net; a second close is a no-op), failures are
# thrown as LLMTrainError(status, message) with the library's message for
# the calling thread (llmt_last_error). Set ENV["LLMT_LIB"] before loading.
#
# Memory: C keeps no Julia-managed memory beyond a call. Arrays passed to a
# call are rooted (GC.@preserve) for that call only; where the library
# keeps a pointer past the call (a checkpoint's added tensors, read by
# save!), the array is copied into C memory (Libc.malloc) first. Julia
# arrays are column-major: an array of size (a, b) is described to the
# library as the row-major tensor (b, a) (dims reversed), and arrays coming
# back (parameters, gradients, batches) have their dims reversed likewise.
#
# NEVER RUN: Julia is not in Debian 12 and cannot be installed on the
# machines that wrote this; test `julia` skips (77) without `julia` on PATH.
# The generated structs' layouts are checked against C everywhere by test
# bindings-generated, which also checks that every generated function this
# file calls exists with that number of arguments and every option field it
# sets exists (test/bindings/check_julia_calls.py); the rest was checked by
# reading only.
module LLMTrain

const libllmtrain = get(ENV, "LLMT_LIB", "libllmtrain.so.1")
const ABI_MAJOR = 1

include(joinpath(@__DIR__, "src", "LibLLMTrain.jl"))

export LLMTrainError, Spec, Plan, Job, Checkpoint, Model, Trainer, Comm, Tokenizer,
       Dataset, Loader, degrees, world_size, step!, run!, save!, start_step, begin!,
       add!, set_kv!, get_kv, wait_saved, open_latest, param_count, param,
       model_config, save_safetensors, load_safetensors!, evaluate, lr_at, steps_done,
       grad, ckpt_add!, ckpt_read!, inproc_comms, comm_rank, all_reduce!, barrier,
       byte_tokenizer, train_bpe, load_tokenizer, encode, decode, vocab_size, eot,
       dataset_info, next!, loader_state, set_loader_state!, prepare_data

version() = unsafe_string(llmt_version())

function abi_version()
    v = llmt_abi_version()
    return (Int(v >> 16), Int(v & 0xffff))
end

status_string(s::Integer) = unsafe_string(llmt_status_string(Int32(s)))

function features()
    bits = llmt_build_features()
    names = String[]
    for b in 0:63
        if bits & (UInt64(1) << b) != 0
            push!(names, unsafe_string(llmt_feature_name(UInt64(1) << b)))
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
arg_error(msg) = LLMTrainError(LLMT_ERR_INVALID_ARGUMENT, msg)

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

live(::Nothing) = throw(null_error("handle"))

# check(f(ptr)) on a live handle's pointer. The handle is rooted for the
# call: its finalizer cannot free the C object while C uses it.
function checked(f, x)
    p = live(x)
    GC.@preserve x check(() -> f(p))
end

# A String for a `const char *`: NUL-terminated (Julia Strings are), no
# NUL inside (C would stop there).
function cstr(s::AbstractString)
    t = String(s)
    occursin('\0', t) && throw(arg_error("string holds a NUL byte: $(repr(t))"))
    return t
end

# Option structs are immutable isbits: fill defaults with *_opts_init in a
# Ref, then write fields through the Ref's pointer (offsets from the type).
function setf!(r::Base.RefValue{S}, name::Symbol, v) where {S}
    i = findfirst(==(name), fieldnames(S))
    i === nothing && throw(arg_error("$S has no field $name"))
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

# A size-query text call twice: f(buf, len, need) with no buffer, then
# with `need` bytes (the library counts the NUL).
function text(f)
    need = Ref{Csize_t}(0)
    f(Ptr{UInt8}(C_NULL), Csize_t(0), need)
    buf = Vector{UInt8}(undef, Int(need[]) + 1)
    check(() -> f(buf, Csize_t(length(buf)), need))
    return GC.@preserve buf unsafe_string(pointer(buf))
end

# Element types a tensor, a checkpoint or a collective takes.
const DTYPES = Dict{DataType,Int32}(Float32 => LLMT_DTYPE_FP32, Float16 => LLMT_DTYPE_FP16,
                                    Int32 => LLMT_DTYPE_INT32, Int64 => LLMT_DTYPE_INT64,
                                    UInt16 => LLMT_DTYPE_UINT16, UInt8 => LLMT_DTYPE_UINT8)
const JLTYPES = Dict{Int32,DataType}(v => k for (k, v) in DTYPES)

dtype_of(::Type{T}) where {T} =
    haskey(DTYPES, T) ? DTYPES[T] : throw(arg_error("element type $T has no llmt_dtype"))

# An llmt_tensor (in a Ref) over `data`: a Julia array of size `dims` is
# the row-major tensor of shape reverse(dims).
function tensor_ref(data::Ptr, dtype::Int32, dims::Tuple)
    t = Ref{llmt_tensor}()
    shape = collect(Int64, reverse(dims))  # a Vector: a Tuple does not convert to Ptr{Int64}
    check(() -> llmt_tensor_init(t, sizeof(llmt_tensor), dtype, Int32(length(shape)), shape,
                                 Ptr{Cvoid}(data), LLMT_DEVICE_CPU, Int32(0)))
    return t
end

# Global shape/offsets given in Julia's order: a reversed Int64 Vector or C_NULL.
dims_arg(x) = x === nothing ? C_NULL : collect(Int64, reverse(Tuple(x)))

# A copy of the host tensor `t` (library memory) as a Julia array with the
# dims reversed. The tensor's owner must be rooted by the caller.
function copy_out(t::Base.RefValue{llmt_tensor})
    v = t[]
    haskey(JLTYPES, v.dtype) || throw(LLMTrainError(LLMT_ERR_UNSUPPORTED, "tensor dtype $(v.dtype)"))
    v.device == LLMT_DEVICE_CUDA &&
        throw(LLMTrainError(LLMT_ERR_UNSUPPORTED, "tensor on a CUDA device: not readable from the host"))
    c = Ref{Cint}(0)
    check(() -> llmt_tensor_is_contiguous(t, c))
    c[] != 0 || throw(LLMTrainError(LLMT_ERR_UNSUPPORTED, "tensor not contiguous"))
    T = JLTYPES[v.dtype]
    nd = Int(v.ndim)
    A = Array{T}(undef, ntuple(d -> Int(v.shape[nd - d + 1]), nd))
    isempty(A) || unsafe_copyto!(pointer(A), Ptr{T}(v.data), length(A))
    return A
end

# ------------------------------------------------------------------ Spec

"A parsed job spec (immutable; its queries are thread-safe)."
mutable struct Spec
    ctx::Ptr{llmt_context}
    ptr::Ptr{llmt_spec}
    function Spec(json::AbstractString)
        js = String(json)
        s = new(new_context(), C_NULL)
        out = Ref{Ptr{llmt_spec}}(C_NULL)
        try
            check(() -> llmt_spec_parse_json(s.ctx, js, sizeof(js), out))
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
            GC.@preserve spec check(() -> llmt_plan_create(p.ctx, sp, Int32(world), out))
        catch
            close(p)
            rethrow()
        end
        p.ptr = out[]
        return finalizer(close, p)
    end
end
Plan(::Nothing, world::Integer=0) = throw(null_error("spec"))
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
    checked(pp -> llmt_plan_degrees(pp, d), p)
    return Tuple(Int.(d))
end

function world_size(p::Plan)
    w = Ref{Int32}(0)
    checked(pp -> llmt_plan_world_size(pp, w), p)
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
        js = String(spec_json)
        j = new(new_context(), C_NULL, C_NULL)
        try
            sp = Ref{Ptr{llmt_spec}}(C_NULL)
            check(() -> llmt_spec_parse_json(j.ctx, js, sizeof(js), sp))
            j.spec = sp[]
            o = sized(llmt_job_opts)
            check(() -> llmt_job_opts_init(o, sizeof(llmt_job_opts)))
            setf!(o, :resume, resume ? 1 : 0)
            setf!(o, :stop_at, stop_at)
            setf!(o, :threads, threads)
            out = Ref{Ptr{llmt_job}}(C_NULL)
            dir = run_dir === nothing ? nothing : cstr(run_dir)
            GC.@preserve dir begin  # read by llmt_job_create only
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

"One optimizer step; returns the step's llmt_job_metrics (isbits)."
function step!(j::Job)
    m = sized(llmt_job_metrics)
    checked(jp -> llmt_job_step(jp, m), j)
    return m[]
end

"Steps until stop_at (n <= 0) or n more; returns the last metrics."
function run!(j::Job, n::Integer=0)
    m = sized(llmt_job_metrics)
    checked(jp -> llmt_job_run(jp, Int64(n), m), j)
    return m[]
end

save!(j::Job; async::Bool=false) = checked(jp -> llmt_job_save(jp, Int32(async ? 1 : 0)), j)

function start_step(j::Job)
    i = sized(llmt_job_info)
    checked(jp -> llmt_job_get_info(jp, i), j)
    return Int(i[].start_step)
end

# ------------------------------------------------------------------ Checkpoint

"""Tiered asynchronous checkpointing of the host's own arrays.
Julia arrays are column-major: an array of size (a, b) is described to the
library as the row-major tensor of shape (b, a) (dimensions reversed), so
global shapes and offsets are given in Julia's order and reversed here. The
library reads an added tensor at `save!`, after `add!` has returned, so
`add!` copies the array into C memory, freed once `save!` succeeds (or at
the next `begin!`, or `close`)."""
mutable struct Checkpoint
    ctx::Ptr{llmt_context}
    ptr::Ptr{llmt_ckpt}
    pending::Vector{Ptr{Cvoid}}  # Libc.malloc'd copies of add!'s arrays
    function Checkpoint(root::AbstractString; rank::Integer=0, world_size::Integer=1,
                        keep_last::Integer=3, durable_dir::Union{Nothing,AbstractString}=nothing,
                        buffered::Bool=false)
        r = cstr(root)
        k = new(new_context(), C_NULL, Ptr{Cvoid}[])
        try
            o = sized(llmt_ckpt_opts)
            check(() -> llmt_ckpt_opts_init(o, sizeof(llmt_ckpt_opts)))
            setf!(o, :rank, rank)
            setf!(o, :world_size, world_size)
            setf!(o, :keep_last, keep_last)
            buffered && setf!(o, :direct_io, 0)
            dd = durable_dir === nothing ? nothing : cstr(durable_dir)
            out = Ref{Ptr{llmt_ckpt}}(C_NULL)
            GC.@preserve dd begin  # the library copies the path
                dd !== nothing && setf!(o, :durable_dir, pointer(dd))
                check(() -> llmt_ckpt_create(k.ctx, r, o, out))
            end
            k.ptr = out[]
        catch
            close(k)
            rethrow()
        end
        return finalizer(close, k)
    end
end

function free_pending!(k::Checkpoint)
    foreach(Libc.free, k.pending)
    empty!(k.pending)
    return nothing
end

function Base.close(k::Checkpoint)
    k.ptr != C_NULL && llmt_ckpt_destroy(k.ptr)  # waits for a save in flight
    k.ctx != C_NULL && llmt_context_destroy(k.ctx)
    k.ptr = C_NULL
    k.ctx = C_NULL
    free_pending!(k)
    return nothing
end
live(k::Checkpoint) = k.ptr == C_NULL ? throw(closed_error("checkpoint")) : k.ptr

"Start describing the save of `step` (drops a description not saved)."
function begin!(k::Checkpoint, step::Integer)
    checked(kp -> llmt_ckpt_begin(kp, Int64(step)), k)
    free_pending!(k)  # the dropped description no longer refers to them
    return nothing
end

"Add `A` (this rank's block) at `global_offsets` of a tensor of `global_shape` (Julia order)."
function add!(k::Checkpoint, name::AbstractString, A::Array{T};
              global_shape=nothing, global_offsets=nothing) where {T}
    live(k)
    dt = dtype_of(T)
    n = cstr(name)
    gs = dims_arg(global_shape)
    go = dims_arg(global_offsets)
    buf = Libc.malloc(max(sizeof(A), 1))
    buf == C_NULL && throw(LLMTrainError(LLMT_ERR_OUT_OF_MEMORY, "checkpoint: $(sizeof(A)) bytes"))
    ok = false
    try
        GC.@preserve A unsafe_copyto!(Ptr{T}(buf), pointer(A), length(A))
        t = tensor_ref(buf, dt, size(A))
        checked(kp -> llmt_ckpt_add_tensor(kp, n, t, gs, go), k)
        ok = true
    finally
        ok ? push!(k.pending, buf) : Libc.free(buf)
    end
    return nothing
end

set_kv!(k::Checkpoint, key::AbstractString, value) =
    (kk = cstr(key); v = cstr(string(value)); checked(kp -> llmt_ckpt_set_kv(kp, kk, v), k))

"Snapshot (async: return after it; a writer thread persists), or save and commit."
function save!(k::Checkpoint; async::Bool=false)
    checked(kp -> llmt_ckpt_save(kp, Int32(async ? 1 : 0)), k)
    free_pending!(k)  # the snapshot holds the bytes now (kept on failure: save! may be retried)
    return nothing
end

wait_saved(k::Checkpoint; timeout_ms::Integer=-1) =
    checked(kp -> llmt_ckpt_wait(kp, Int64(timeout_ms)), k)

"Abandon the newest save (llmt_ckpt_cancel): its step is never committed; throws when there is nothing to cancel or it was committed first."
function cancel!(k::Checkpoint)
    try
        checked(kp -> llmt_ckpt_cancel(kp), k)
    finally
        free_pending!(k)  # a dropped description's copies are not read any more
    end
    return nothing
end

function open_latest(k::Checkpoint)
    s = Ref{Int64}(0)
    checked(kp -> llmt_ckpt_open_latest(kp, s), k)
    return Int(s[])
end

"Fill `A` with the region at `global_offsets` (Julia order) of the saved tensor: any sharding."
function Base.read!(k::Checkpoint, name::AbstractString, A::Array{T}; global_offsets=nothing) where {T}
    dt = dtype_of(T)
    n = cstr(name)
    go = dims_arg(global_offsets)
    GC.@preserve A begin  # the library writes A during the call only
        t = tensor_ref(pointer(A), dt, size(A))
        checked(kp -> llmt_ckpt_read(kp, n, t, go), k)
    end
    return A
end

function get_kv(k::Checkpoint, key::AbstractString)
    kk = cstr(key)
    kp = live(k)
    GC.@preserve k text((b, n, need) -> llmt_ckpt_get_kv(kp, kk, b, n, need))
end

# ------------------------------------------------------------------ Model

const ARCHS = Dict(:gpt2 => LLMT_ARCH_GPT2, :llama => LLMT_ARCH_LLAMA)
const SCHEDULES = Dict(:constant => LLMT_LR_CONSTANT, :cosine => LLMT_LR_COSINE,
                       :linear => LLMT_LR_LINEAR, :wsd => LLMT_LR_WSD)
enum_of(d, x::Integer, what) = Int32(x)
enum_of(d, x::Symbol, what) = haskey(d, x) ? d[x] : throw(arg_error("unknown $what $x"))

"""A transformer's parameters (one task at a time). Keywords left at 0 take
the library's defaults. Its `close` first closes the trainers made from it."""
mutable struct Model
    ctx::Ptr{llmt_context}
    ptr::Ptr{llmt_model}
    trainers::Vector{Any}
    function Model(; arch=:gpt2, vocab_size::Integer=0, max_seq_len::Integer=0,
                   layers::Integer=0, width::Integer=0, heads::Integer=0,
                   kv_heads::Integer=0, seed::Integer=0)
        m = new(new_context(), C_NULL, Any[])
        try
            c = sized(llmt_model_config)
            check(() -> llmt_model_config_init(c, sizeof(llmt_model_config)))
            setf!(c, :arch, enum_of(ARCHS, arch, "arch"))
            vocab_size != 0 && setf!(c, :vocab_size, vocab_size)
            max_seq_len != 0 && setf!(c, :max_seq_len, max_seq_len)
            layers != 0 && setf!(c, :layers, layers)
            width != 0 && setf!(c, :width, width)
            heads != 0 && setf!(c, :heads, heads)
            kv_heads != 0 && setf!(c, :kv_heads, kv_heads)
            seed != 0 && setf!(c, :seed, seed)
            out = Ref{Ptr{llmt_model}}(C_NULL)
            check(() -> llmt_model_create(m.ctx, c, out))
            m.ptr = out[]
        catch
            close(m)
            rethrow()
        end
        return finalizer(close, m)
    end
end

function Base.close(m::Model)
    ts = m.trainers
    m.trainers = Any[]
    foreach(close, ts)  # a trainer must not outlive its model
    m.ptr != C_NULL && llmt_model_destroy(m.ptr)
    m.ctx != C_NULL && llmt_context_destroy(m.ctx)
    m.ptr = C_NULL
    m.ctx = C_NULL
    return nothing
end
live(m::Model) = m.ptr == C_NULL ? throw(closed_error("model")) : m.ptr

"(tensors, elements)"
function param_count(m::Model)
    n = Ref{Int32}(0)
    numel = Ref{Int64}(0)
    checked(mp -> llmt_model_param_count(mp, n, numel), m)
    return (Int(n[]), Int(numel[]))
end

"""Parameter `i` (1-based): (name, a copy as a Julia array, dims reversed:
a row-major (out, in) weight comes back as an (in, out) Matrix)."""
function param(m::Model, i::Integer)
    name = Ref{Ptr{UInt8}}(C_NULL)
    t = sized(llmt_tensor)
    r = GC.@preserve m begin  # the name and the data are the model's memory
        checked(mp -> llmt_model_param(mp, Int32(i - 1), name, t), m)
        (unsafe_string(name[]), copy_out(t))
    end
    return r
end

"Parameter by name: a copy (dims reversed)."
function param(m::Model, name::AbstractString)
    n = cstr(name)
    t = sized(llmt_tensor)
    r = GC.@preserve m begin
        checked(mp -> llmt_model_find_param(mp, n, t), m)
        copy_out(t)
    end
    return r
end

"The resolved llmt_model_config (isbits; defaults filled in)."
function model_config(m::Model)
    c = sized(llmt_model_config)
    checked(mp -> llmt_model_get_config(mp, c), m)
    return c[]
end

save_safetensors(m::Model, path::AbstractString) =
    (p = cstr(path); checked(mp -> llmt_model_save_safetensors(mp, p), m))
load_safetensors!(m::Model, path::AbstractString) =
    (p = cstr(path); checked(mp -> llmt_model_load_safetensors(mp, p), m))

# ------------------------------------------------------------------ Trainer

"""Runs steps on one Model (one task at a time); closed by its model's
`close`. Keywords left at 0/nothing take the library's defaults, a
GPT-style preset (cosine schedule, beta2 0.95, weight decay 0.1, clip 1)."""
mutable struct Trainer
    model::Model
    ptr::Ptr{llmt_trainer}
    function Trainer(m::Model; micro_batch::Integer=0, seq_len::Integer=0,
                     grad_accum::Integer=0, threads::Integer=0, lr::Real=0,
                     total_steps::Integer=0, warmup_steps=nothing, schedule=nothing,
                     weight_decay=nothing, grad_clip=nothing, beta2=nothing)
        mp = live(m)
        o = sized(llmt_trainer_opts)
        check(() -> llmt_trainer_opts_init(o, sizeof(llmt_trainer_opts)))
        micro_batch != 0 && setf!(o, :micro_batch, micro_batch)
        seq_len != 0 && setf!(o, :seq_len, seq_len)
        grad_accum != 0 && setf!(o, :grad_accum, grad_accum)
        threads != 0 && setf!(o, :threads, threads)
        lr != 0 && setf!(o, :lr, lr)
        total_steps != 0 && setf!(o, :total_steps, total_steps)
        warmup_steps === nothing || setf!(o, :warmup_steps, warmup_steps)
        schedule === nothing || setf!(o, :schedule, enum_of(SCHEDULES, schedule, "schedule"))
        weight_decay === nothing || setf!(o, :weight_decay, weight_decay)
        grad_clip === nothing || setf!(o, :grad_clip, grad_clip)
        beta2 === nothing || setf!(o, :beta2, beta2)
        out = Ref{Ptr{llmt_trainer}}(C_NULL)
        GC.@preserve m check(() -> llmt_trainer_create(mp, o, out))
        t = new(m, out[])
        push!(m.trainers, t)
        return finalizer(close, t)
    end
end
Trainer(::Nothing; kwargs...) = throw(null_error("model"))

function Base.close(t::Trainer)
    if t.ptr != C_NULL
        llmt_trainer_destroy(t.ptr)
        t.ptr = C_NULL
        filter!(x -> x !== t, t.model.trainers)
    end
    return nothing
end
live(t::Trainer) = t.ptr == C_NULL ? throw(closed_error("trainer")) : t.ptr

# f(batch::Ref{llmt_batch}) over inputs and targets of size (seq_len,
# sequences): the row-major (sequences, seq_len) rows the library wants.
function with_batch(f, inputs::AbstractMatrix, targets::AbstractMatrix)
    size(inputs) == size(targets) ||
        throw(arg_error("trainer: inputs $(size(inputs)) and targets $(size(targets)) differ"))
    inp = inputs isa Matrix{Int32} ? inputs : Matrix{Int32}(inputs)
    tg = targets isa Matrix{Int32} ? targets : Matrix{Int32}(targets)
    r = GC.@preserve inp tg begin  # read during the call only
        b = Ref(llmt_batch(Csize_t(sizeof(llmt_batch)), pointer(inp), pointer(tg),
                           Int32(size(inp, 2)), Int32(size(inp, 1))))
        f(b)
    end
    return r
end

"""One optimizer step on inputs/targets of size (seq_len, micro_batch *
grad_accum) (a Loader's batches); returns llmt_step_metrics (isbits)."""
function step!(t::Trainer, inputs::AbstractMatrix, targets::AbstractMatrix)
    m = sized(llmt_step_metrics)
    with_batch(inputs, targets) do b
        checked(tp -> llmt_trainer_step(tp, b, m), t)
    end
    return m[]
end

"Mean loss without gradients (LLMT_ERR_NUMERIC when not finite)."
function evaluate(t::Trainer, inputs::AbstractMatrix, targets::AbstractMatrix)
    loss = Ref{Float32}(0)
    with_batch(inputs, targets) do b
        checked(tp -> llmt_trainer_evaluate(tp, b, loss), t)
    end
    return loss[]
end

"Learning rate of step number `step` (from 1, as llmt_step_metrics.step)."
function lr_at(t::Trainer, step::Integer)
    lr = Ref{Float32}(0)
    checked(tp -> llmt_trainer_lr_at(tp, Int64(step), lr), t)
    return lr[]
end

"Steps done so far."
function steps_done(t::Trainer)
    s = Ref{Int64}(0)
    checked(tp -> llmt_trainer_get_step(tp, s), t)
    return Int(s[])
end

"Gradient of parameter `i` (1-based) after a step or forward pass: a copy, dims reversed."
function grad(t::Trainer, i::Integer)
    v = sized(llmt_tensor)
    r = GC.@preserve t begin
        checked(tp -> llmt_trainer_grad(tp, Int32(i - 1), v), t)
        copy_out(v)
    end
    return r
end

"""Add the trainer's state (parameters, AdamW moments, step) to the save
being described on `k` (between begin! and save!). Zero-copy: the views
are the library's own memory."""
function ckpt_add!(t::Trainer, k::Union{Checkpoint,Nothing})
    kp = live(k)
    GC.@preserve k checked(tp -> llmt_trainer_ckpt_add(tp, kp), t)
end

"Restore the trainer's state from the checkpoint open on `k` (open_latest)."
function ckpt_read!(t::Trainer, k::Union{Checkpoint,Nothing})
    kp = live(k)
    GC.@preserve k checked(tp -> llmt_trainer_ckpt_read(tp, kp), t)
end

# ------------------------------------------------------------------ Comm

# The context of an in-process group: it must outlive every rank, so the
# last rank's close frees it (a counter, no lock: a finalizer may run it).
mutable struct CommGroup
    ctx::Ptr{llmt_context}
    refs::Threads.Atomic{Int}
end

"""One rank's membership of a group. One task drives a rank; the ranks of
an in-process group are driven by tasks on different threads (julia
--threads >= the world size). A collective disables Julia's GC on its
thread for the call: a thread blocked in C cannot reach a GC safepoint,
and a collection started by a peer rank's thread would otherwise wait for
it while it waits for that peer."""
mutable struct Comm
    ptr::Ptr{llmt_comm}
    group::Union{Nothing,CommGroup}
end

"n in-process ranks (threads of this process): `Comm`s, rank i at index i+1."
function inproc_comms(n::Integer; timeout_ms::Integer=0)
    n > 0 || throw(arg_error("comm: world size must be > 0"))
    ctx = new_context()
    comms = fill(Ptr{llmt_comm}(C_NULL), n)  # written by the call
    try
        o = sized(llmt_comm_opts)
        check(() -> llmt_comm_opts_init(o, sizeof(llmt_comm_opts)))
        timeout_ms > 0 && setf!(o, :timeout_ms, timeout_ms)
        check(() -> llmt_comm_create_inproc(ctx, Int32(n), o, comms))
    catch
        llmt_context_destroy(ctx)
        rethrow()
    end
    g = CommGroup(ctx, Threads.Atomic{Int}(n))
    return [finalizer(close, Comm(p, g)) for p in comms]
end

function Base.close(c::Comm)
    c.ptr == C_NULL && return nothing
    llmt_comm_destroy(c.ptr)
    c.ptr = C_NULL
    g = c.group
    c.group = nothing
    if g !== nothing && Threads.atomic_sub!(g.refs, 1) == 1  # the last rank
        llmt_context_destroy(g.ctx)
        g.ctx = C_NULL
    end
    return nothing
end
live(c::Comm) = c.ptr == C_NULL ? throw(closed_error("comm")) : c.ptr

function comm_rank(c::Comm)
    r = Ref{Int32}(0)
    checked(cp -> llmt_comm_rank(cp, r), c)
    return Int(r[])
end

function world_size(c::Comm)
    r = Ref{Int32}(0)
    checked(cp -> llmt_comm_size(cp, r), c)
    return Int(r[])
end

# A blocking collective: GC off on this thread for the call (see Comm).
function collective(f, c::Comm)
    prev = GC.enable(false)
    try
        checked(f, c)
    finally
        GC.enable(prev)
    end
end

const REDUCE_OPS = Dict(:sum => LLMT_REDUCE_SUM, :avg => LLMT_REDUCE_AVG,
                        :max => LLMT_REDUCE_MAX, :min => LLMT_REDUCE_MIN)

"Reduce `A` in place across the group (collective; every rank the same length and type)."
function all_reduce!(c::Comm, A::Array{T}; op::Symbol=:sum) where {T}
    dt = dtype_of(T)
    haskey(REDUCE_OPS, op) || throw(arg_error("comm: unknown reduce op $op"))
    o = REDUCE_OPS[op]
    GC.@preserve A begin  # read and written during the call only
        p = Ptr{Cvoid}(pointer(A))
        collective(cp -> llmt_comm_all_reduce(cp, p, p, Csize_t(length(A)), dt, o, C_NULL), c)
    end
    return A
end

"Wait for every rank (collective)."
barrier(c::Comm) = collective(cp -> llmt_comm_barrier(cp), c)

# ------------------------------------------------------------------ Tokenizer

"Text to ids and back (one task at a time)."
mutable struct Tokenizer
    ctx::Ptr{llmt_context}
    ptr::Ptr{llmt_tokenizer}
    # make(ctx, out::Ref{Ptr{llmt_tokenizer}}) -> status; see byte_tokenizer etc.
    function Tokenizer(make::Function)
        t = new(new_context(), C_NULL)
        out = Ref{Ptr{llmt_tokenizer}}(C_NULL)
        try
            check(() -> make(t.ctx, out))
        catch
            close(t)
            rethrow()
        end
        t.ptr = out[]
        return finalizer(close, t)
    end
end

function Base.close(t::Tokenizer)
    t.ptr != C_NULL && llmt_tokenizer_destroy(t.ptr)
    t.ctx != C_NULL && llmt_context_destroy(t.ctx)
    t.ptr = C_NULL
    t.ctx = C_NULL
    return nothing
end
live(t::Tokenizer) = t.ptr == C_NULL ? throw(closed_error("tokenizer")) : t.ptr

"256 byte tokens + <|endoftext|> (256)."
byte_tokenizer() = Tokenizer((ctx, out) -> llmt_tokenizer_create_bytes(ctx, out))

"A byte-level BPE of up to `vocab` ids learned from `text`."
function train_bpe(text::AbstractString, vocab::Integer)
    s = String(text)  # any bytes: its length is passed
    Tokenizer((ctx, out) -> llmt_tokenizer_train_bpe(ctx, s, sizeof(s), Int32(vocab), out))
end

"A tokenizer file of ours (save!)."
load_tokenizer(path::AbstractString) =
    (p = cstr(path); Tokenizer((ctx, out) -> llmt_tokenizer_load(ctx, p, out)))

save!(t::Tokenizer, path::AbstractString) =
    (p = cstr(path); checked(tp -> llmt_tokenizer_save(tp, p), t))

"Ids (Vector{Int32}) of `text` (any bytes)."
function encode(t::Tokenizer, text::AbstractString)
    s = String(text)
    n = Ref{Csize_t}(0)
    checked(tp -> llmt_tokenizer_encode(tp, s, sizeof(s), Ptr{Int32}(C_NULL), Csize_t(0), n), t)
    ids = Vector{Int32}(undef, Int(n[]) + 1)
    checked(tp -> llmt_tokenizer_encode(tp, s, sizeof(s), ids, Csize_t(length(ids)), n), t)
    return resize!(ids, Int(n[]))
end

"The text of `ids`."
function decode(t::Tokenizer, ids::AbstractVector{<:Integer})
    v = ids isa Vector{Int32} ? ids : Vector{Int32}(ids)
    n = Ref{Csize_t}(0)
    checked(tp -> llmt_tokenizer_decode(tp, v, Csize_t(length(v)), Ptr{UInt8}(C_NULL), Csize_t(0), n), t)
    buf = Vector{UInt8}(undef, Int(n[]) + 1)
    checked(tp -> llmt_tokenizer_decode(tp, v, Csize_t(length(v)), buf, Csize_t(length(buf)), n), t)
    return String(resize!(buf, Int(n[])))
end

function vocab_size(t::Tokenizer)
    v = Ref{Int32}(0)
    checked(tp -> llmt_tokenizer_vocab_size(tp, v), t)
    return Int(v[])
end

function eot(t::Tokenizer)
    v = Ref{Int32}(0)
    checked(tp -> llmt_tokenizer_eot(tp, v), t)
    return Int(v[])
end

# ------------------------------------------------------------------ Dataset, Loader

"Token shards opened with mmap (a file, a directory or a glob). Its `close` closes its loaders."
mutable struct Dataset
    ctx::Ptr{llmt_context}
    ptr::Ptr{llmt_dataset}
    loaders::Vector{Any}
    function Dataset(path::AbstractString; verify::Bool=false)
        p = cstr(path)
        d = new(new_context(), C_NULL, Any[])
        out = Ref{Ptr{llmt_dataset}}(C_NULL)
        try
            check(() -> llmt_dataset_open(d.ctx, p, Int32(verify ? 1 : 0), out))
        catch
            close(d)
            rethrow()
        end
        d.ptr = out[]
        return finalizer(close, d)
    end
end

function Base.close(d::Dataset)
    ls = d.loaders
    d.loaders = Any[]
    foreach(close, ls)  # a loader must not outlive its dataset
    d.ptr != C_NULL && llmt_dataset_destroy(d.ptr)
    d.ctx != C_NULL && llmt_context_destroy(d.ctx)
    d.ptr = C_NULL
    d.ctx = C_NULL
    return nothing
end
live(d::Dataset) = d.ptr == C_NULL ? throw(closed_error("dataset")) : d.ptr

function dataset_info(d::Dataset)
    i = sized(llmt_dataset_info)
    checked(dp -> llmt_dataset_get_info(dp, i), d)
    v = i[]
    return (shards=Int(v.shards), vocab_size=Int(v.vocab_size), tokens=Int(v.tokens),
            documents=Int(v.documents), fingerprint=v.fingerprint)
end

"""One data-parallel rank's micro-batches over a Dataset (one task).
Keywords left at 0/nothing take the library's defaults."""
mutable struct Loader
    dataset::Dataset
    ptr::Ptr{llmt_loader}
    seq_len::Int
    micro_batch::Int
    function Loader(d::Dataset; seq_len::Integer=0, micro_batch::Integer=0,
                    grad_accum::Integer=0, dp_rank::Integer=0, dp_size::Integer=0,
                    shuffle::Bool=true, prefetch=nothing, seed::Integer=0)
        dp = live(d)
        o = sized(llmt_loader_opts)
        check(() -> llmt_loader_opts_init(o, sizeof(llmt_loader_opts)))
        seq_len != 0 && setf!(o, :seq_len, seq_len)
        micro_batch != 0 && setf!(o, :micro_batch, micro_batch)
        grad_accum != 0 && setf!(o, :grad_accum, grad_accum)
        dp_rank != 0 && setf!(o, :dp_rank, dp_rank)
        dp_size != 0 && setf!(o, :dp_size, dp_size)
        shuffle || setf!(o, :shuffle, 0)
        prefetch === nothing || setf!(o, :prefetch, prefetch)
        seed != 0 && setf!(o, :seed, seed)
        out = Ref{Ptr{llmt_loader}}(C_NULL)
        GC.@preserve d check(() -> llmt_loader_create(dp, o, out))
        l = new(d, out[], Int(o[].seq_len), Int(o[].micro_batch))
        push!(d.loaders, l)
        return finalizer(close, l)
    end
end
Loader(::Nothing; kwargs...) = throw(null_error("dataset"))

function Base.close(l::Loader)
    if l.ptr != C_NULL
        llmt_loader_destroy(l.ptr)  # stops its prefetch thread
        l.ptr = C_NULL
        filter!(x -> x !== l, l.dataset.loaders)
    end
    return nothing
end
live(l::Loader) = l.ptr == C_NULL ? throw(closed_error("loader")) : l.ptr

"""The next micro-batch: (inputs, targets), each a new Matrix{Int32} of
size (seq_len, micro_batch), a column per sequence (the library's row-major
(micro_batch, seq_len) rows)."""
function next!(l::Loader)
    inp = Matrix{Int32}(undef, l.seq_len, l.micro_batch)
    tg = Matrix{Int32}(undef, l.seq_len, l.micro_batch)
    checked(lp -> llmt_loader_next(lp, inp, tg, Ptr{Int64}(C_NULL)), l)
    return (inp, tg)
end

"The state a checkpoint keeps (only at a step boundary)."
function loader_state(l::Loader)
    s = sized(llmt_loader_state)
    checked(lp -> llmt_loader_get_state(lp, s), l)
    v = s[]
    return (seed=v.seed, epoch=Int(v.epoch), cursor=Int(v.cursor),
            samples_per_epoch=Int(v.samples_per_epoch), fingerprint=v.fingerprint,
            seq_len=Int(v.seq_len), order=Int(v.order))
end

"Continue from a state of loader_state (any dp layout)."
function set_loader_state!(l::Loader, st)
    s = Ref(llmt_loader_state(Csize_t(sizeof(llmt_loader_state)), UInt64(st.seed),
                              Int64(st.epoch), Int64(st.cursor), Int64(st.samples_per_epoch),
                              UInt64(st.fingerprint),
                              # 0: not recorded (a state saved before them), not checked
                              Int32(hasproperty(st, :seq_len) ? st.seq_len : 0),
                              Int32(hasproperty(st, :order) ? st.order : 0)))
    checked(lp -> llmt_loader_set_state(lp, s), l)
end

"The loader's state as keys of the save being described on `k`."
function ckpt_add!(l::Loader, k::Union{Checkpoint,Nothing})
    kp = live(k)
    GC.@preserve k checked(lp -> llmt_loader_ckpt_add(lp, kp), l)
end

"Continue from the loader keys of the checkpoint open on `k`."
function ckpt_read!(l::Loader, k::Union{Checkpoint,Nothing})
    kp = live(k)
    GC.@preserve k checked(lp -> llmt_loader_ckpt_read(lp, kp), l)
end

"""Ingest, filter, deduplicate and tokenize `inputs` (files or directories)
into token shards under out_dir (train/, val/); returns the report."""
function prepare_data(inputs::AbstractVector{<:AbstractString}, tok::Union{Tokenizer,Nothing},
                      out_dir::AbstractString; val_fraction=nothing, no_filter::Bool=false,
                      no_dedup::Bool=false, shard_tokens::Integer=0, seed::Integer=0)
    tp = live(tok)
    strs = String[cstr(s) for s in inputs]
    od = cstr(out_dir)
    ctx = new_context()
    try
        o = sized(llmt_data_prepare_opts)
        check(() -> llmt_data_prepare_opts_init(o, sizeof(llmt_data_prepare_opts)))
        val_fraction === nothing || setf!(o, :val_fraction, val_fraction)
        no_filter && setf!(o, :no_filter, 1)
        no_dedup && setf!(o, :no_dedup, 1)
        shard_tokens != 0 && setf!(o, :shard_tokens, shard_tokens)
        seed != 0 && setf!(o, :seed, seed)
        r = sized(llmt_data_report)
        GC.@preserve strs tok begin  # the paths are read during the call only
            ptrs = Ptr{UInt8}[pointer(s) for s in strs]
            check(() -> llmt_data_prepare(ctx, ptrs, Csize_t(length(ptrs)), tp, od, o, r))
        end
        v = r[]
        return (files=Int(v.files), documents=Int(v.documents), kept=Int(v.verdicts[1]),
                train_documents=Int(v.train_documents), val_documents=Int(v.val_documents),
                train_tokens=Int(v.train_tokens), val_tokens=Int(v.val_tokens),
                train_shards=Int(v.train_shards), val_shards=Int(v.val_shards),
                seconds=v.seconds)
    finally
        llmt_context_destroy(ctx)
    end
end

# ------------------------------------------------------------------ nothing

# `nothing` where a handle is required: LLMT_ERR_NULL_POINTER, never a
# MethodError (one method per function, so no ambiguity between handles).
for f in (:degrees, :world_size, :step!, :run!, :save!, :start_step, :begin!, :add!,
          :set_kv!, :get_kv, :wait_saved, :open_latest, :param_count, :param,
          :model_config, :save_safetensors, :load_safetensors!, :evaluate, :lr_at,
          :steps_done, :grad, :ckpt_add!, :ckpt_read!, :comm_rank, :all_reduce!, :barrier,
          :encode, :decode, :vocab_size, :eot, :dataset_info, :next!, :loader_state,
          :set_loader_state!)
    @eval $f(::Nothing, args...; kwargs...) = throw(null_error("handle"))
end

function __init__()
    abi_version()[1] == ABI_MAJOR ||
        error("libllmtrain ABI $(abi_version()) does not match these bindings ($ABI_MAJOR)")
    for (T, id) in STRUCT_IDS
        n = llmt_sizeof(Int32(id))
        n == sizeof(T) || error("$(T): $(sizeof(T)) bytes here, $n in the library")
    end
end

end # module
