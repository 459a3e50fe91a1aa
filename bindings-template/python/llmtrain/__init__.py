"""llmtrain: Python bindings of libllmtrain over ctypes (no extension module).

The raw layer (llmtrain._ffi) is generated from include/llmtrain.h by
tools/gen_bindings.py; this module is the idiomatic layer over it:

    import llmtrain
    with llmtrain.Job(spec_dict, run_dir="runs/x") as job:
        for m in job.steps():           # one dict per optimizer step
            print(m["step"], m["loss"])
        # job.save() adds a checkpoint of the last step, unless the
        # spec's checkpoint.interval already saved it (LLMT_ERR_STATE)

Every handle is a context manager (close() frees it; a finalizer is the
safety net); a closed handle raises Error, never crashes. Every failing call
raises llmtrain.Error carrying the status and the library's message (the
thread's llmt_last_error, whatever handle the C call recorded it on).
Host tensors are shared zero-copy: Model/Trainer views come back as numpy
arrays over the library's memory, and Checkpoint.add takes numpy arrays or
CPU torch tensors without copying them.

The data-pipeline classes of the first template (Library, Context,
Tokenizer, Dataset, Loader, prepare, ...) are kept, from
llmtrain._template, for hosts that embed only the data loader.

Threads: a handle is driven by one thread at a time (not checked);
Spec and Plan queries may run from several; ctypes releases the GIL during
a call. A handle C points into closes its users first (Model.close closes
its trainers, Comm.close the trainers and jobs on it). doc/bindings.md.
"""
import ctypes
import json as _json
import os
import weakref

from . import _ffi
from ._template import *  # noqa: F401,F403  (the template's data layer)
from ._template import Error, FEATURES  # noqa: F401

ABI_MAJOR = 1
_c = ctypes
_LIB = None


def lib():
    """The library, loaded once ($LLMT_LIB or libllmtrain.so.1), with every
    prototype declared and the struct layouts checked against llmt_sizeof."""
    global _LIB
    if _LIB is None:
        path = os.environ.get("LLMT_LIB") or "libllmtrain.so.1"
        cdll = _ffi.bind(_c.CDLL(path))
        major = cdll.llmt_abi_version() >> 16
        if major != ABI_MAJOR:
            raise Error(_ffi.LLMT_ERR_VERSION,
                        "libllmtrain ABI %d != bindings ABI %d" % (major, ABI_MAJOR))
        _ffi.check_layout(cdll)
        _LIB = cdll
    return _LIB


def status_string(status):
    return lib().llmt_status_string(status).decode()


def last_error():
    """(status, message) of this thread's last failure."""
    L = lib()
    return L.llmt_last_error_status(), L.llmt_last_error().decode(errors="replace")


def _raise(status, detail=""):
    msg = status_string(status)
    raise Error(status, "%s: %s" % (msg, detail) if detail else msg, detail)


def _call(name, *args):
    """Call llmt_<name>; a failing status raises Error with the message the
    library recorded for this thread."""
    L = lib()
    L.llmt_last_error_clear()
    s = getattr(L, "llmt_" + name)(*args)
    if s != 0:
        st, detail = last_error()
        _raise(s, detail if st == s else "")
    return s


def _b(s):
    return None if s is None else (s.encode() if isinstance(s, str) else bytes(s))


def _s(p):
    return p.decode(errors="replace") if p else ""


def _init(cls, fn):
    o = cls()
    _call(fn, _c.byref(o), _c.sizeof(o))
    return o


def _set(o, fields):
    names = {f for f, _ in o._fields_}
    for k, v in fields.items():
        if k not in names:
            raise Error(_ffi.LLMT_ERR_INVALID_ARGUMENT,
                        "%s has no field %r" % (type(o).__name__, k))
        setattr(o, k, _b(v) if isinstance(v, str) else v)
    return o


def _asdict(o):
    out = {}
    for f, t in o._fields_:
        if f == "struct_size":
            continue
        v = getattr(o, f)
        if isinstance(v, bytes):
            v = v.decode(errors="replace")
        elif isinstance(v, _c.Array):
            v = list(v)
        out[f] = v
    return out


def _text(fn, *args):
    """A size-queried string output (buf, buflen, needed)."""
    need = _c.c_size_t(0)
    L = lib()
    s = getattr(L, "llmt_" + fn)(*args, None, 0, _c.byref(need))
    if s not in (0, _ffi.LLMT_ERR_BUFFER_TOO_SMALL):
        _call(fn, *args, None, 0, _c.byref(need))
    buf = _c.create_string_buffer(need.value + 1)
    _call(fn, *args, buf, len(buf), _c.byref(need))
    return buf.value.decode(errors="replace")


def _free(destroy, ptr, ctx):
    destroy(ptr)
    if ctx:
        lib().llmt_context_destroy(ctx)


