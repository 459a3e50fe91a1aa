#!/usr/bin/python3
"""Embedding test: a PyTorch program uses only llmtrain's checkpointing,
through ctypes and the C ABI. It saves a model's state_dict, the AdamW
state and assorted tensors (bf16, int64, a scalar, a transposed view with
strides) from torch's own buffers, sharded over two ranks (one sync save,
one async save + wait), with a Python tier hook that "uploads" the committed
directory; then reads everything back (whole tensors and a block under
another placement) and checks torch.equal. SKIP (77) without torch.
usage: ctypes_torch.py  (LLMT_LIB names libllmtrain.so)"""
import ctypes as C
import os
import shutil
import sys
import tempfile

try:
    import torch
except Exception:  # pragma: no cover
    print("SKIP: no torch in", sys.executable)
    sys.exit(77)

lib = C.CDLL(os.environ.get("LLMT_LIB", "libllmtrain.so"))
MAXD = 8
DT = {torch.float32: 1, torch.bfloat16: 2, torch.float16: 3, torch.int32: 6,
      torch.int64: 7, torch.uint8: 9}


class Tensor(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("dtype", C.c_int), ("device", C.c_int),
                ("device_index", C.c_int32), ("ndim", C.c_int32),
                ("shape", C.c_int64 * MAXD), ("strides", C.c_int64 * MAXD),
                ("data", C.c_void_p)]


HOOK = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_int, C.c_int64, C.c_char_p)


class Opts(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("rank", C.c_int32), ("world_size", C.c_int32),
                ("host_buffer_bytes", C.c_uint64), ("direct_io", C.c_int32),
                ("verify", C.c_int32), ("keep_last", C.c_int32), ("keep_every", C.c_int32),
                ("durable_dir", C.c_char_p), ("durable_keep_last", C.c_int32),
                ("durable_keep_every", C.c_int32), ("tier_fn", HOOK), ("tier_user", C.c_void_p)]


lib.llmt_ckpt_last_error.restype = C.c_char_p
lib.llmt_status_string.restype = C.c_char_p
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL:", what)


def ok(ck, st, what):
    if st != 0:
        raise RuntimeError("%s: %s: %s" % (what, lib.llmt_status_string(st).decode(),
                                         lib.llmt_ckpt_last_error(ck).decode()))


def view(t):
    """An llmt_tensor over torch's own storage (strides in elements)."""
    v = Tensor()
    v.struct_size = C.sizeof(Tensor)
    v.dtype = DT[t.dtype]
    v.device = 0
    v.ndim = t.dim()
    for d in range(t.dim()):
        v.shape[d] = t.shape[d]
        v.strides[d] = t.stride(d)
    v.data = t.data_ptr()
    return v


def i64s(vals):
    a = (C.c_int64 * MAXD)()
    for i, x in enumerate(vals):
        a[i] = x
    return a


def make(root, rank, world, hook=None):
    o = Opts()
    lib.llmt_ckpt_opts_init(C.byref(o), C.sizeof(Opts))
    o.rank, o.world_size = rank, world
    if hook is not None:
        o.tier_fn = hook
    ck = C.c_void_p()
    st = lib.llmt_ckpt_create(None, root.encode(), C.byref(o), C.byref(ck))
    if st:
        raise RuntimeError("create: %d" % st)
    return ck


