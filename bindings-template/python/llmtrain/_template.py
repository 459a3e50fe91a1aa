"""llmtrain: Python bindings through ctypes (no compiled extension).

A template to copy into a host project: it declares the C ABI of
include/llmtrain.h by hand, loads libllmtrain.so and turns failing statuses
into exceptions that carry the handle's last error.

    import llmtrain
    lib = llmtrain.Library()              # $LLMT_LIB or libllmtrain.so.1
    print(lib.version(), lib.features())

The data pipeline (tokenizers, llmt_data_prepare, datasets, the loader) is
wrapped below Context: see README.md for a host that embeds only the loader.
Handles are freed by close() or `with`; every failing status raises Error
with llmt_status_string and the handle's last error.
"""
import array
import collections
import ctypes
import ctypes.util
import os
import weakref

ABI_MAJOR = 1  # the ABI major these declarations were written against

from . import _ffi

# every LLMT_FEATURE_* bit of the header, by its lower-case name (generated
# into _ffi: a table written by hand here missed "gloo")
FEATURES = {getattr(_ffi, n): n[len("LLMT_FEATURE_"):].lower()
            for n in dir(_ffi) if n.startswith("LLMT_FEATURE_")}

DTYPES = {"fp32": 1, "bf16": 2, "fp16": 3, "fp8e4m3": 4, "fp8e5m2": 5,
          "int32": 6, "int64": 7, "uint16": 8, "uint8": 9}

MAX_DIMS = 8


class Tensor(ctypes.Structure):
    """llmt_tensor: a non-owning view (strides in elements)."""
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("dtype", ctypes.c_int),
        ("device", ctypes.c_int),
        ("device_index", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_DIMS),
        ("strides", ctypes.c_int64 * MAX_DIMS),
        ("data", ctypes.c_void_p),
    ]


class Error(RuntimeError):
    """A failing llmt_status: .status (the code), .detail (the handle's last
    error); str() is "llmt_status_string: detail"."""

    def __init__(self, status, message, detail=""):
        super().__init__(message)
        self.status = status
        self.detail = detail


class Library:
    def __init__(self, path=None):
        path = path or os.environ.get("LLMT_LIB") or "libllmtrain.so.1"
        self._lib = lib = ctypes.CDLL(path)
        lib.llmt_version.restype = ctypes.c_char_p
        lib.llmt_version_number.restype = ctypes.c_uint32
        lib.llmt_abi_version.restype = ctypes.c_uint32
        lib.llmt_status_string.restype = ctypes.c_char_p
        lib.llmt_status_string.argtypes = [ctypes.c_int]
        lib.llmt_build_features.restype = ctypes.c_uint64
        lib.llmt_feature_name.restype = ctypes.c_char_p
        lib.llmt_feature_name.argtypes = [ctypes.c_uint64]
        lib.llmt_dtype_size.restype = ctypes.c_size_t
        lib.llmt_dtype_size.argtypes = [ctypes.c_int]
        lib.llmt_sizeof.restype = ctypes.c_size_t
        lib.llmt_sizeof.argtypes = [ctypes.c_int]
        lib.llmt_context_create.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
        lib.llmt_context_destroy.argtypes = [ctypes.c_void_p]
        lib.llmt_context_last_error.restype = ctypes.c_char_p
        lib.llmt_context_last_error.argtypes = [ctypes.c_void_p]
        lib.llmt_tensor_init.argtypes = [
            ctypes.POINTER(Tensor), ctypes.c_size_t, ctypes.c_int, ctypes.c_int32,
            ctypes.POINTER(ctypes.c_int64), ctypes.c_void_p, ctypes.c_int, ctypes.c_int32]
        major = lib.llmt_abi_version() >> 16
        if major != ABI_MAJOR:
            raise Error(9, f"libllmtrain ABI {major} != bindings ABI {ABI_MAJOR}")
        if lib.llmt_sizeof(1) != ctypes.sizeof(Tensor):
            raise Error(3, "llmt_tensor layout differs from these bindings")
        _declare_data(lib)

    def version(self):
        return self._lib.llmt_version().decode()

    def abi_version(self):
        v = self._lib.llmt_abi_version()
        return (v >> 16, v & 0xFFFF)

    def features(self):
        bits = self._lib.llmt_build_features()
        return sorted(name for bit, name in FEATURES.items() if bits & bit)

    def status_string(self, status):
        return self._lib.llmt_status_string(status).decode()

    def dtype_size(self, name):
        return self._lib.llmt_dtype_size(DTYPES[name])

    def check(self, status, detail=""):
        if status != 0:
            msg = self.status_string(status)
            raise Error(status, f"{msg}: {detail}" if detail else msg, detail)

    def tensor(self, dtype, shape, address):
        """A view of memory at `address` (e.g. a numpy array's .ctypes.data)."""
        t = Tensor()
        dims = (ctypes.c_int64 * len(shape))(*shape)
        self.check(self._lib.llmt_tensor_init(ctypes.byref(t), ctypes.sizeof(t),
                                              DTYPES[dtype], len(shape), dims,
                                              address, 0, 0))
        return t


