"""Smoke test of the ctypes bindings against a built libllmtrain.
usage: smoke_test.py PATH/TO/libllmtrain.so"""
import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llmtrain  # noqa: E402


def main():
    lib = llmtrain.Library(sys.argv[1] if len(sys.argv) > 1 else None)
    failures = 0

    def check(cond, what):
        nonlocal failures
        print(("ok   " if cond else "FAIL ") + what)
        failures += not cond

    v = lib.version()
    check(len(v.split(".")) == 3 and all(p.isdigit() for p in v.split(".")), f"version {v}")
    check(lib.abi_version()[0] == llmtrain.ABI_MAJOR, f"ABI {lib.abi_version()}")
    feats = lib.features()
    bits = lib._lib.llmt_build_features()
    check(len(feats) == bin(bits).count("1") and "gloo" in llmtrain.FEATURES.values(),
          f"features {feats} name every bit of {bits:#x}")
    check(lib.status_string(0) == "ok", "status 0 is ok")
    check(lib.status_string(13) == "timed out", "status 13 is timed out")
    check(lib.status_string(123456) == "unknown status", "unknown status")
    check(lib.dtype_size("bf16") == 2 and lib.dtype_size("int64") == 8, "dtype sizes")
    buf = (ctypes.c_float * 6)()
    t = lib.tensor("fp32", [2, 3], ctypes.addressof(buf))
    check(list(t.strides[:2]) == [3, 1], "tensor strides")
    try:
        lib.tensor("fp32", [2, -3], ctypes.addressof(buf))
        check(False, "negative shape raises")
    except llmtrain.Error as e:
        check(e.status == 1, "negative shape raises invalid argument")
    with llmtrain.Context(lib) as ctx:
        check(ctx.last_error() == "", "fresh context has no error")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
