#!/usr/bin/python3
"""An ordinary PyTorch training loop that embeds two parts of llmtrain only:
the data loader and the tiered asynchronous checkpointing (issue 21).

The model, optimizer, loss and backward are plain torch (a tiny causal
transformer over byte tokens, torch.optim.AdamW). llmtrain gives it:
  - the batches: a corpus prepared once into token shards (byte tokenizer),
    read by llmt_loader (deterministic global sample cursor, a prefetch
    thread) into numpy int32 buffers that torch views without a copy;
  - the checkpoints: every `--save-every` steps the parameters and AdamW
    moments are added to llmt_ckpt as views of the torch tensors' own memory
    (no copy until the snapshot), saved asynchronously (the loop waits only
    for the snapshot into host memory; a writer thread persists to the local
    tier with O_DIRECT and copies the committed checkpoint to a durable
    directory), with the loader's position and the optimizer's step count as
    key/values. The save is written as two data-parallel "ranks" would
    write it: rank 0 and rank 1 of world 2 (two Checkpoint handles of this
    process) each add one half of every tensor, as a block with its global
    offsets; the resume reads them back into ONE rank (whole tensors):
    resharding 2 -> 1 on load, reading only the overlapping chunks.

usage:
  embed_torch.py train WORKDIR [--steps N] [--save-every K] [--stop-at S]
                 [--resume]                        one run; prints losses JSON
  embed_torch.py check [WORKDIR]                   the smoke test: a run of
                 12 steps vs a run stopped at 6 and resumed by a NEW process
                 from the 2-rank checkpoint; the losses must be equal
  embed_torch.py bench OUT.json [--mb M] [--rounds R]   (bench/embed/)

The library: $LLMT_LIB or libllmtrain.so.1 on the loader path. Needs torch
and numpy (Debian: python3-torch); exits 77 without them.
"""
import argparse
import glob
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:  # the smoke test SKIPs
    print("embed_torch: %s: SKIP" % e, file=sys.stderr)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bindings-template", "python"))
import llmtrain  # noqa: E402

SEQ, BATCH = 32, 8


# ------------------------------------------------------------ the torch side

class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab=257, d=64, layers=2, heads=4, seq=SEQ):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1))

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t))
        for b in self.blocks:
            x = b(x, self.mask[:t, :t])
        return self.head(self.ln(x))


def make_model(d=64, layers=2):
    torch.manual_seed(0)
    model = TinyGPT(d=d, layers=layers)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    return model, opt


def train_state(model, opt):
    """(name, tensor) of every tensor a resume needs, in a fixed order: the
    parameters and AdamW's moments (created eagerly so the names exist
    before the first step)."""
    out = []
    for name, p in model.named_parameters():
        st = opt.state[p]
        if not st:
            st["step"] = torch.tensor(0.0)
            st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        out += [("param/" + name, p.data), ("adam_m/" + name, st["exp_avg"]),
                ("adam_v/" + name, st["exp_avg_sq"])]
    return out


def adam_step(opt):
    return int(next(iter(opt.state.values()))["step"].item())


def set_adam_step(opt, step):
    for st in opt.state.values():
        st["step"].fill_(float(step))


# ------------------------------------------------------------ the llmtrain side

def prepare_data(workdir):
    """Token shards of a corpus (the repo's doc/*.md), once per workdir."""
    out = os.path.join(workdir, "data")
    if os.path.isdir(os.path.join(out, "train")):
        return out
    corpus = os.path.join(workdir, "corpus")
    os.makedirs(corpus, exist_ok=True)
    for p in sorted(glob.glob(os.path.join(HERE, "..", "doc", "*.md"))):
        shutil.copy(p, corpus)
    lib = llmtrain.Library(os.environ.get("LLMT_LIB"))
    with llmtrain.Context(lib, log_level="error") as ctx:
        with llmtrain.Tokenizer.create_bytes(ctx) as tok:
            llmtrain.prepare(ctx, [corpus], tok, out, val_fraction=0.05, shard_tokens=100000)
    return out