# ---------------------------------------------------------------------------
# Data pipeline: tokenizers, llmt_data_prepare, datasets, the loader.
# Everything below is enough for a host that embeds only the data loader.

(OK, ERR_INVALID_ARGUMENT, ERR_NULL_POINTER, ERR_STRUCT_SIZE, ERR_OUT_OF_MEMORY,
 ERR_UNSUPPORTED, ERR_IO, ERR_FORMAT, ERR_CHECKSUM, ERR_VERSION, ERR_SPEC,
 ERR_NOT_FOUND, ERR_STATE, ERR_TIMEOUT, ERR_ABORTED, ERR_COMM, ERR_CUDA,
 ERR_NCCL, ERR_MPI, ERR_NUMERIC, ERR_BUFFER_TOO_SMALL, ERR_IN_PROGRESS,
 ERR_INTERNAL) = range(23)

VERDICTS = ("keep", "too_short", "too_long", "nonalpha", "dup_lines",
            "top_ngram", "exact_dup", "near_dup")  # llmt_data_verdict order

_c = ctypes
_vp = _c.c_void_p
_pvp = _c.POINTER(_c.c_void_p)
_st = _c.c_int  # llmt_status
_i32, _i64, _u64, _sz = _c.c_int32, _c.c_int64, _c.c_uint64, _c.c_size_t


class _Struct(_c.Structure):
    """An options / report struct: keyword fields, as_dict(), update()."""

    def update(self, **fields):
        names = {f[0] for f in self._fields_}
        for k, v in fields.items():
            if k not in names or k == "struct_size":
                raise TypeError(f"{type(self).__name__} has no field {k!r}")
            if isinstance(v, str):
                v = v.encode()
            setattr(self, k, v)
        return self

    def as_dict(self):
        out = {}
        for f in self._fields_:
            v = getattr(self, f[0])
            if isinstance(v, bytes):
                v = v.decode()
            elif isinstance(v, _c.Array):
                v = list(v)
            elif f[0] != "struct_size" and not isinstance(v, (int, float, type(None))):
                continue  # pointers and callbacks
            out[f[0]] = v
        return out

    def __repr__(self):
        return f"{type(self).__name__}({self.as_dict()})"


class IngestOpts(_Struct):
    _fields_ = [("struct_size", _sz), ("text_field", _c.c_char_p),
                ("doc_separator", _c.c_char_p)]


class FilterOpts(_Struct):
    """llmt_data_filter_opts."""
    _fields_ = [("struct_size", _sz), ("min_chars", _i64), ("max_chars", _i64),
                ("max_nonalpha_frac", _c.c_double), ("max_dup_line_frac", _c.c_double),
                ("max_top_ngram_frac", _c.c_double), ("ngram_min_words", _i64)]


class DedupOpts(_Struct):
    _fields_ = [("struct_size", _sz), ("exact", _i32), ("near", _i32),
                ("shingle", _i32), ("permutations", _i32), ("bands", _i32),
                ("threshold", _c.c_double), ("seed", _u64)]


PROGRESS_FN = _c.CFUNCTYPE(None, _vp, _i64, _i64, _i64)


