"""The Python idiomatic layer as a newcomer uses it (model, trainer,
checkpoint, comm, spec), and the misuse doc/bindings.md promises to turn
into llmtrain.Error instead of a crash or a silent success:

- string outputs (Model.params, Checkpoint.tensors, open_info) work: the
  generated ctypes prototype of a `const char **` was POINTER(POINTER(c_char)),
  which refused byref(c_char_p()) with a ctypes.ArgumentError;
- a Model's close() closes its trainers (C: a trainer must not outlive its
  model; before, the trainer stepped on freed memory and reported loss 0),
  a Comm's close() the trainers attached to it;
- a trainer added to a checkpoint and closed before save makes save raise
  (before, the snapshot read the freed optimizer state);
- a numpy view (Model.param, Trainer.grad) keeps its handle alive: the
  garbage collector no longer frees a model under a live view;
- Spec(path) of a missing file names the file (it said "not valid JSON"),
  and a pathlib.Path is accepted;
- Comm.all_reduce / broadcast refuse a non-contiguous array (before: the
  contiguous memory at its start was reduced, silently) and name the
  allowed ops for an unknown one (was a KeyError);
- every option or output struct the binding passes has struct_size set to
  its size (the ABI's versioning convention), checked on every call.

usage: api_test.py LIBLLMTRAIN   (meson test python-api; SKIP without numpy)
"""
import gc
import os
import pathlib
import sys
import tempfile
import weakref

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
if len(sys.argv) > 1:
    os.environ["LLMT_LIB"] = sys.argv[1]
try:
    import numpy as np
except ImportError:
    print("no numpy for %s: SKIP" % sys.executable)
    sys.exit(77)
import ctypes  # noqa: E402
import llmtrain  # noqa: E402
from llmtrain import _ffi  # noqa: E402

fails = 0


def check(cond, what):
    global fails
    print(("ok   " if cond else "FAIL ") + what)
    fails += 0 if cond else 1


def raises(fn, status, what, needle=None):
    """fn() must raise llmtrain.Error with `status` (and `needle` in it)."""
    try:
        fn()
    except llmtrain.Error as e:
        good = e.status == status and (needle is None or needle in str(e))
        check(good, "%s -> %s" % (what, e))
        return e
    except Exception as e:  # a crash-like failure: wrong exception type
        check(False, "%s -> %s: %s (expected llmtrain.Error)" % (what, type(e).__name__, e))
        return e
    check(False, "%s -> no error (expected status %d)" % (what, status))
    return None


# ---------------------------------------------------------- struct_size
# Every call through the binding is checked: a Structure passed by
# reference (other than to the *_init functions, which set struct_size
# themselves) must carry struct_size == sizeof.
bad_sizes = []


def _struct_args(args):
    for a in args:
        obj = getattr(a, "_obj", None)  # byref(x)
        if obj is None and isinstance(a, ctypes._Pointer):
            obj = a.contents if a else None
        if isinstance(obj, ctypes.Structure) and any(f == "struct_size" for f, _ in obj._fields_):
            yield obj


def _wrap(name, fn):
    def checked(*args):
        if not name.endswith("_init") and name != "llmt_comm_env_discover":
            for s in _struct_args(args):
                if s.struct_size != ctypes.sizeof(s):
                    bad_sizes.append("%s(%s struct_size=%d, sizeof %d)" % (
                        name, type(s).__name__, s.struct_size, ctypes.sizeof(s)))
        return fn(*args)
    return checked


class CheckedLib:
    def __init__(self, cdll):
        self._cdll = cdll

    def __getattr__(self, name):
        fn = getattr(self._cdll, name)
        return _wrap(name, fn) if name.startswith("llmt_") else fn


llmtrain._LIB = CheckedLib(llmtrain.lib())


def model(**kw):
    cfg = dict(vocab_size=64, max_seq_len=16, layers=1, width=16, heads=2)
    cfg.update(kw)
    return llmtrain.Model(**cfg)


def trainer(m):
    return llmtrain.Trainer(m, micro_batch=2, seq_len=8, threads=1, total_steps=10)


X = (np.arange(16, dtype=np.int32) % 64).reshape(2, 8)
Y = np.roll(X, -1, axis=1)


