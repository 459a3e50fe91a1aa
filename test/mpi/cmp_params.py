#!/usr/bin/env python3
"""Compare the parameters of two safetensors files (`llmtrain ckpt export`):
the same tensor names, shapes and F32 dtype, and RUN within the bounds of
test/train/test_device_tpdp.c (tp, dp, ZeRO and sequence parallelism only
change the order of fp32 sums): relative L2 difference over all parameters
<= 1e-5, every element within 1e-5 absolute except at most 1 in 10^4, and
those within 1e-4 (an element whose gradient is within rounding of zero
gets an AdamW step those ulps decide). Prints the measured worst cases;
exit 1 when a bound is broken. Standard library only (no numpy here).

usage: cmp_params.py REF.safetensors RUN.safetensors
"""
import json
import struct
import sys


def load(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack_from("<Q", blob, 0)
    head = json.loads(blob[8:8 + n])
    head.pop("__metadata__", None)
    return head, memoryview(blob)[8 + n:]


def main():
    ref, ref_data = load(sys.argv[1])
    run, run_data = load(sys.argv[2])
    if sorted(ref) != sorted(run):
        print("tensor names differ:", sorted(set(ref) ^ set(run)))
        return 1
    worst, where, over, numel, dd, rr = 0.0, "", 0, 0, 0.0, 0.0
    for name, r in sorted(ref.items()):
        q = run[name]
        if r["dtype"] != "F32" or q["dtype"] != "F32" or r["shape"] != q["shape"]:
            print(f"{name}: {r['dtype']} {r['shape']} against {q['dtype']} {q['shape']}")
            return 1
        a0, a1 = r["data_offsets"]
        b0, b1 = q["data_offsets"]
        a = ref_data[a0:a1].cast("f")
        b = run_data[b0:b1].cast("f")
        for x, y in zip(a, b):
            d = abs(x - y)
            if not d <= worst:  # NaN shows
                worst, where = d, name
            over += not d <= 1e-5
            dd += d * d
            rr += x * x
        numel += len(a)
    rel = (dd / rr) ** 0.5 if rr > 0 else float("inf")
    print(f"{numel} parameters in {len(ref)} tensors: relative L2 diff {rel:.3g} "
          f"(bound 1e-5), max abs diff {worst:.3g} in {where} (bound 1e-4), "
          f"{over} above 1e-5 (bound {numel // 10000})")
    return 0 if rel <= 1e-5 and worst <= 1e-4 and over * 10000 <= numel else 1


if __name__ == "__main__":
    sys.exit(main())