class PrepareOpts(_Struct):
    """llmt_data_prepare_opts."""
    _fields_ = [("struct_size", _sz), ("ingest", _c.POINTER(IngestOpts)),
                ("filter", _c.POINTER(FilterOpts)), ("dedup", _c.POINTER(DedupOpts)),
                ("no_filter", _i32), ("no_dedup", _i32), ("llmc_format", _i32),
                ("shard_tokens", _i64), ("val_fraction", _c.c_double), ("seed", _u64),
                ("progress", PROGRESS_FN), ("progress_user", _vp)]


class DataReport(_Struct):
    """llmt_data_report: counts of one llmt_data_prepare."""
    _fields_ = [("struct_size", _sz), ("files", _i64), ("documents", _i64),
                ("bytes", _i64), ("invalid_utf8", _i64), ("bad_lines", _i64),
                ("verdicts", _i64 * len(VERDICTS)),
                ("train_documents", _i64), ("val_documents", _i64),
                ("train_tokens", _i64), ("val_tokens", _i64),
                ("train_shards", _i32), ("val_shards", _i32), ("seconds", _c.c_double)]

    @property
    def kept(self):
        return self.verdicts[0]

    def verdict_counts(self):
        return dict(zip(VERDICTS, self.verdicts))


class DatasetInfo(_Struct):
    _fields_ = [("struct_size", _sz), ("shards", _i32), ("vocab_size", _i32),
                ("tokens", _i64), ("documents", _i64), ("fingerprint", _u64)]


class LoaderOpts(_Struct):
    _fields_ = [("struct_size", _sz), ("seq_len", _i32), ("micro_batch", _i32),
                ("grad_accum", _i32), ("dp_rank", _i32), ("dp_size", _i32),
                ("shuffle", _i32), ("prefetch", _i32), ("seed", _u64)]


class LoaderState(_Struct):
    """What a checkpoint saves (as_dict() / LoaderState.from_dict for JSON)."""
    _fields_ = [("struct_size", _sz), ("seed", _u64), ("epoch", _i64),
                ("cursor", _i64), ("samples_per_epoch", _i64), ("fingerprint", _u64),
                ("seq_len", _i32), ("order", _i32)]  # 0: not recorded, not checked

    @classmethod
    def from_dict(cls, d):
        s = cls(struct_size=_c.sizeof(cls))
        return s.update(**{k: v for k, v in d.items() if k != "struct_size"})


