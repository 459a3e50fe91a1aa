#!/usr/bin/env python3
"""Pairs bench_gpu's results with torch_peer's and writes one JSON with the
ratios and the issue's targets:

- GEMM: our TFLOP/s over torch.matmul's (target >= 0.95);
- memory-bound kernels: our GB/s over the device copy bandwidth measured in
  the same run (target >= 0.80), and our time against torch's;
- attention: torch SDPA time over ours (> 1 means we are faster; target
  >= 1, issue 22); NAME_wmma (the wmma register kernels), NAME_mma
  (the mma.sync ones, in results before they became the default) and
  NAME_mmaq (the backward with dQ by atomics, attn_scalar 5) pair with
  torch's NAME.

A run without copy_d2d (bench_gpu --only ...) leaves the GB/s fractions out.

    compare.py OURS.json TORCH.json ENV.json OUT.json
"""
import json
import re
import sys

MEMBOUND = ["layernorm_fwd_768", "layernorm_bwd_768", "layernorm_fwd_768_n65536",
            "layernorm_bwd_768_n65536", "rmsnorm_fwd_768", "rmsnorm_bwd_768",
            "rmsnorm_fwd_2048", "rmsnorm_bwd_2048", "gelu_fwd_3072", "gelu_bwd_3072",
            "residual_3072", "adamw_124M", "softmax_xent_fwd_50304"]
# bench_gpu's variants of a case, compared with the peer's case of the base
# name: the wmma kernels, dQ by atomics, the mma.sync tile configurations
VARIANT = re.compile(r"_(wmma|mmaq|mma|f\d+|q\d+|kv\d+|v\d+)$")


def main():
    ours_f, torch_f, env_f, out_f = sys.argv[1:5]
    ours = {r["name"]: r for r in json.load(open(ours_f))["results"]}
    tj = json.load(open(torch_f))
    peer = {r["name"]: r for r in tj["results"]}
    env = json.load(open(env_f))
    cp = ours.get("copy_d2d")
    copy_bw = cp["bytes"] / (cp["median_ms"] * 1e-3) if cp else float("nan")
    rows = []
    for name, r in ours.items():
        row = {"name": name, "ours_ms": r["median_ms"]}
        p = peer.get(name) or peer.get(VARIANT.sub("", name))
        if p:
            row["torch_ms"] = p["median_ms"]
            row["speedup_vs_torch"] = p["median_ms"] / r["median_ms"]
        if r.get("flops"):
            row["ours_tflops"] = r["flops"] / (r["median_ms"] * 1e-3) / 1e12
            if p:
                row["torch_tflops"] = p["flops"] / (p["median_ms"] * 1e-3) / 1e12
        if r.get("bytes"):
            row["ours_gbps"] = r["bytes"] / (r["median_ms"] * 1e-3) / 1e9
            row["fraction_of_copy_bw"] = row["ours_gbps"] * 1e9 / copy_bw
            if r.get("queued_ms"):  # back to back, as in a training step
                row["ours_queued_ms"] = r["queued_ms"]
                row["fraction_of_copy_bw_queued"] = (
                    r["bytes"] / (r["queued_ms"] * 1e-3) / copy_bw)
        if name.startswith("gemm") and p:
            row["target"] = "ours/torch TFLOP/s >= 0.95"
            row["meets_target"] = row["speedup_vs_torch"] >= 0.95
        if VARIANT.sub("", name) in MEMBOUND and cp:
            row["target"] = "GB/s >= 0.80 of copy_d2d"
            row["meets_target"] = row["fraction_of_copy_bw"] >= 0.80
            if "fraction_of_copy_bw_queued" in row:
                row["meets_target_queued"] = row["fraction_of_copy_bw_queued"] >= 0.80
        if name.startswith("attention") and p:
            row["target"] = "torch SDPA ms / ours >= 1.0"
            row["meets_target"] = row["speedup_vs_torch"] >= 1.0
        rows.append(row)
    res = {"device": env.get("gpu"), "env": env, "torch": tj.get("torch"),
           "copy_d2d_gbps": copy_bw / 1e9, "cases": rows,
           "commands": ["tools/gpu-check.sh", "build-gpu/bench/gpu/bench_gpu --json gpu-bench.json",
                        "python3 bench/gpu/torch_peer.py --json gpu-torch.json",
                        "python3 bench/gpu/compare.py gpu-bench.json gpu-torch.json gpu-env.json "
                        "gpu-results.json"]}
    json.dump(res, open(out_f, "w"), indent=1)
    print(f"\ndevice {env.get('gpu')}, copy_d2d {copy_bw / 1e9:.0f} GB/s (read+write)")
    print(f"{'case':34s} {'ours ms':>9s} {'torch ms':>9s} {'torch/ours':>10s} {'TF/s':>7s} "
          f"{'GB/s':>7s} {'of copy':>7s} target")
    for r in rows:
        print(f"{r['name']:34s} {r['ours_ms']:9.4f} {r.get('torch_ms', float('nan')):9.4f} "
              f"{r.get('speedup_vs_torch', float('nan')):10.3f} "
              f"{r.get('ours_tflops', float('nan')):7.1f} {r.get('ours_gbps', float('nan')):7.0f} "
              f"{r.get('fraction_of_copy_bw', float('nan')):7.2f} "
              f"{'' if 'meets_target' not in r else ('met' if r['meets_target'] else 'MISSED')}"
              + (f"  queued {r['ours_queued_ms']:.4f} ms, "
                 f"{r['fraction_of_copy_bw_queued']:.2f} of copy "
                 f"({'met' if r['meets_target_queued'] else 'MISSED'})"
                 if 'meets_target_queued' in r else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