class Data:
    """llmt_dataset + llmt_loader feeding torch: the loader fills numpy
    int32 buffers in place; torch views them (from_numpy, no copy)."""

    def __init__(self, prepared):
        self.lib = llmtrain.Library(os.environ.get("LLMT_LIB"))
        self.ctx = llmtrain.Context(self.lib, log_level="error")
        self.ds = llmtrain.Dataset(self.ctx, os.path.join(prepared, "train"))
        self.loader = self.ds.loader(seq_len=SEQ, micro_batch=BATCH, seed=7)
        self.inp = np.empty(BATCH * SEQ, np.int32)
        self.tgt = np.empty(BATCH * SEQ, np.int32)

    def next(self):
        self.loader.next(self.inp, self.tgt)
        x = torch.from_numpy(self.inp).view(BATCH, SEQ).long()
        y = torch.from_numpy(self.tgt).view(BATCH, SEQ).long()
        return x, y

    def state(self):
        return self.loader.get_state().as_dict()

    def set_state(self, d):
        self.loader.set_state(d)

    def close(self):
        self.loader.close()
        self.ds.close()
        self.ctx.close()


class Checkpointer:
    """Async tiered saves of the torch state as `ranks` data-parallel ranks
    would write it (each rank adds the dim-0 half of every tensor it owns),
    and loads into one rank whatever the number of ranks that saved."""

    def __init__(self, root, durable, ranks=2):
        self.ranks = [llmtrain.Checkpoint(root, rank=r, world_size=ranks, keep_last=2,
                                          durable_dir=durable, durable_keep_last=2)
                      for r in range(ranks)]

    def save(self, step, state, kv):
        """Blocks the loop only for the snapshot; returns the seconds spent."""
        t0 = time.perf_counter()
        n = len(self.ranks)
        for r, ck in enumerate(self.ranks):
            ck.begin(step)
            for name, t in state:
                rows = t.shape[0]
                lo, hi = rows * r // n, rows * (r + 1) // n
                # a view of this rank's rows of the torch tensor: no copy
                ck.add(name, t[lo:hi], global_shape=tuple(t.shape),
                       global_offsets=(lo,) + (0,) * (t.dim() - 1))
            for k, v in kv.items():
                ck.set_kv(k, v)
            ck.save(async_=True)  # returns after the snapshot
        return time.perf_counter() - t0

    def wait(self):
        for ck in self.ranks:
            ck.wait()

    def close(self):
        for ck in self.ranks:
            ck.close()


def load_into(root, state):
    """Open the newest committed checkpoint in ONE rank and read every tensor
    whole into the torch tensors (in place, resharding the saved halves).
    Returns (step, key/values)."""
    with llmtrain.Checkpoint(root) as ck:
        step = ck.open_latest()
        for name, t in state:
            ck.read(name, t)
        kv = {k: ck.get_kv(k) for k in ("loader", "adam_step")}
    return step, kv


# ------------------------------------------------------------ the loop