# name: (restype, argtypes)
_DATA_SIGNATURES = {
    "llmt_context_last_status": (_st, [_vp]),
    "llmt_context_opts_init": (_st, [_vp, _sz]),
    "llmt_tokenizer_create_bytes": (_st, [_vp, _pvp]),
    "llmt_tokenizer_load_gpt2": (_st, [_vp, _c.c_char_p, _c.c_char_p, _pvp]),
    "llmt_tokenizer_train_bpe": (_st, [_vp, _c.c_char_p, _sz, _i32, _pvp]),
    "llmt_tokenizer_save": (_st, [_vp, _c.c_char_p]),
    "llmt_tokenizer_load": (_st, [_vp, _c.c_char_p, _pvp]),
    "llmt_tokenizer_encode": (_st, [_vp, _c.c_char_p, _sz, _c.POINTER(_i32), _sz,
                                    _c.POINTER(_sz)]),
    "llmt_tokenizer_decode": (_st, [_vp, _c.POINTER(_i32), _sz, _c.c_char_p, _sz,
                                    _c.POINTER(_sz)]),
    "llmt_tokenizer_vocab_size": (_st, [_vp, _c.POINTER(_i32)]),
    "llmt_tokenizer_eot": (_st, [_vp, _c.POINTER(_i32)]),
    "llmt_tokenizer_token_bytes": (_st, [_vp, _i32, _c.c_char_p, _sz, _c.POINTER(_sz)]),
    "llmt_tokenizer_clone": (_st, [_vp, _vp, _pvp]),
    "llmt_tokenizer_destroy": (None, [_vp]),
    "llmt_tokenizer_last_error": (_c.c_char_p, [_vp]),
    "llmt_data_verdict_name": (_c.c_char_p, [_i32]),
    "llmt_ingest_opts_init": (_st, [_c.POINTER(IngestOpts), _sz]),
    "llmt_data_filter_opts_init": (_st, [_c.POINTER(FilterOpts), _sz]),
    "llmt_dedup_opts_init": (_st, [_c.POINTER(DedupOpts), _sz]),
    "llmt_data_prepare_opts_init": (_st, [_c.POINTER(PrepareOpts), _sz]),
    "llmt_data_filter_check": (_st, [_c.POINTER(FilterOpts), _c.c_char_p, _sz,
                                     _c.POINTER(_i32)]),
    "llmt_data_prepare": (_st, [_vp, _c.POINTER(_c.c_char_p), _sz, _vp, _c.c_char_p,
                                _c.POINTER(PrepareOpts), _c.POINTER(DataReport)]),
    "llmt_dataset_open": (_st, [_vp, _c.c_char_p, _i32, _pvp]),
    "llmt_dataset_get_info": (_st, [_vp, _c.POINTER(DatasetInfo)]),
    "llmt_dataset_shard": (_st, [_vp, _i32, _c.POINTER(_c.c_char_p), _c.POINTER(_i64),
                                 _c.POINTER(_i64)]),
    "llmt_dataset_read": (_st, [_vp, _i32, _i64, _c.POINTER(_i32), _sz]),
    "llmt_dataset_destroy": (None, [_vp]),
    "llmt_dataset_last_error": (_c.c_char_p, [_vp]),
    "llmt_loader_opts_init": (_st, [_c.POINTER(LoaderOpts), _sz]),
    "llmt_loader_create": (_st, [_vp, _c.POINTER(LoaderOpts), _pvp]),
    "llmt_loader_next": (_st, [_vp, _c.POINTER(_i32), _c.POINTER(_i32), _c.POINTER(_i64)]),
    "llmt_loader_get_state": (_st, [_vp, _c.POINTER(LoaderState)]),
    "llmt_loader_set_state": (_st, [_vp, _c.POINTER(LoaderState)]),
    "llmt_loader_assign_shards": (_st, [_vp, _i32, _i64, _c.POINTER(_i32), _sz,
                                        _c.POINTER(_sz)]),
    "llmt_loader_samples_per_epoch": (_st, [_vp, _c.POINTER(_i64)]),
    "llmt_loader_destroy": (None, [_vp]),
    "llmt_loader_last_error": (_c.c_char_p, [_vp]),
    "llmt_data_synth_markov": (_st, [_u64, _i32, _i32, _c.c_char_p, _sz,
                                     _c.POINTER(_c.c_double)]),
}


# llmt_type_id of each struct declared here (include/llmtrain.h): the
# library says how large its own struct is, so a layout that drifted from
# the header is caught when the library is loaded, not by corrupt memory.
_TYPE_IDS = {"IngestOpts": 18, "IngestStats": 19, "FilterOpts": 20,
             "DedupOpts": 21, "DatasetInfo": 22, "LoaderOpts": 23,
             "LoaderState": 24, "PrepareOpts": 25, "DataReport": 26}


def _declare_data(lib):
    for name, (res, args) in _DATA_SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    for cls_name, tid in _TYPE_IDS.items():
        cls = globals().get(cls_name)
        if cls is None:
            continue
        n = lib.llmt_sizeof(tid)
        if n and n != _c.sizeof(cls):  # 0: a library older than the id
            raise ImportError(f"llmtrain: {cls_name} is {_c.sizeof(cls)} bytes "
                              f"here, {n} in the library: the binding does not "
                              f"match llmtrain.h")


if array.array("i").itemsize != 4 or array.array("q").itemsize != 8:
    raise ImportError("llmtrain: array('i') must be int32 and array('q') int64")


def _int_format(mv, size):
    """mv holds signed native integers of `size` bytes."""
    return mv.itemsize == size and mv.format.lstrip("@=<") in ("i", "l", "q")


def _out_buffer(obj, n, ctype, typecode):
    """A ctypes array of n `ctype` over obj's memory (a writable contiguous
    buffer of integers of that size: array.array('i'/'q'), a numpy int32 /
    int64 array...), or over a new array.array when obj is None. Returns
    (ctypes array, obj)."""
    if obj is None:
        obj = array.array(typecode, bytes(n * _c.sizeof(ctype)))
    mv = memoryview(obj)
    if mv.readonly or not mv.c_contiguous or mv.nbytes < n * _c.sizeof(ctype) \
            or not _int_format(mv, _c.sizeof(ctype)):
        raise ValueError(f"need a writable contiguous buffer of {n} x "
                         f"{_c.sizeof(ctype)}-byte items")
    return (ctype * n).from_buffer(mv.cast("B")), obj