def _new_ctx():
    """A context of its own for one handle: its errors and log sink."""
    ctx = _c.c_void_p()
    _call("context_create", None, _c.byref(ctx))
    return ctx.value


class Handle:
    """An owned handle: close() or `with` frees it, a finalizer is the
    safety net; use after close raises Error (never a crash)."""
    _destroy = None

    def __init__(self, ptr, owner=None, keep=None, ctx=None):
        self._ptr = ptr
        self._owned = owner is None
        self._owner = owner     # a borrowed handle keeps its owner alive
        self._keep = keep       # objects C points into (models, comms)
        self._users = weakref.WeakSet()  # handles C made to point at this one
        self._fin = None
        if self._owned and ptr:
            # the handle first, then the context it was made from (a handle
            # must not outlive its context)
            self._fin = weakref.finalize(self, _free, getattr(lib(), self._destroy), ptr, ctx)
        elif ctx:
            lib().llmt_context_destroy(ctx)

    @property
    def ptr(self):
        if not self._ptr:
            raise Error(_ffi.LLMT_ERR_STATE, "%s is closed" % type(self).__name__)
        if self._owner is not None and not self._owner._ptr:
            raise Error(_ffi.LLMT_ERR_STATE, "%s: its owner %s is closed" % (
                type(self).__name__, type(self._owner).__name__))
        return self._ptr

    def _used_by(self, user):
        """`user` keeps a pointer to this handle in C (a trainer to its
        model or comm): close() closes it first, as C requires."""
        self._users.add(user)

    def close(self):
        for user in list(self._users):
            user.close()
        self._users = weakref.WeakSet()
        if self._fin is not None:
            self._fin()
        self._ptr = None

    @property
    def closed(self):
        return not self._ptr

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _need(obj, cls, what):
    if not isinstance(obj, cls):
        raise Error(_ffi.LLMT_ERR_NULL_POINTER,
                    "%s: a %s is required, got %r" % (what, cls.__name__, obj))
    return obj.ptr


# ------------------------------------------------------------------- tensors

_NP_DT = {"float32": _ffi.LLMT_DTYPE_FP32, "float16": _ffi.LLMT_DTYPE_FP16,
          "int32": _ffi.LLMT_DTYPE_INT32, "int64": _ffi.LLMT_DTYPE_INT64,
          "uint16": _ffi.LLMT_DTYPE_UINT16, "uint8": _ffi.LLMT_DTYPE_UINT8,
          "bfloat16": _ffi.LLMT_DTYPE_BF16}
_DT_NP = {_ffi.LLMT_DTYPE_FP32: "float32", _ffi.LLMT_DTYPE_FP16: "float16",
          _ffi.LLMT_DTYPE_INT32: "int32", _ffi.LLMT_DTYPE_INT64: "int64",
          _ffi.LLMT_DTYPE_UINT16: "uint16", _ffi.LLMT_DTYPE_UINT8: "uint8",
          _ffi.LLMT_DTYPE_BF16: "uint16"}