def train(workdir, steps, save_every, stop_at=None, resume=False, quiet=False):
    """The ordinary loop. Returns {step: loss} of the steps this run did."""
    torch.set_num_threads(1)  # bitwise-reproducible CPU kernels
    prepared = prepare_data(workdir)
    data = Data(prepared)
    model, opt = make_model()
    state = train_state(model, opt)
    root, durable = os.path.join(workdir, "ckpt"), os.path.join(workdir, "durable")
    start = 0
    if resume:
        start, kv = load_into(root, state)
        data.set_state(json.loads(kv["loader"]))
        set_adam_step(opt, int(kv["adam_step"]))
    ck = Checkpointer(root, durable)
    losses, stalls = {}, []
    for step in range(start + 1, (stop_at or steps) + 1):
        x, y = data.next()
        loss = F.cross_entropy(model(x).view(-1, 257), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses[step] = loss.item()
        if step % save_every == 0 or step == stop_at:
            kv = {"loader": json.dumps(data.state()), "adam_step": adam_step(opt)}
            stalls.append(ck.save(step, state, kv))
        if not quiet:
            print("step %d loss %.6f" % (step, losses[step]), file=sys.stderr)
    ck.wait()
    ck.close()
    data.close()
    return losses, stalls


def check(workdir):
    """The smoke test: uninterrupted vs stopped at 6 + resumed elsewhere."""
    fails = 0
    full, _ = train(os.path.join(workdir, "full"), 12, 4, quiet=True)
    part = os.path.join(workdir, "part")
    first, stalls = train(part, 12, 4, stop_at=6, quiet=True)
    durable = sorted(d for d in os.listdir(os.path.join(part, "durable")) if d.startswith("step-"))
    with open(os.path.join(part, "ckpt", "step-000000000006", "manifest.json")) as f:
        saved_by = json.load(f).get("world_size")
    # the resume: a new process, one rank, from the checkpoint of step 6
    # that two ranks wrote (and the durable tier holds a copy of it)
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "train", part,
                          "--steps", "12", "--save-every", "4", "--resume"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        print(out.stderr)
        print("FAIL resume process exited %d" % out.returncode)
        return 1
    second = {int(k): v for k, v in json.loads(out.stdout.splitlines()[-1]).items()}
    committed = sorted(os.listdir(os.path.join(part, "ckpt")))
    checks = [
        (sorted(first) == list(range(1, 7)), "first run: steps 1-6"),
        (sorted(second) == list(range(7, 13)), "resumed run: steps 7-12"),
        (all(first[s] == full[s] for s in first), "steps 1-6 equal the uninterrupted run"),
        (all(second[s] == full[s] for s in second),
         "resumed steps 7-12 equal the uninterrupted run (bitwise)"),
        (full[12] < full[1], "the loss went down (%.3f -> %.3f)" % (full[1], full[12])),
        (durable == ["step-000000000004", "step-000000000006"],
         "the durable tier holds steps 4 and 6: %s" % durable),
        (saved_by == 2, "step 6 was saved by 2 ranks (manifest world_size %s), "
         "resumed by 1" % saved_by),
        (len(stalls) == 2 and all(s > 0 for s in stalls), "two async saves"),
    ]
    for ok, what in checks:
        print(("ok   " if ok else "FAIL ") + what)
        fails += 0 if ok else 1
    if fails:
        print("full:", full, "\nfirst:", first, "\nsecond:", second, "\nckpt:", committed)
    return 1 if fails else 0


# ------------------------------------------------------------ the benchmark

def drop_cache(paths):
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def files_under(d):
    return [os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs]


def bench(out_json, mb, rounds, workdir):
    """Save stall and resume time of the same torch state, same run:
    llmtrain (async, 2 ranks, + durable copy) vs torch.save (+ fsync) and
    torch.load, and torch's own async pattern (clone the state, torch.save on
    a thread). torch.distributed.checkpoint is tried first."""
    import statistics
    import threading
    torch.set_num_threads(1)
    dcp = "torch.distributed.checkpoint: "
    try:
        importlib.import_module("torch.distributed.checkpoint")  # torch >= 2.0
        dcp += "available"
    except Exception as e:
        dcp += "%s: %s" % (type(e).__name__, str(e)[:160])
        try:
            importlib.import_module("torch.distributed._shard.checkpoint")  # 1.13's prototype
            dcp += "; torch.distributed._shard.checkpoint: available"
        except Exception as e2:
            dcp += "; torch.distributed._shard.checkpoint: %s: %s" % (
                type(e2).__name__, str(e2)[:160])
    have_dcp = dcp.endswith("available")
    # a model whose state (params + AdamW moments) is about `mb` MiB
    d = 256
    per_layer = 12 * d * d + 13 * d
    layers = max(1, int(mb * (1 << 20) / 4 / 3 / per_layer))
    model, opt = make_model(d=d, layers=layers)
    state = train_state(model, opt)
    nbytes = sum(t.numel() * 4 for _, t in state)
    prepared = prepare_data(workdir)
    data = Data(prepared)
    root, durable = os.path.join(workdir, "ckpt"), os.path.join(workdir, "durable")
    tpath = os.path.join(workdir, "torch.pt")
    ck = Checkpointer(root, durable)
    res = {k: [] for k in ("ours_stall", "ours_persist", "ours_resume",
                           "torch_save_stall", "torch_load",
                           "torch_clone_stall", "torch_clone_persist", "step")}
    step = 0

    def train_step():
        nonlocal step
        x, y = data.next()
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x).view(-1, 257), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        res["step"].append(time.perf_counter() - t0)

    def torch_state():
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    def torch_write(st):
        with open(tpath, "wb") as f:
            torch.save(st, f)
            f.flush()
            os.fsync(f.fileno())

    train_step()
    for r in range(rounds + 1):  # round 0 warms up
        keep = r > 0
        # ours: the loop is blocked for the snapshot only
        train_step()
        kv = {"loader": json.dumps(data.state()), "adam_step": adam_step(opt)}
        stall = ck.save(step, state, kv)
        t0 = time.perf_counter()
        ck.wait()  # (the loop would go on training here)
        persist = time.perf_counter() - t0 + stall
        # torch.save: the loop is blocked until the file is written
        train_step()
        t0 = time.perf_counter()
        torch_write(torch_state())
        tsave = time.perf_counter() - t0
        # torch, async by hand: clone the state, write it on a thread
        train_step()
        t0 = time.perf_counter()
        snap = {"model": {k: v.clone() for k, v in model.state_dict().items()},
                "optim": {"state": {i: {k: v.clone() for k, v in s.items()}
                                    for i, s in opt.state_dict()["state"].items()},
                          "param_groups": opt.state_dict()["param_groups"]}}
        th = threading.Thread(target=torch_write, args=(snap,))
        th.start()
        cstall = time.perf_counter() - t0
        th.join()
        cpersist = time.perf_counter() - t0
        del snap
        # resume, cold: pages of the files dropped first, into a new model
        drop_cache(files_under(root))
        m2, o2 = make_model(d=d, layers=layers)
        s2 = train_state(m2, o2)
        t0 = time.perf_counter()
        _, kv2 = load_into(root, s2)
        set_adam_step(o2, int(kv2["adam_step"]))
        ours_resume = time.perf_counter() - t0
        drop_cache([tpath])
        m3, o3 = make_model(d=d, layers=layers)
        t0 = time.perf_counter()
        back = torch.load(tpath)
        m3.load_state_dict(back["model"])
        o3.load_state_dict(back["optim"])
        torch_load = time.perf_counter() - t0
        # both resumes give the same state (the last torch.save is 1 step on)
        if keep:
            for k, v in res.items():
                if k != "step":
                    v.append({"ours_stall": stall, "ours_persist": persist,
                              "ours_resume": ours_resume, "torch_save_stall": tsave,
                              "torch_load": torch_load, "torch_clone_stall": cstall,
                              "torch_clone_persist": cpersist}[k])
        del m2, o2, s2, m3, o3, back
    ck.close()
    data.close()
    med = {k: statistics.median(v) for k, v in res.items() if v}
    out = {
        "bench": "embed_torch",
        "command": "python3 examples/embed_torch.py bench %s --mb %d --rounds %d" % (
            out_json, mb, rounds),
        "machine": os.uname().nodename, "cpus": os.cpu_count(),
        "torch": torch.__version__, "python": sys.version.split()[0],
        "dir": workdir,
        "state_bytes": nbytes, "tensors": len(state), "layers": layers, "width": d,
        "rounds": rounds,
        "ours": "llmt_ckpt, 2 ranks (halves of every tensor), async save, "
                "local tier O_DIRECT + durable copy; resume into 1 rank (resharded)",
        "torch_save": "torch.save(model+optim state_dict) + fsync; torch.load + load_state_dict",
        "torch_clone": "state cloned in the loop, torch.save + fsync on a thread",
        "dcp": dcp,
        "dcp_compared": have_dcp,
        "median_s": med,
        "runs_s": {k: v for k, v in res.items()},
        "torch_save_stall_over_ours_stall": med["torch_save_stall"] / med["ours_stall"],
        "torch_clone_stall_over_ours_stall": med["torch_clone_stall"] / med["ours_stall"],
        "torch_load_over_ours_resume": med["torch_load"] / med["ours_resume"],
        "torch_save_over_ours_persist": med["torch_save_stall"] / med["ours_persist"],
        "ours_stall_over_step": med["ours_stall"] / med["step"],
        "torch_save_stall_over_step": med["torch_save_stall"] / med["step"],
    }
    with open(out_json, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps({k: v for k, v in out.items() if k not in ("runs_s",)}, indent=1))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("workdir")
    t.add_argument("--steps", type=int, default=12)
    t.add_argument("--save-every", type=int, default=4)
    t.add_argument("--stop-at", type=int)
    t.add_argument("--resume", action="store_true")
    c = sub.add_parser("check")
    c.add_argument("workdir", nargs="?")
    b = sub.add_parser("bench")
    b.add_argument("out")
    b.add_argument("--mb", type=int, default=64)
    b.add_argument("--rounds", type=int, default=5)
    b.add_argument("--dir")
    a = ap.parse_args()
    if a.cmd == "train":
        losses, _ = train(a.workdir, a.steps, a.save_every, a.stop_at, a.resume)
        print(json.dumps(losses))
        return 0
    tmp = None
    if a.cmd == "check" and a.workdir:
        work = a.workdir
    elif a.cmd == "bench" and a.dir:
        work = a.dir
    else:
        work = tmp = tempfile.mkdtemp(prefix="embed-torch-")
    try:
        return check(work) if a.cmd == "check" else bench(a.out, a.mb, a.rounds, work)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