def _i32_in(ids):
    """int32 ids from a list, array('i') or int32 numpy array."""
    try:
        mv = memoryview(ids)
    except TypeError:
        mv = None
    if mv is not None and _int_format(mv, 4) and mv.c_contiguous:
        n = mv.nbytes // 4
        return (_i32 * n).from_buffer_copy(mv.cast("B")), n
    ids = list(ids)
    return (_i32 * len(ids))(*ids), len(ids)


def _paths(items):
    if isinstance(items, (str, bytes, os.PathLike)):
        items = [items]
    enc = [os.fsencode(p) for p in items]
    return (_c.c_char_p * len(enc))(*enc), len(enc)


class _Handle:
    """An owned llmt handle: close() (or `with`) frees it; children (a
    tokenizer of a context, a loader of a dataset) are closed first, since
    the C API forbids them to outlive their parent."""
    _destroy_fn = None
    _error_fn = None

    def __init__(self, lib, parent=None):
        self.lib = lib
        self.handle = _c.c_void_p()
        self._children = weakref.WeakSet()
        self._parent = parent
        if parent is not None:
            parent._children.add(self)

    def _h(self):
        if not self.handle:
            raise Error(ERR_STATE, f"{type(self).__name__} is closed")
        return self.handle

    def last_error(self):
        msg = getattr(self.lib._lib, self._error_fn)(self.handle)
        return msg.decode(errors="replace") if msg else ""

    def _check(self, status, src=None):
        """Raise Error for a failing status with the last error of `src`
        (the handle the C API records this call's failure on)."""
        if status != 0:
            self.lib.check(status, (src or self).last_error())

    def close(self):
        for child in list(self._children):
            child.close()
        if self.handle:
            getattr(self.lib._lib, self._destroy_fn)(self.handle)
            self.handle = _c.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


LOG_LEVELS = {"trace": 0, "debug": 1, "info": 2, "warn": 3, "error": 4, "off": 5}
LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_char_p)


class ContextOpts(_Struct):
    _fields_ = [("struct_size", _sz), ("log_level", ctypes.c_int), ("log_fn", LOG_FN),
                ("log_user", _vp), ("allocator", _vp)]


class Context(_Handle):
    """llmt_context as a context manager. log_level: "trace".."off" (None:
    the library's default, WARN or $LLMT_LOG_LEVEL); log_fn(level, module,
    message) receives the messages instead of stderr (it may be called from
    library threads). Closing the context closes the tokenizers and
    datasets made from it (and their loaders) first."""
    _destroy_fn = "llmt_context_destroy"
    _error_fn = "llmt_context_last_error"

    def __init__(self, lib, log_level=None, log_fn=None):
        super().__init__(lib)
        opts = None
        if log_level is not None or log_fn is not None:
            if lib._lib.llmt_sizeof(2) != ctypes.sizeof(ContextOpts):
                raise Error(ERR_STRUCT_SIZE, "llmt_context_opts layout differs from these bindings")
            opts = ContextOpts()
            lib.check(lib._lib.llmt_context_opts_init(ctypes.byref(opts), ctypes.sizeof(opts)))
            if log_level is not None:
                opts.log_level = LOG_LEVELS.get(log_level, log_level)
            if log_fn is not None:
                names = {v: k for k, v in LOG_LEVELS.items()}

                def sink(_user, level, module, msg):
                    try:
                        log_fn(names.get(level, level), module.decode(errors="replace"),
                               msg.decode(errors="replace"))
                    except Exception:
                        pass  # an exception must not cross into C
                self._log_fn = LOG_FN(sink)  # kept alive as long as the context
                opts.log_fn = self._log_fn
            opts = ctypes.byref(opts)
        lib.check(lib._lib.llmt_context_create(opts, ctypes.byref(self.handle)))

    def last_status(self):
        return self.lib._lib.llmt_context_last_status(self._h())


def _ctx_handle(ctx):
    return ctx._h() if ctx is not None else None


