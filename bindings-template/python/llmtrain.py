"""llmtrain: Python bindings through ctypes (no compiled extension).

A template to copy into a host project: it declares the C ABI of
include/llmtrain.h by hand, loads libllmtrain.so and turns failing statuses
into exceptions that carry the handle's last error.

    import llmtrain
    lib = llmtrain.Library()              # $LLMT_LIB or libllmtrain.so.1
    print(lib.version(), lib.features())
"""
import ctypes
import ctypes.util
import os

ABI_MAJOR = 1  # the ABI major these declarations were written against

FEATURES = {
    1 << 0: "cuda",
    1 << 1: "nccl",
    1 << 2: "mpi",
    1 << 3: "aio",
    1 << 4: "openblas",
    1 << 5: "openmp",
}

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
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


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
            raise Error(status, f"{msg}: {detail}" if detail else msg)

    def tensor(self, dtype, shape, address):
        """A view of memory at `address` (e.g. a numpy array's .ctypes.data)."""
        t = Tensor()
        dims = (ctypes.c_int64 * len(shape))(*shape)
        self.check(self._lib.llmt_tensor_init(ctypes.byref(t), ctypes.sizeof(t),
                                              DTYPES[dtype], len(shape), dims,
                                              address, 0, 0))
        return t


class Context:
    """llmt_context as a context manager."""

    def __init__(self, lib):
        self.lib = lib
        self.handle = ctypes.c_void_p()
        lib.check(lib._lib.llmt_context_create(None, ctypes.byref(self.handle)))

    def last_error(self):
        return self.lib._lib.llmt_context_last_error(self.handle).decode()

    def close(self):
        if self.handle:
            self.lib._lib.llmt_context_destroy(self.handle)
            self.handle = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