def main():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 16), torch.nn.LayerNorm(16),
                                torch.nn.Linear(16, 24))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randint(0, 50, (4, 7))).square().mean().backward()
    opt.step()
    state = {"model/" + k: v.detach().clone() for k, v in model.state_dict().items()}
    for i, (p, s) in enumerate(zip(model.parameters(), opt.state.values())):
        state["optim/%d/exp_avg" % i] = s["exp_avg"].clone()
        state["optim/%d/exp_avg_sq" % i] = s["exp_avg_sq"].clone()
    state["extra/bf16"] = torch.randn(5, 6).to(torch.bfloat16)
    state["extra/ids"] = torch.arange(-10, 20, dtype=torch.int64).reshape(3, 10)
    state["extra/scalar"] = torch.tensor(3.25)
    base = torch.randn(8, 12)
    state["extra/transposed"] = base.t()  # a view with strides (1, 12)

    tmp = tempfile.mkdtemp(prefix="llmt-ctypes-")
    root, bucket = os.path.join(tmp, "ckpt"), os.path.join(tmp, "bucket")
    uploads = []

    def upload(user, tier, step, path):
        if tier == 3:  # DURABLE: committed; copy to "our object store"
            dst = os.path.join(bucket, "step-%d" % step)
            shutil.copytree(path.decode(), dst)
            uploads.append(dst)
        return 0
    hook = HOOK(upload)

    try:
        # two ranks: rank 0 holds the first half of every tensor's rows
        # (scalars: rank 0), rank 1 the rest
        cks = [make(root, r, 2, hook) for r in range(2)]
        for r, ck in enumerate(cks):
            ok(ck, lib.llmt_ckpt_begin(ck, C.c_int64(42)), "begin")
            for name, t in state.items():
                if t.dim() == 0:
                    if r == 0:
                        ok(ck, lib.llmt_ckpt_add_tensor(ck, name.encode(), C.byref(view(t)),
                                                        None, None), name)
                    continue
                n = t.shape[0]
                a, b = (0, n // 2) if r == 0 else (n // 2, n)
                part = t[a:b]
                ok(ck, lib.llmt_ckpt_add_tensor(ck, name.encode(), C.byref(view(part)),
                                                i64s(t.shape), i64s([a] + [0] * (t.dim() - 1))),
                   name)
            ok(ck, lib.llmt_ckpt_set_kv(ck, b"torch.version", torch.__version__.encode()), "kv")
            ok(ck, lib.llmt_ckpt_save(ck, r), "save")  # rank 0 sync, rank 1 async
        ok(cks[1], lib.llmt_ckpt_wait(cks[1], C.c_int64(-1)), "wait")
        for ck in cks:
            lib.llmt_ckpt_destroy(ck)
        check(len(uploads) == 1, "the tier hook uploaded the committed step once")

        # read back from the local root and from the uploaded copy
        for where in (root, uploads[0] if uploads else root):
            ck = make(root, 0, 1)
            if where == root:
                step = C.c_int64(-1)
                ok(ck, lib.llmt_ckpt_open_latest(ck, C.byref(step)), "open_latest")
                check(step.value == 42, "step 42")
            else:
                ok(ck, lib.llmt_ckpt_open_dir(ck, where.encode()), "open_dir")
            count = C.c_size_t()
            ok(ck, lib.llmt_ckpt_tensor_count(ck, C.byref(count)), "count")
            check(count.value == len(state), "tensor count %d" % count.value)
            for name, t in state.items():
                out = torch.empty(t.shape, dtype=t.dtype)
                ok(ck, lib.llmt_ckpt_read(ck, name.encode(), C.byref(view(out)), None), name)
                check(torch.equal(out, t.contiguous()), "%s equal (%s)" % (name, where))
            # a block under another placement: rows 3..10 of the embedding
            w = state["model/0.weight"]
            blk = torch.empty(8, 16)
            ok(ck, lib.llmt_ckpt_read(ck, b"model/0.weight", C.byref(view(blk)),
                                      i64s([3, 0])), "block read")
            check(torch.equal(blk, w[3:11]), "resharded block equal")
            buf = C.create_string_buffer(64)
            ok(ck, lib.llmt_ckpt_get_kv(ck, b"torch.version", buf, 64, None), "get_kv")
            check(buf.value.decode() == torch.__version__, "kv round trip")
            # wrong dtype is refused with a message
            bad = torch.empty(state["extra/bf16"].shape, dtype=torch.float32)
            st = lib.llmt_ckpt_read(ck, b"extra/bf16", C.byref(view(bad)), None)
            check(st == 1 and b"bf16" in lib.llmt_ckpt_last_error(ck), "dtype mismatch refused")
            lib.llmt_ckpt_destroy(ck)
        # the restored state drives the model to the same output
        model2 = torch.nn.Sequential(torch.nn.Embedding(50, 16), torch.nn.LayerNorm(16),
                                     torch.nn.Linear(16, 24))
        ck = make(root, 0, 1)
        ok(ck, lib.llmt_ckpt_open_latest(ck, None), "open")
        sd = {}
        for k, v in model2.state_dict().items():
            out = torch.empty_like(v)
            ok(ck, lib.llmt_ckpt_read(ck, ("model/" + k).encode(), C.byref(view(out)), None), k)
            sd[k] = out
        model2.load_state_dict(sd)
        lib.llmt_ckpt_destroy(ck)
        x = torch.randint(0, 50, (2, 5))
        check(torch.equal(model(x), model2(x)), "restored model gives the same output")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("ctypes_torch: %d failures" % len(fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