class Tokenizer(_Handle):
    """llmt_tokenizer. Create with Tokenizer.create_bytes(ctx),
    .train_bpe(ctx, text, vocab_size), .load(ctx, path) or
    .load_gpt2(ctx, encoder_json, vocab_bpe). ctx may be None."""
    _destroy_fn = "llmt_tokenizer_destroy"
    _error_fn = "llmt_tokenizer_last_error"

    @classmethod
    def _make(cls, lib, ctx, fn, *args):
        tok = cls(lib, ctx)
        st = getattr(lib._lib, fn)(_ctx_handle(ctx), *args, _c.byref(tok.handle))
        if st != 0:  # creation errors are recorded on the context
            lib.check(st, ctx.last_error() if ctx is not None else "")
        return tok

    @classmethod
    def create_bytes(cls, ctx):
        return cls._make(ctx.lib, ctx, "llmt_tokenizer_create_bytes")

    @classmethod
    def train_bpe(cls, ctx, text, vocab_size):
        data = text.encode() if isinstance(text, str) else bytes(text)
        return cls._make(ctx.lib, ctx, "llmt_tokenizer_train_bpe", data, len(data),
                         vocab_size)

    @classmethod
    def load(cls, ctx, path):
        return cls._make(ctx.lib, ctx, "llmt_tokenizer_load", os.fsencode(path))

    @classmethod
    def load_gpt2(cls, ctx, encoder_json, vocab_bpe):
        return cls._make(ctx.lib, ctx, "llmt_tokenizer_load_gpt2",
                         os.fsencode(encoder_json), os.fsencode(vocab_bpe))

    def clone(self, ctx=None):
        ctx = ctx or self._parent
        return self._make(self.lib, ctx, "llmt_tokenizer_clone", self._h())

    def save(self, path):
        self._check(self.lib._lib.llmt_tokenizer_save(self._h(), os.fsencode(path)))

    def _forget_too_small(self):
        """A first try answered BUFFER_TOO_SMALL with the size to retry
        with: forget it on this thread (llmt_last_error), where the retry,
        succeeding, would leave it for a later reader to take as a failure."""
        self.lib._lib.llmt_last_error_clear()

    def encode(self, text):
        """str (UTF-8) or bytes -> array('i') of ids."""
        data = text.encode() if isinstance(text, str) else bytes(text)
        n = _sz()
        cap = len(data) + 1  # byte-level tokenizers: at most one id a byte
        for _ in range(2):
            buf = (_i32 * cap)()
            st = self.lib._lib.llmt_tokenizer_encode(self._h(), data, len(data), buf,
                                                     cap, _c.byref(n))
            if st != ERR_BUFFER_TOO_SMALL:
                break
            self._forget_too_small()
            cap = n.value
        self._check(st)
        return array.array("i", memoryview(buf).cast("B")[:4 * n.value].cast("i"))

    def decode(self, ids):
        """ids (list, array('i'), int32 numpy array) -> bytes (decode(..).decode()
        for text: a token may end inside a UTF-8 sequence)."""
        arr, n = _i32_in(ids)
        size = _sz()
        lib = self.lib._lib
        self._check(lib.llmt_tokenizer_decode(self._h(), arr, n, None, 0, _c.byref(size)))
        buf = _c.create_string_buffer(max(size.value, 1))
        self._check(lib.llmt_tokenizer_decode(self._h(), arr, n, buf, size.value,
                                              _c.byref(size)))
        return buf.raw[:size.value]

    def token_bytes(self, token_id):
        n = _sz()
        buf = _c.create_string_buffer(256)
        st = self.lib._lib.llmt_tokenizer_token_bytes(self._h(), token_id, buf, 256,
                                                      _c.byref(n))
        if st == ERR_BUFFER_TOO_SMALL:
            self._forget_too_small()
            buf = _c.create_string_buffer(n.value)
            st = self.lib._lib.llmt_tokenizer_token_bytes(self._h(), token_id, buf,
                                                          n.value, _c.byref(n))
        self._check(st)
        return buf.raw[:n.value]

    @property
    def vocab_size(self):
        v = _i32()
        self._check(self.lib._lib.llmt_tokenizer_vocab_size(self._h(), _c.byref(v)))
        return v.value

    @property
    def eot(self):
        v = _i32()
        self._check(self.lib._lib.llmt_tokenizer_eot(self._h(), _c.byref(v)))
        return v.value