def tensor_of(obj):
    """An llmt_tensor viewing a numpy array or a CPU torch tensor, zero-copy
    (strides in elements). The caller keeps `obj` alive while it is used."""
    t = _ffi.llmt_tensor()
    t.struct_size = _c.sizeof(t)
    if hasattr(obj, "data_ptr"):  # torch
        if obj.device.type != "cpu":
            raise Error(_ffi.LLMT_ERR_UNSUPPORTED, "tensor_of: %s tensor: only host "
                        "memory is shared (copy with .cpu())" % obj.device.type)
        dt = str(obj.dtype).replace("torch.", "")
        addr, shape, strides = obj.data_ptr(), tuple(obj.shape), tuple(obj.stride())
    else:
        import numpy as np
        obj = obj if isinstance(obj, np.ndarray) else np.asarray(obj)
        dt = obj.dtype.name
        addr = obj.ctypes.data
        shape = obj.shape
        strides = tuple(s // obj.itemsize for s in obj.strides)
    if dt not in _NP_DT:
        raise Error(_ffi.LLMT_ERR_INVALID_ARGUMENT, "tensor_of: dtype %s" % dt)
    t.dtype = _NP_DT[dt]
    t.device = _ffi.LLMT_DEVICE_CPU
    t.ndim = len(shape)
    for i, (n, st) in enumerate(zip(shape, strides)):
        t.shape[i] = n
        t.strides[i] = st
    t.data = addr or None
    _call("tensor_validate", _c.byref(t))
    return t


def as_numpy(t, owner=None):
    """A numpy array over an llmt_tensor's host memory (no copy)."""
    import numpy as np
    if t.device == _ffi.LLMT_DEVICE_CUDA:
        raise Error(_ffi.LLMT_ERR_UNSUPPORTED, "as_numpy: device memory")
    dt = np.dtype(_DT_NP[t.dtype])
    shape = tuple(t.shape[i] for i in range(t.ndim))
    n = 1
    for s in shape:
        n *= s
    if n == 0:
        return np.zeros(shape, dt)
    buf = (_c.c_char * (n * dt.itemsize)).from_address(t.data)
    # the array's base is buf: the handle whose memory it views stays
    # alive (not garbage-collected) as long as a view of it does. close()
    # still frees it: a view must not be used after its handle's close()
    buf._llmt_owner = owner
    return np.frombuffer(buf, dt).reshape(shape)


def as_torch(t):
    """A torch tensor sharing the view's host memory (no copy)."""
    import torch
    return torch.from_numpy(as_numpy(t))


# ------------------------------------------------------------------- spec

class Spec(Handle):
    """A parsed, validated job spec (immutable). From a dict, JSON text or a
    file; a bad key raises Error naming it."""
    _destroy = "llmt_spec_destroy"

    def __init__(self, spec):
        out = _c.c_void_p()
        if spec is None:
            raise Error(_ffi.LLMT_ERR_NULL_POINTER, "Spec: a dict, JSON text or path is "
                        "required, got None")
        if isinstance(spec, dict):
            spec = _json.dumps(spec)
        if isinstance(spec, os.PathLike):
            spec = os.fspath(spec)
        # a context receives the list of errors (without one there is none)
        ctx = _new_ctx()
        try:
            # text that is not a JSON object is a path: a missing file is
            # named ("spec: cannot open PATH"), not reported as bad JSON
            if isinstance(spec, str) and not spec.lstrip().startswith("{"):
                _call("spec_parse_file", ctx, _b(spec), _c.byref(out))
            else:
                data = _b(spec)
                _call("spec_parse_json", ctx, data, len(data), _c.byref(out))
        except Error:
            lib().llmt_context_destroy(ctx)
            raise
        super().__init__(out.value, ctx=ctx)

    @staticmethod
    def validate(spec):
        """Every error of a spec, one per item ([] when valid)."""
        data = _b(_json.dumps(spec) if isinstance(spec, dict) else spec)
        need = _c.c_size_t(0)
        L = lib()
        L.llmt_last_error_clear()
        s = L.llmt_spec_validate_json(None, data, len(data), None, 0, _c.byref(need))
        if s == 0:
            return []
        # the size query's BUFFER_TOO_SMALL is an answer, not a failure: a
        # later last_error() must not report it (the retry, succeeding,
        # would leave it there)
        L.llmt_last_error_clear()
        buf = _c.create_string_buffer(need.value + 1)
        s = L.llmt_spec_validate_json(None, data, len(data), buf, len(buf), _c.byref(need))
        return [] if s == 0 else [x for x in buf.value.decode().split("\n") if x]

    def get(self, path):
        """The value at a JSON path ("model.layers"), defaults filled in."""
        keys = {lib().llmt_spec_key_name(i).decode(): lib().llmt_spec_key_type(i).decode()
                for i in range(lib().llmt_spec_key_count())}
        kind = keys.get(path, "string")
        if kind in ("int", "bool"):
            v = _c.c_int64()
            _call("spec_get_int", self.ptr, _b(path), _c.byref(v))
            return bool(v.value) if kind == "bool" else v.value
        if kind == "number":
            v = _c.c_double()
            _call("spec_get_double", self.ptr, _b(path), _c.byref(v))
            return v.value
        return _text("spec_get_string", self.ptr, _b(path))

    def to_json(self):
        return _json.loads(_text("spec_to_json", self.ptr))

    @staticmethod
    def keys():
        L = lib()
        return [(L.llmt_spec_key_name(i).decode(), L.llmt_spec_key_type(i).decode(),
                 _s(L.llmt_spec_key_doc(i))) for i in range(L.llmt_spec_key_count())]


def _spec(spec):
    return spec if isinstance(spec, Spec) else Spec(spec)


# ------------------------------------------------------------------- plan

DIMS = {"tp": 0, "cp": 1, "pp": 2, "dp": 3, "ep": 4}


class Plan(Handle):
    """A spec placed on world_size ranks: degrees, groups, the cost model."""
    _destroy = "llmt_plan_destroy"

    def __init__(self, spec=None, world_size=0, _ptr=None, _owner=None, auto=None):
        if _ptr is not None:
            super().__init__(_ptr, owner=_owner)
            return
        sp = _spec(spec)
        out = _c.c_void_p()
        if auto is not None:
            o = _set(_init(_ffi.llmt_plan_auto_opts, "plan_auto_opts_init"), auto)
            _call("plan_auto", None, sp.ptr, world_size, _c.byref(o), _c.byref(out))
        else:
            _call("plan_create", None, sp.ptr, world_size, _c.byref(out))
        super().__init__(out.value, keep=sp)  # its spec copy uses sp's context

    @classmethod
    def auto(cls, spec, world_size, **opts):
        """The auto-planner's choice (opts: llmt_plan_auto_opts fields)."""
        return cls(spec, world_size, auto=opts)

    def degrees(self):
        d = (_c.c_int32 * _ffi.LLMT_PLAN_NDIMS)()
        _call("plan_degrees", self.ptr, d)
        return dict(zip(DIMS, d))

    @property
    def world_size(self):
        v = _c.c_int32()
        _call("plan_world_size", self.ptr, _c.byref(v))
        return v.value

    def coords(self, rank):
        d = (_c.c_int32 * _ffi.LLMT_PLAN_NDIMS)()
        _call("plan_coords", self.ptr, rank, d)
        return dict(zip(DIMS, d))

    def rank_of(self, **coords):
        d = (_c.c_int32 * _ffi.LLMT_PLAN_NDIMS)(*[coords.get(k, 0) for k in DIMS])
        r = _c.c_int32()
        _call("plan_rank_of", self.ptr, d, _c.byref(r))
        return r.value

    def group(self, dim, rank):
        n = _c.c_size_t()
        gid = _c.c_int32()
        _call("plan_group", self.ptr, DIMS[dim], rank, None, 0, _c.byref(n), None)
        ranks = (_c.c_int32 * n.value)()
        _call("plan_group", self.ptr, DIMS[dim], rank, ranks, n.value, _c.byref(n), _c.byref(gid))
        return list(ranks), gid.value

    def stage_layers(self, stage, chunk=0):
        f, n = _c.c_int32(), _c.c_int32()
        _call("plan_stage_layers", self.ptr, stage, chunk, _c.byref(f), _c.byref(n))
        return f.value, n.value

    def estimate(self):
        e = _ffi.llmt_plan_estimate()
        e.struct_size = _c.sizeof(e)
        _call("plan_get_estimate", self.ptr, _c.byref(e))
        return _asdict(e)

    def to_json(self):
        return _json.loads(_text("plan_to_json", self.ptr))

    def explain(self):
        return _text("plan_explain", self.ptr)

    def reshape(self, new_world_size):
        out = _c.c_void_p()
        _call("plan_reshape", self.ptr, new_world_size, _c.byref(out))
        return Plan(_ptr=out.value)

    def simulate_goodput(self, **opts):
        o = _set(_init(_ffi.llmt_goodput_opts, "goodput_opts_init"), opts)
        r = _ffi.llmt_goodput_result()
        r.struct_size = _c.sizeof(r)
        _call("plan_simulate_goodput", self.ptr, _c.byref(o), _c.byref(r))
        return _asdict(r)

    def close(self):
        if self._owned:
            super().close()
        self._ptr = None


# ------------------------------------------------------------------- comm

class Comm(Handle):
    """A communicator (one rank's membership). Comm.from_env() under a
    launcher (mpirun, srun, torchrun variables); Comm.inproc(n) gives n
    ranks of one process, each to be driven by its own thread. Buffers are
    numpy arrays (or CPU torch tensors) used in place."""
    _destroy = "llmt_comm_destroy"

    @classmethod
    def from_env(cls, timeout_ms=0, backend=0):
        o = _init(_ffi.llmt_comm_opts, "comm_opts_init")
        if timeout_ms:
            o.timeout_ms = timeout_ms
        o.backend = backend
        out = _c.c_void_p()
        _call("comm_create_from_env", None, _c.byref(o), _c.byref(out))
        return cls(out.value)

    @classmethod
    def inproc(cls, world_size, timeout_ms=0):
        o = _init(_ffi.llmt_comm_opts, "comm_opts_init")
        if timeout_ms:
            o.timeout_ms = timeout_ms
        arr = (_c.c_void_p * world_size)()
        _call("comm_create_inproc", None, world_size, _c.byref(o), arr)
        return [cls(p) for p in arr]

    @staticmethod
    def env():
        e = _ffi.llmt_comm_env()
        _call("comm_env_discover", _c.byref(e), _c.sizeof(e))
        return _asdict(e)

    @property
    def rank(self):
        v = _c.c_int32()
        _call("comm_rank", self.ptr, _c.byref(v))
        return v.value

    @property
    def size(self):
        v = _c.c_int32()
        _call("comm_size", self.ptr, _c.byref(v))
        return v.value

    _OPS = {"sum": 0, "avg": 1, "max": 2, "min": 3}

    @staticmethod
    def _buffer(buf, what):
        """(data, count, dtype) of a buffer a collective writes in place:
        C reads and writes count contiguous elements, so a strided view
        (a[::2], a transposed array) or a read-only array is refused
        rather than reduced at the wrong addresses."""
        contiguous = (buf.is_contiguous() if hasattr(buf, "is_contiguous")
                      else buf.flags.c_contiguous)
        if not contiguous:
            raise Error(_ffi.LLMT_ERR_INVALID_ARGUMENT, "Comm.%s: the buffer is not "
                        "contiguous (pass numpy.ascontiguousarray(buf) and copy back)" % what)
        if not hasattr(buf, "data_ptr") and not buf.flags.writeable:
            raise Error(_ffi.LLMT_ERR_INVALID_ARGUMENT, "Comm.%s: the buffer is read-only" % what)
        t = tensor_of(buf)
        n = 1
        for i in range(t.ndim):
            n *= t.shape[i]
        return t.data, n, t.dtype

    def all_reduce(self, buf, op="sum"):
        if op not in self._OPS:
            raise Error(_ffi.LLMT_ERR_INVALID_ARGUMENT, "Comm.all_reduce: op %r unknown "
                        "(one of %s)" % (op, ", ".join(self._OPS)))
        data, n, dt = self._buffer(buf, "all_reduce")
        _call("comm_all_reduce", self.ptr, data, data, n, dt, self._OPS[op], None)
        return buf

    def broadcast(self, buf, root=0):
        data, n, dt = self._buffer(buf, "broadcast")
        _call("comm_broadcast", self.ptr, data, n, dt, root, None)
        return buf

    def barrier(self):
        _call("comm_barrier", self.ptr)

    def abort(self):
        _call("comm_abort", self.ptr)

    def finalize(self):
        _call("comm_finalize", self.ptr)

    def stats(self):
        s = _ffi.llmt_comm_stats()
        s.struct_size = _c.sizeof(s)
        _call("comm_get_stats", self.ptr, _c.byref(s))
        return _asdict(s)

    def recorder(self):
        return _text("comm_recorder_dump", self.ptr)


# ------------------------------------------------------------------- model

class Model(Handle):
    """A transformer from a config (llmt_model_config fields as keywords).
    params() gives numpy arrays over the parameters themselves."""
    _destroy = "llmt_model_destroy"

    def __init__(self, _ptr=None, **config):
        if _ptr is None:
            c = _set(_init(_ffi.llmt_model_config, "model_config_init"), config)
            out = _c.c_void_p()
            _call("model_create", None, _c.byref(c), _c.byref(out))
            _ptr = out.value
        super().__init__(_ptr)

    @classmethod
    def import_llmc(cls, path):
        out = _c.c_void_p()
        _call("model_import_llmc", None, _b(path), _c.byref(out))
        return cls(_ptr=out.value)

    def config(self):
        c = _ffi.llmt_model_config()
        c.struct_size = _c.sizeof(c)
        _call("model_get_config", self.ptr, _c.byref(c))
        return _asdict(c)

    def param_count(self):
        n, numel = _c.c_int32(), _c.c_int64()
        _call("model_param_count", self.ptr, _c.byref(n), _c.byref(numel))
        return n.value, numel.value

    def param(self, key):
        """A numpy view of a parameter by index or name (the model's memory)."""
        t = _ffi.llmt_tensor()
        t.struct_size = _c.sizeof(t)
        if isinstance(key, str):
            _call("model_find_param", self.ptr, _b(key), _c.byref(t))
        else:
            _call("model_param", self.ptr, key, None, _c.byref(t))
        return as_numpy(t, self)

    def params(self):
        out = {}
        for i in range(self.param_count()[0]):
            name = _c.c_char_p()
            t = _ffi.llmt_tensor()
            t.struct_size = _c.sizeof(t)
            _call("model_param", self.ptr, i, _c.byref(name), _c.byref(t))
            out[name.value.decode()] = as_numpy(t, self)
        return out

    def save_safetensors(self, path):
        _call("model_save_safetensors", self.ptr, _b(path))

    def load_safetensors(self, path):
        _call("model_load_safetensors", self.ptr, _b(path))

    def export_llmc(self, path):
        _call("model_export_llmc", self.ptr, _b(path))


# ------------------------------------------------------------------- trainer

class Trainer(Handle):
    """Steps on batches the host supplies (numpy int32 arrays of shape
    [sequences, seq_len]). Options: llmt_trainer_opts fields (the defaults
    are a GPT-style preset: cosine, beta2 0.95, weight decay 0.1, clip 1).
    Steps are numbered from 1: lr_at(m["step"]) == m["lr"]."""
    _destroy = "llmt_trainer_destroy"

    def __init__(self, model, **opts):
        o = _set(_init(_ffi.llmt_trainer_opts, "trainer_opts_init"), opts)
        out = _c.c_void_p()
        _call("trainer_create", _need(model, Model, "Trainer"), _c.byref(o), _c.byref(out))
        super().__init__(out.value, keep=model)
        self.model = model
        model._used_by(self)  # the C trainer points at the model

    def _batch(self, inputs, targets):
        import numpy as np
        inputs = np.ascontiguousarray(inputs, dtype=np.int32)
        targets = np.ascontiguousarray(targets, dtype=np.int32)
        if inputs.shape != targets.shape or inputs.ndim != 2:
            raise Error(_ffi.LLMT_ERR_INVALID_ARGUMENT,
                        "inputs and targets must be [sequences, seq_len] of one shape")
        b = _init(_ffi.llmt_batch, "batch_init")
        b.inputs = inputs.ctypes.data_as(_c.POINTER(_c.c_int32))
        b.targets = targets.ctypes.data_as(_c.POINTER(_c.c_int32))
        b.sequences, b.seq_len = inputs.shape
        return b, (inputs, targets)

    def step(self, inputs, targets):
        b, keep = self._batch(inputs, targets)
        m = _init(_ffi.llmt_step_metrics, "step_metrics_init")
        _call("trainer_step", self.ptr, _c.byref(b), _c.byref(m))
        return _asdict(m)

    def forward_backward(self, inputs, targets):
        b, keep = self._batch(inputs, targets)
        loss = _c.c_float()
        _call("trainer_forward_backward", self.ptr, _c.byref(b), _c.byref(loss))
        return loss.value

    def evaluate(self, inputs, targets):
        b, keep = self._batch(inputs, targets)
        loss = _c.c_float()
        _call("trainer_evaluate", self.ptr, _c.byref(b), _c.byref(loss))
        return loss.value

    def lr_at(self, step):
        v = _c.c_float()
        _call("trainer_lr_at", self.ptr, step, _c.byref(v))
        return v.value

    @property
    def step_count(self):
        v = _c.c_int64()
        _call("trainer_get_step", self.ptr, _c.byref(v))
        return v.value

    def grad(self, index):
        t = _ffi.llmt_tensor()
        t.struct_size = _c.sizeof(t)
        _call("trainer_grad", self.ptr, index, _c.byref(t))
        return as_numpy(t, self)

    def generate(self, prompt, n_new, temperature=0.8, top_k=40, seed=0):
        p = (_c.c_int32 * len(prompt))(*prompt)
        out = (_c.c_int32 * n_new)()
        _call("trainer_generate", self.ptr, p, len(prompt), n_new, temperature, top_k, seed, out)
        return list(out)

    def ckpt_add(self, ck):
        """Add the trainer's state to the save begun on `ck`, zero-copy: the
        trainer must stay open (and not step) until ck.save() returns."""
        _call("trainer_ckpt_add", self.ptr, _need(ck, Checkpoint, "ckpt_add"))
        ck._pending.append(self)  # save() checks it is still open

    def ckpt_read(self, ck):
        _call("trainer_ckpt_read", self.ptr, _need(ck, Checkpoint, "ckpt_read"))

    def set_comm(self, comm, zero_stage=0, **opts):
        o = _set(_init(_ffi.llmt_dp_opts, "dp_opts_init"), dict(opts, zero_stage=zero_stage))
        _call("trainer_set_comm", self.ptr, comm.ptr if comm is not None else None, _c.byref(o))
        self._keep = (self.model, comm)
        if comm is not None:
            comm._used_by(self)  # the C trainer points at the comm

    def sync_params(self):
        _call("trainer_sync_params", self.ptr)

    def memory(self):
        m = _ffi.llmt_trainer_memory()
        m.struct_size = _c.sizeof(m)
        _call("trainer_memory_usage", self.ptr, _c.byref(m))
        return _asdict(m)


# ------------------------------------------------------------------- ckpt

class Checkpoint(Handle):
    """Tiered asynchronous checkpointing of the host's own tensors.

        with llmtrain.Checkpoint("ckpt", rank=r, world_size=n) as ck:
            ck.begin(step)
            ck.add("w", array, global_shape=(...), global_offsets=(...))
            ck.set_kv("epoch", "3")
            ck.save(async_=True)      # returns after the snapshot
            ...
            step = ck.open_latest()
            ck.read("w", out_array, global_offsets=(...))   # any sharding

    Arrays are numpy arrays or CPU torch tensors, shared without a copy
    until the snapshot (save returns); options are llmt_ckpt_opts fields."""
    _destroy = "llmt_ckpt_destroy"

    def __init__(self, root, **opts):
        if "tier_fn" in opts:
            raise Error(_ffi.LLMT_ERR_UNSUPPORTED, "Checkpoint: tier_fn is not bound "
                        "(a Python callback on the writer thread); use durable_dir")
        o = _set(_init(_ffi.llmt_ckpt_opts, "ckpt_opts_init"), opts)
        out = _c.c_void_p()
        _call("ckpt_create", None, _b(root), _c.byref(o), _c.byref(out))
        super().__init__(out.value, keep=o)
        self._pending = []

    def begin(self, step):
        self._pending = []
        _call("ckpt_begin", self.ptr, step)

    def add(self, name, array, global_shape=None, global_offsets=None):
        t = tensor_of(array)
        gs = (_c.c_int64 * 8)(*global_shape) if global_shape is not None else None
        go = (_c.c_int64 * 8)(*global_offsets) if global_offsets is not None else None
        _call("ckpt_add_tensor", self.ptr, _b(name), _c.byref(t), gs, go)
        self._pending.append(array)  # read by save's snapshot

    def set_kv(self, key, value):
        _call("ckpt_set_kv", self.ptr, _b(key), _b(str(value)))

    def set_plan(self, plan):
        _call("ckpt_set_plan_json", self.ptr, _b(plan if isinstance(plan, str) else _json.dumps(plan)))

    def save(self, async_=False):
        ptr = self.ptr
        for h in self._pending:
            if isinstance(h, Handle) and h.closed:
                # its tensors (a trainer's moments) were freed by close()
                raise Error(_ffi.LLMT_ERR_STATE, "Checkpoint.save: a %s added to this "
                            "save was closed before it; begin the save again" % type(h).__name__)
        try:
            _call("ckpt_save", ptr, 1 if async_ else 0)
        finally:
            self._pending = []  # the snapshot is taken: the arrays may change

    def save_status(self):
        """(done, step): done False while a save is in flight."""
        st = _c.c_int64(-1)
        L = lib()
        L.llmt_last_error_clear()
        s = L.llmt_ckpt_save_status(self.ptr, _c.byref(st))
        if s == _ffi.LLMT_ERR_IN_PROGRESS:
            return False, st.value
        if s != 0:
            _raise(s, self.last_error())
        return True, st.value

    def wait(self, timeout_ms=-1):
        _call("ckpt_wait", self.ptr, timeout_ms)

    def cancel(self):
        """Abandon the newest save (llmt_ckpt_cancel): a description begun
        and not saved, a save in flight (its writer stopped, this rank's
        part removed) or a part written but not committed; its step is
        never committed. Raises Error (LLMT_ERR_STATE) when there is nothing
        to cancel or the step was committed first."""
        self._pending = []
        _call("ckpt_cancel", self.ptr)

    def last_error(self):
        return _s(lib().llmt_ckpt_last_error(self.ptr))

    def open_latest(self):
        st = _c.c_int64()
        _call("ckpt_open_latest", self.ptr, _c.byref(st))
        return st.value

    def open_step(self, step):
        _call("ckpt_open_step", self.ptr, step)
        return step

    def open_dir(self, path):
        _call("ckpt_open_dir", self.ptr, _b(path))

    def open_snapshot(self):
        st = _c.c_int64()
        _call("ckpt_open_snapshot", self.ptr, _c.byref(st))
        return st.value

    def tensors(self):
        n = _c.c_size_t()
        _call("ckpt_tensor_count", self.ptr, _c.byref(n))
        out = []
        for i in range(n.value):
            p = _c.c_char_p()
            _call("ckpt_tensor_name", self.ptr, i, _c.byref(p))
            out.append(p.value.decode())
        return out

    def info(self, name):
        """(dtype code, global shape, chunk count) of a saved tensor."""
        dt, nd, nch = _c.c_int32(), _c.c_int32(), _c.c_size_t()
        sh = (_c.c_int64 * 8)()
        _call("ckpt_tensor_info", self.ptr, _b(name), _c.byref(dt), _c.byref(nd), sh, _c.byref(nch))
        return dt.value, tuple(sh[: nd.value]), nch.value

    def read(self, name, out, global_offsets=None):
        """Fill `out` (a contiguous host array: the caller's block) from the
        region at global_offsets of the saved global tensor: resharding."""
        t = tensor_of(out)
        go = (_c.c_int64 * 8)(*global_offsets) if global_offsets is not None else None
        _call("ckpt_read", self.ptr, _b(name), _c.byref(t), go)
        return out

    def read_array(self, name):
        """The whole global tensor as a new numpy array."""
        import numpy as np
        dt, shape, _ = self.info(name)
        out = np.empty(shape, dtype=_DT_NP[dt])
        return self.read(name, out)

    def get_kv(self, key):
        return _text("ckpt_get_kv", self.ptr, _b(key))

    def get_plan(self):
        return _text("ckpt_get_plan_json", self.ptr)

    def step_of_open(self):
        st = _c.c_int64()
        _call("ckpt_open_step_of", self.ptr, _c.byref(st))
        return st.value

    def verify(self):
        _call("ckpt_verify", self.ptr)

    def list(self):
        n = _c.c_size_t()
        _call("ckpt_list", self.ptr, None, 0, _c.byref(n))
        steps = (_c.c_int64 * max(n.value, 1))()
        _call("ckpt_list", self.ptr, steps, n.value, _c.byref(n))
        return list(steps[: n.value])

    def prune(self):
        n = _c.c_size_t()
        _call("ckpt_prune", self.ptr, _c.byref(n))
        return n.value

    def quarantine_newer(self, step):
        n = _c.c_size_t()
        _call("ckpt_quarantine_newer", self.ptr, step, _c.byref(n))
        return n.value

    def open_info(self):
        ws, nb, nkv = _c.c_int32(), _c.c_uint64(), _c.c_size_t()
        _call("ckpt_open_info", self.ptr, _c.byref(ws), _c.byref(nb), _c.byref(nkv))
        keys = []
        for i in range(nkv.value):
            p = _c.c_char_p()
            _call("ckpt_kv_key", self.ptr, i, _c.byref(p))
            keys.append(p.value.decode())
        return {"world_size": ws.value, "data_bytes": nb.value, "keys": keys}

    def export_safetensors(self, path):
        _call("ckpt_export_safetensors", self.ptr, _b(path))

    def export_llmc(self, path, **opts):
        o = _set(_init(_ffi.llmt_ckpt_llmc_opts, "ckpt_llmc_opts_init"), opts)
        _call("ckpt_export_llmc", self.ptr, _b(path), _c.byref(o))

    def peer_replicate(self, comm, step):
        _call("ckpt_peer_replicate", self.ptr, _need(comm, Comm, "peer_replicate"), step)

    def peer_restore(self, comm, step):
        r = _c.c_int32()
        _call("ckpt_peer_restore", self.ptr, _need(comm, Comm, "peer_restore"), step, _c.byref(r))
        return bool(r.value)


# ------------------------------------------------------------------- job

EVENTS = {"log": 0x01, "validated": 0x02, "saved": 0x04, "anomaly": 0x08,
          "skipped": 0x10, "rollback": 0x20, "interval": 0x40, "start_val": 0x80}


def _metrics(m):
    d = _asdict(m)
    d["event_names"] = [k for k, v in EVENTS.items() if m.events & v]
    return d


class Job(Handle):
    """A whole training run from a spec (dict, JSON text, file or Spec):
    plan, data, model, trainer, checkpoints with their tiers, metrics.
    Keywords are llmt_job_opts fields (run_dir, world_size, rank,
    local_rank, resume, fresh, stop_at, threads); comm= a Comm to run on.
    A key the job cannot honour raises Error naming its JSON path."""
    _destroy = "llmt_job_destroy"

    def __init__(self, spec, comm=None, **opts):
        sp = _spec(spec)
        o = _set(_init(_ffi.llmt_job_opts, "job_opts_init"),
                 {k: (int(v) if isinstance(v, bool) else v) for k, v in opts.items()})
        if comm is not None:
            o.comm = _need(comm, Comm, "Job")
        ctx = _new_ctx()
        out = _c.c_void_p()
        try:
            _call("job_create", ctx, sp.ptr, _c.byref(o), _c.byref(out))
        except Error:
            lib().llmt_context_destroy(ctx)
            raise
        # the job copies the spec, which keeps pointing at its context
        super().__init__(out.value, keep=(sp, comm, o), ctx=ctx)
        if comm is not None:
            comm._used_by(self)  # the C job runs on the comm

    def info(self):
        i = _ffi.llmt_job_info()
        i.struct_size = _c.sizeof(i)
        _call("job_get_info", self.ptr, _c.byref(i))
        return _asdict(i)

    def plan(self):
        """The job's plan (owned by the job; valid while the job is open)."""
        p = _c.c_void_p()
        _call("job_get_plan", self.ptr, _c.byref(p))
        return Plan(_ptr=p.value, _owner=self)

    def step(self):
        m = _ffi.llmt_job_metrics()
        m.struct_size = _c.sizeof(m)
        _call("job_step", self.ptr, _c.byref(m))
        return _metrics(m)

    def steps(self):
        """Iterate over steps until stop_at, yielding each step's metrics."""
        while True:
            i = self.metrics()
            if i["step"] >= self.info()["stop_at"]:
                return
            yield self.step()

    def run(self, n=0):
        m = _ffi.llmt_job_metrics()
        m.struct_size = _c.sizeof(m)
        _call("job_run", self.ptr, n, _c.byref(m))
        return _metrics(m)

    def save(self, async_=False):
        _call("job_save", self.ptr, 1 if async_ else 0)

    def resume(self):
        st = _c.c_int64()
        _call("job_resume", self.ptr, _c.byref(st))
        return st.value

    def metrics(self):
        m = _ffi.llmt_job_metrics()
        m.struct_size = _c.sizeof(m)
        _call("job_get_metrics", self.ptr, _c.byref(m))
        return _metrics(m)

    def evaluate(self):
        v = _c.c_float()
        _call("job_evaluate", self.ptr, _c.byref(v))
        return v.value

    def finish(self):
        _call("job_finish", self.ptr)

    def sample(self):
        return _text("job_sample", self.ptr)


def version():
    return lib().llmt_version().decode()


def features():
    bits = lib().llmt_build_features()
    return sorted(n for b, n in FEATURES.items() if bits & b)