def string_outputs(tmp):
    m = model()
    names = list(m.params())
    n, _ = m.param_count()
    check(len(names) == n and all(isinstance(k, str) and k for k in names),
          "Model.params: %d named views (%s, ...)" % (len(names), names[0] if names else "-"))
    tr = trainer(m)
    first = tr.step(X, Y)["loss"]
    ck = llmtrain.Checkpoint(os.path.join(tmp, "ck"))
    ck.begin(1)
    tr.ckpt_add(ck)
    ck.set_kv("epoch", "3")
    ck.save()
    ck2 = llmtrain.Checkpoint(os.path.join(tmp, "ck"))
    check(ck2.open_latest() == 1, "checkpoint saved and opened at step 1")
    saved = ck2.tensors()
    check(len(saved) >= n and all(isinstance(s, str) and s for s in saved),
          "Checkpoint.tensors: %d names" % len(saved))
    info = ck2.open_info()
    check("epoch" in info["keys"] and ck2.get_kv("epoch") == "3",
          "Checkpoint.open_info keys %s" % info["keys"])
    m2 = model(seed=99)
    tr2 = trainer(m2)
    tr2.ckpt_read(ck2)
    same = all(np.array_equal(a, b) for a, b in zip(m.params().values(), m2.params().values()))
    check(same and tr2.step_count == 1, "state read back equal (loss was %.4f)" % first)
    for h in (tr2, m2, ck2, ck, tr, m):
        h.close()


def ownership(tmp):
    # a model's close() closes its trainers
    m = model()
    t1 = trainer(m)
    t1.step(X, Y)
    m.close()
    check(t1.closed, "Model.close closed its trainer")
    raises(lambda: t1.step(X, Y), _ffi.LLMT_ERR_STATE, "Trainer.step after its Model's close")
    t1.close()
    t1.close()  # twice: a no-op

    # a trainer added to a checkpoint, closed before save
    m = model()
    tr = trainer(m)
    tr.step(X, Y)
    ck = llmtrain.Checkpoint(os.path.join(tmp, "ck-closed"))
    ck.begin(1)
    tr.ckpt_add(ck)
    tr.close()
    raises(lambda: ck.save(), _ffi.LLMT_ERR_STATE, "Checkpoint.save after its trainer's close",
           "closed")
    check(ck.list() == [], "nothing was saved")
    ck.close()
    m.close()

    # numpy views keep their handle alive
    m = model()
    alive = weakref.ref(m)
    w = m.param(0)
    before = w.copy()
    del m
    gc.collect()
    check(alive() is not None, "a Model.param view keeps its model alive")
    check(np.array_equal(w, before), "the view still reads the parameters")
    del w
    gc.collect()
    check(alive() is None, "the model is freed once its views are gone")

    m = model()
    tr = trainer(m)
    tr.step(X, Y)
    g = tr.grad(0)
    tr_alive = weakref.ref(tr)
    del tr, m
    gc.collect()
    check(tr_alive() is not None and np.isfinite(g).all(), "a Trainer.grad view keeps its trainer alive")
    del g
    gc.collect()
    check(tr_alive() is None, "the trainer is freed once its views are gone")


def cancel(tmp):
    # Checkpoint.cancel: a save described and abandoned leaves nothing;
    # a committed one is not withdrawn (the error says so); the last
    # committed step is what a resume opens
    root = os.path.join(tmp, "ck-cancel")
    ck = llmtrain.Checkpoint(root)
    raises(lambda: ck.cancel(), _ffi.LLMT_ERR_STATE, "Checkpoint.cancel with nothing begun",
           "nothing was begun")
    w = np.arange(8, dtype=np.float32)
    ck.begin(1)
    ck.add("w", w)
    ck.save()
    raises(lambda: ck.cancel(), _ffi.LLMT_ERR_STATE, "Checkpoint.cancel after the commit",
           "step 1 was committed")
    ck.begin(2)
    ck.add("w", w + 1)
    ck.cancel()
    raises(lambda: ck.save(), _ffi.LLMT_ERR_STATE, "Checkpoint.save after cancel (no description)")
    check(ck.list() == [1] and not os.path.exists(os.path.join(root, "step-000000000002")),
          "Checkpoint.cancel before the save: nothing written (%s)" % ck.list())
    ck.begin(3)
    ck.add("w", w + 3)
    ck.save(async_=True)
    try:  # the writer may have committed before the cancel reached it
        ck.cancel()
        check(ck.list() == [1] and not os.path.exists(os.path.join(root, "step-000000000003")),
              "Checkpoint.cancel of an async save: step 3 never committed")
    except llmtrain.Error as e:
        check(e.status == _ffi.LLMT_ERR_STATE and "step 3 was committed" in str(e)
              and ck.list() == [1, 3], "Checkpoint.cancel of an async save that committed first: %s" % e)
    ck2 = llmtrain.Checkpoint(root)
    step = ck2.open_latest()
    out = np.zeros(8, dtype=np.float32)
    ck2.read("w", out)
    want = w + 3 if step == 3 else w
    check(step in (1, 3) and np.array_equal(out, want), "resume opens step %d with its data" % step)
    ck2.close()
    ck.close()