def _opts(lib, cls, init_fn, src=None):
    """A struct filled with the library's defaults by its _opts_init, then
    `src` (a dict of fields, or a struct of that type used as is)."""
    if isinstance(src, cls):
        return src
    o = cls()
    lib.check(getattr(lib._lib, init_fn)(_c.byref(o), _c.sizeof(o)), cls.__name__)
    if src:
        o.update(**src)
    return o


def ingest_opts(lib, **fields):
    return _opts(lib, IngestOpts, "llmt_ingest_opts_init", fields)


def filter_opts(lib, **fields):
    return _opts(lib, FilterOpts, "llmt_data_filter_opts_init", fields)


def dedup_opts(lib, **fields):
    return _opts(lib, DedupOpts, "llmt_dedup_opts_init", fields)


def prepare_opts(lib, **fields):
    return _opts(lib, PrepareOpts, "llmt_data_prepare_opts_init", fields)


def loader_opts(lib, **fields):
    return _opts(lib, LoaderOpts, "llmt_loader_opts_init", fields)


def filter_check(lib, text, opts=None):
    """The verdict name of llmt_data_filter_check ("keep", "too_short", ...)."""
    o = _opts(lib, FilterOpts, "llmt_data_filter_opts_init", opts)
    data = text.encode() if isinstance(text, str) else bytes(text)
    v = _i32()
    lib.check(lib._lib.llmt_data_filter_check(_c.byref(o), data, len(data), _c.byref(v)))
    return lib._lib.llmt_data_verdict_name(v.value).decode()


def prepare(ctx, inputs, tokenizer, out_dir, *, ingest=None, filter=None, dedup=None,
            progress=None, **fields):
    """llmt_data_prepare: ingest `inputs` (paths), filter, dedup, tokenize and
    write shards to out_dir. ingest/filter/dedup: dicts of their opts' fields
    (or the structs); other keywords are llmt_data_prepare_opts fields
    (no_filter, no_dedup, llmc_format, shard_tokens, val_fraction, seed).
    progress(bytes_done, bytes_total, documents) is called after each
    document. Returns the DataReport; on failure the Error carries it as
    .report (what was done up to then)."""
    lib = ctx.lib
    po = prepare_opts(lib, **fields)
    subs = (("ingest", IngestOpts, "llmt_ingest_opts_init", ingest),
            ("filter", FilterOpts, "llmt_data_filter_opts_init", filter),
            ("dedup", DedupOpts, "llmt_dedup_opts_init", dedup))
    for name, cls, init, src in subs:
        if src is not None:
            setattr(po, name, _c.pointer(_opts(lib, cls, init, src)))
    raised = []
    if progress is not None:
        def trampoline(_user, done, total, docs):
            if raised:
                return
            try:
                progress(done, total, docs)
            except BaseException as e:  # re-raised after the call
                raised.append(e)
        po.progress = PROGRESS_FN(trampoline)
    report = DataReport(struct_size=_c.sizeof(DataReport))
    paths, n = _paths(inputs)
    st = lib._lib.llmt_data_prepare(ctx._h(), paths, n, tokenizer._h(),
                                    os.fsencode(out_dir), _c.byref(po), _c.byref(report))
    if st != 0:
        try:
            ctx._check(st)
        except Error as e:
            e.report = report
            raise
    if raised:
        raise raised[0]
    return report


def synth_markov(lib, nbytes, seed=0, alphabet=27, branching=3):
    """llmt_data_synth_markov: (text bytes, entropy rate in nats/char)."""
    buf = _c.create_string_buffer(nbytes + 1)
    rate = _c.c_double()
    lib.check(lib._lib.llmt_data_synth_markov(seed, alphabet, branching, buf, nbytes,
                                              _c.byref(rate)),
              f"synth_markov(alphabet={alphabet}, branching={branching})")
    return buf.raw[:nbytes], rate.value


Shard = collections.namedtuple("Shard", "path tokens documents")
Batch = collections.namedtuple("Batch", "inputs targets sample_ids")


