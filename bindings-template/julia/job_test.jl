# The Julia job test (issue 21): 20 steps of a tiny GPT on the repo's doc/,
# stopped and saved at 10, resumed in a new Job, losses equal `llmtrain
# train`'s on the same spec; a bad key named in the error; misuse throws
# (use after close, double close, nothing); a tensor saved in halves by 2
# ranks read whole by 1. Then what the Go test checks of the other handles:
# nothing for every handle -> LLMT_ERR_NULL_POINTER, use after close (a
# trainer closed by its model, a loader by its dataset) -> LLMT_ERR_STATE,
# double close; the library's message in errors; 2 in-process ranks
# all-reduce on 2 threads; tokenizer, prepare_data, Dataset, Loader, Model,
# Trainer: 6 steps uninterrupted equal 4 + checkpoint (trainer and loader
# state, async save) + 2 resumed in new handles, loss for loss.
# NEVER RUN: no julia on the machines that wrote it.
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

# ------------------------------------------------------------ other handles
function throws(f, status)
    try
        f()
        return false
    catch e
        e isa LLMTrainError && e.status == status && return true
        println("     threw ", e)
        return false
    end
end
msg(f) = try f(); "" catch e; e isa LLMTrainError ? e.message : string(e) end

z = zeros(Int32, 1, 1)
nullcases = [() -> degrees(nothing), () -> param_count(nothing), () -> Trainer(nothing),
             () -> step!(nothing, z, z), () -> step!(nothing), () -> begin!(nothing, 1),
             () -> barrier(nothing), () -> all_reduce!(nothing, Float32[1]),
             () -> encode(nothing, "x"), () -> dataset_info(nothing), () -> Loader(nothing),
             () -> next!(nothing), () -> prepare_data(["x"], nothing, tmp)]
check(all(f -> throws(f, LLMTrain.LLMT_ERR_NULL_POINTER), nullcases),
      "nothing for each handle throws LLMT_ERR_NULL_POINTER")

m = Model(vocab_size=64, max_seq_len=8, layers=1, width=16, heads=2)
tr = Trainer(m; micro_batch=1, seq_len=8, threads=1)
check(throws(() -> ckpt_add!(tr, nothing), LLMTrain.LLMT_ERR_NULL_POINTER), "nothing as a checkpoint")
close(m); close(m)
check(throws(() -> step!(tr, zeros(Int32, 8, 1), zeros(Int32, 8, 1)), LLMTrain.LLMT_ERR_STATE),
      "a trainer closed by its model's close throws LLMT_ERR_STATE")
check(throws(() -> param_count(m), LLMTrain.LLMT_ERR_STATE) && occursin("model: closed", msg(() -> param_count(m))),
      "model after close: model: closed")
close(tr)
tok = byte_tokenizer()
close(tok); close(tok)
check(throws(() -> encode(tok, "x"), LLMTrain.LLMT_ERR_STATE), "tokenizer after close")
ck = Checkpoint(joinpath(tmp, "closed"))
close(ck); close(ck)
check(throws(() -> save!(ck), LLMTrain.LLMT_ERR_STATE), "checkpoint after close")
check(occursin("heads", msg(() -> Model(width=30, heads=7))), "bad model config: the library names heads")
e = try Dataset(joinpath(tmp, "none")); nothing catch x; x end
check(e isa LLMTrainError && e.status != LLMTrain.LLMT_ERR_STATE && !isempty(e.message),
      "missing dataset: $e")

# two in-process ranks, each on its own thread
if Threads.nthreads() >= 2
    comms = inproc_comms(2; timeout_ms=20000)
    bufs = [Float32[r, 10r] for r in 1:2]
    tasks = [Threads.@spawn all_reduce!(comms[r], bufs[r]) for r in 1:2]
    errs = [try fetch(t); nothing catch x; x end for t in tasks]
    check(all(isnothing, errs) && all(b -> b == Float32[3, 30], bufs),
          "2 in-process ranks all-reduce (sum) on 2 threads: $bufs $errs")
    check(comm_rank.(comms) == [0, 1] && world_size.(comms) == [2, 2], "comm ranks and sizes")
    foreach(close, comms); foreach(close, comms)
    check(throws(() -> barrier(comms[1]), LLMTrain.LLMT_ERR_STATE), "comm after close")
else
    println("skip the all-reduce: julia runs 1 thread (use --threads 2)")
end
check(try inproc_comms(0); false catch x; x isa LLMTrainError end, "0 ranks refused")

# the data pipeline and a trainer with a checkpoint
tok = byte_tokenizer()
ids = encode(tok, "héllo, wörld")
check(decode(tok, ids) == "héllo, wörld" && vocab_size(tok) == 257 && eot(tok) == 256,
      "byte tokenizer round trip, 257 ids, eot 256")
data = joinpath(tmp, "data")
rep = prepare_data([joinpath(src, "doc")], tok, data; val_fraction=0.05)
check(rep.train_tokens > 0 && rep.train_shards > 0, "prepare_data: $rep")
close(tok)
const T, B = 16, 2
function open_run()
    ds = Dataset(joinpath(data, "train"); verify=true)
    ld = Loader(ds; seq_len=T, micro_batch=B, seed=5)
    m = Model(vocab_size=257, max_seq_len=T, layers=1, width=32, heads=2, seed=9)
    tr = Trainer(m; micro_batch=B, seq_len=T, threads=1, lr=1e-2, total_steps=6)
    return (ds=ds, ld=ld, m=m, tr=tr)
end
function train_step(r)
    inp, tg = next!(r.ld)
    s = step!(r.tr, inp, tg)
    s.lr == lr_at(r.tr, s.step) || println("     lr_at($(s.step)) != the step's lr")
    return s.loss
end
a = open_run()
check(dataset_info(a.ds).tokens == rep.train_tokens, "dataset holds the prepared tokens")
full = [train_step(a) for _ in 1:6]
close(a.ds)  # closes its loader
close(a.m)   # closes its trainer
check(throws(() -> next!(a.ld), LLMTrain.LLMT_ERR_STATE), "a loader closed by its dataset's close")

root = joinpath(tmp, "ckpt")
b = open_run()
check([train_step(b) for _ in 1:4] == full[1:4], "4 steps equal the uninterrupted run's")
ck = Checkpoint(root; buffered=true, durable_dir=joinpath(tmp, "durable"))
begin!(ck, 4)
ckpt_add!(b.tr, ck)
ckpt_add!(b.ld, ck)
save!(ck; async=true)
train_step(b)  # training goes on while the writer persists
wait_saved(ck)
close(ck)
close(b.ds); close(b.m)

c = open_run()
rd = Checkpoint(root)
check(open_latest(rd) == 4, "the trainer checkpoint is committed at 4")
ckpt_read!(c.tr, rd)
ckpt_read!(c.ld, rd)
close(rd)
check(steps_done(c.tr) == 4, "resumed trainer at step 4")
resumed = [train_step(c) for _ in 5:6]
check(resumed == full[5:6], "resumed steps 5-6 equal the uninterrupted run's: $resumed vs $(full[5:6])")
name, p1 = param(c.m, 1)
check(!isempty(name) && !isempty(p1) && param(c.m, name) == p1 && size(grad(c.tr, 1)) == size(p1),
      "param 1 ($name, $(size(p1))) by index and by name; its gradient has its size")
close(c.ds); close(c.m)
println("losses ", full)

rm(tmp; recursive=true)
exit(fails == 0 ? 0 : 1)