def spec_paths(tmp):
    missing = os.path.join(tmp, "no-such-spec.json")
    raises(lambda: llmtrain.Spec(missing), _ffi.LLMT_ERR_IO, "Spec(missing path)", missing)
    good = os.path.join(tmp, "spec.json")
    with open(good, "w") as f:
        f.write('{"model": {"layers": 1, "hidden": 32, "heads": 2, "vocab": 64, "seq_len": 16}}')
    s = llmtrain.Spec(pathlib.Path(good))
    check(s.get("model.layers") == 1, "Spec(pathlib.Path) parses the file")
    s.close()
    raises(lambda: llmtrain.Spec('{"model": {"no_such_key": 1}}'), _ffi.LLMT_ERR_SPEC,
           "Spec(bad key)", "model.no_such_key")
    raises(lambda: llmtrain.Spec(None), _ffi.LLMT_ERR_NULL_POINTER, "Spec(None)")
    # Spec.validate's size query answers BUFFER_TOO_SMALL for a bad spec;
    # its retry succeeds, and once left that answer as this thread's last
    # error: a failure that did not happen, read by a later last_error()
    L = llmtrain.lib()
    for what, spec in (("bad", {"model": {"no_such_key": 1}}), ("good", open(good).read())):
        L.llmt_last_error_clear()
        errs = llmtrain.Spec.validate(spec)
        st = llmtrain.last_error()
        check((len(errs) == 1 and "model.no_such_key" in errs[0]) if what == "bad" else errs == [],
              "Spec.validate(%s spec) -> %s" % (what, errs))
        check(st == (0, ""), "Spec.validate(%s spec) leaves no last error (%s)" % (what, st))


def comm_buffers(tmp):
    import threading
    comms = llmtrain.Comm.inproc(2, timeout_ms=5000)
    base = [np.arange(8, dtype=np.float32) * (r + 1) for r in range(2)]
    errs = [None, None]

    def strided(r):
        try:
            comms[r].all_reduce(base[r][::2])
        except Exception as e:
            errs[r] = e
    ts = [threading.Thread(target=strided, args=(r,)) for r in range(2)]
    [t.start() for t in ts]
    [t.join(30) for t in ts]
    check(all(isinstance(e, llmtrain.Error) and e.status == _ffi.LLMT_ERR_INVALID_ARGUMENT
              for e in errs), "all_reduce of a strided view refused: %s" % errs[0])
    check(np.array_equal(base[0], np.arange(8, dtype=np.float32)), "the array is unchanged")
    raises(lambda: comms[0].all_reduce(base[0], op="product"), _ffi.LLMT_ERR_INVALID_ARGUMENT,
           "all_reduce(op='product')", "sum")
    ro = np.ones(4, np.float32)
    ro.flags.writeable = False
    raises(lambda: comms[0].broadcast(ro), _ffi.LLMT_ERR_INVALID_ARGUMENT,
           "broadcast into a read-only array")
    # the contiguous case still works
    bufs = [np.full(4, r + 1, np.float32) for r in range(2)]
    ts = [threading.Thread(target=comms[r].all_reduce, args=(bufs[r],)) for r in range(2)]
    [t.start() for t in ts]
    [t.join(30) for t in ts]
    check(all(np.array_equal(b, np.full(4, 3, np.float32)) for b in bufs), "all_reduce sums")

    # a trainer attached to a comm is closed with it
    one = llmtrain.Comm.inproc(1)[0]
    m = model()
    tr = trainer(m)
    tr.set_comm(one)
    tr.step(X, Y)
    one.close()
    check(tr.closed, "Comm.close closed the trainer attached to it")
    raises(lambda: tr.step(X, Y), _ffi.LLMT_ERR_STATE, "Trainer.step after its Comm's close")
    for c in comms:
        c.close()
    m.close()


def main():
    with tempfile.TemporaryDirectory(prefix="llmt-pyapi-") as tmp:
        for part in (string_outputs, ownership, cancel, spec_paths, comm_buffers):
            try:
                part(tmp)
            except Exception as e:  # a part that crashes counts as a failure
                check(False, "%s raised %s: %s" % (part.__name__, type(e).__name__, e))
    check(not bad_sizes, "every struct passed with its struct_size (%s)" % "; ".join(bad_sizes[:3]))
    print("python-api: %d failure(s)" % fails)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