class Dataset(_Handle):
    """llmt_dataset: shards opened with mmap (a shard file, a directory or a
    glob). Loaders made from it are closed when it is."""
    _destroy_fn = "llmt_dataset_destroy"
    _error_fn = "llmt_dataset_last_error"

    def __init__(self, ctx, path, verify=False):
        super().__init__(ctx.lib, ctx)
        ctx._check(self.lib._lib.llmt_dataset_open(ctx._h(), os.fsencode(path),
                                                   1 if verify else 0,
                                                   _c.byref(self.handle)))

    def info(self):
        info = DatasetInfo(struct_size=_c.sizeof(DatasetInfo))
        self._check(self.lib._lib.llmt_dataset_get_info(self._h(), _c.byref(info)))
        return info

    def __len__(self):
        return self.info().shards

    def shard(self, index):
        p, t, d = _c.c_char_p(), _i64(), _i64()
        self._check(self.lib._lib.llmt_dataset_shard(self._h(), index, _c.byref(p),
                                                     _c.byref(t), _c.byref(d)))
        return Shard(os.fsdecode(p.value), t.value, d.value)

    def shards(self):
        return [self.shard(i) for i in range(len(self))]

    def read(self, index, offset=0, n=None, out=None):
        """Tokens [offset, offset + n) of shard `index` (n: to its end) into
        `out` (a writable int32 buffer) or a new array('i')."""
        if n is None:
            n = self.shard(index).tokens - offset
        buf, out = _out_buffer(out, n, _i32, "i")
        self._check(self.lib._lib.llmt_dataset_read(self._h(), index, offset, buf, n))
        return out

    def loader(self, **fields):
        return Loader(self, **fields)


class Loader(_Handle):
    """llmt_loader over a Dataset; keywords are llmt_loader_opts fields
    (seq_len, micro_batch, grad_accum, dp_rank, dp_size, shuffle, prefetch,
    seed) or opts=LoaderOpts."""
    _destroy_fn = "llmt_loader_destroy"
    _error_fn = "llmt_loader_last_error"

    def __init__(self, dataset, opts=None, **fields):
        super().__init__(dataset.lib, dataset)
        self.opts = _opts(self.lib, LoaderOpts, "llmt_loader_opts_init", opts or fields)
        # creation errors are recorded on the dataset
        self._check(self.lib._lib.llmt_loader_create(dataset._h(), _c.byref(self.opts),
                                                     _c.byref(self.handle)), dataset)

    def next(self, inputs=None, targets=None, sample_ids=None):
        """The next micro-batch: Batch(inputs, targets, sample_ids), each
        row-major micro_batch x seq_len (ids: micro_batch). Pass writable
        buffers (e.g. numpy int32 arrays, pinned host memory) to fill them in
        place; by default new array('i') / array('q') are returned."""
        bt = self.opts.micro_batch * self.opts.seq_len
        ib, inputs = _out_buffer(inputs, bt, _i32, "i")
        tb, targets = _out_buffer(targets, bt, _i32, "i")
        sb, sample_ids = _out_buffer(sample_ids, self.opts.micro_batch, _i64, "q")
        self._check(self.lib._lib.llmt_loader_next(self._h(), ib, tb, sb))
        return Batch(inputs, targets, sample_ids)

    def __iter__(self):
        while True:
            yield self.next()

    def get_state(self):
        st = LoaderState(struct_size=_c.sizeof(LoaderState))
        self._check(self.lib._lib.llmt_loader_get_state(self._h(), _c.byref(st)))
        return st

    def set_state(self, state):
        if not isinstance(state, LoaderState):
            state = LoaderState.from_dict(state)
        self._check(self.lib._lib.llmt_loader_set_state(self._h(), _c.byref(state)))

    @property
    def samples_per_epoch(self):
        v = _i64()
        self._check(self.lib._lib.llmt_loader_samples_per_epoch(self._h(), _c.byref(v)))
        return v.value

    def assign_shards(self, dp_rank, epoch):
        """Shard indices dp rank `dp_rank` reads in `epoch`, ascending."""
        n = _sz()
        lib = self.lib._lib
        self._check(lib.llmt_loader_assign_shards(self._h(), dp_rank, epoch, None, 0,
                                                  _c.byref(n)))
        ids = (_i32 * max(n.value, 1))()
        self._check(lib.llmt_loader_assign_shards(self._h(), dp_rank, epoch, ids, n.value,
                                                  _c.byref(n)))
        return list(ids[:n.value])
