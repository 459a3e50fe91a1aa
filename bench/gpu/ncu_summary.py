#!/usr/bin/env python3
"""Where a step's GPU time goes: Nsight Compute's per-kernel durations
(`ncu --csv --metrics gpu__time_duration.sum --clock-control none CMD`)
summed by kernel family, largest first, with each family's share.

usage: ncu_summary.py NCU_CSV [--json OUT] [--top N]

Families: a kernel's name up to its template arguments or parameter list
(cuBLASLt's GEMM kernels are grouped as "cuBLASLt GEMM"). The shares are
of all kernels in the file (warm-up steps included: with equal steps the
shares are those of one step)."""
import argparse
import csv
import json
import re
import sys

UNITS = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}


def family(name):
    if re.search(r"gemm|sm90_xmma|cutlass|cublasLt|nvjet", name, re.I):
        return "cuBLASLt GEMM"
    name = re.sub(r"^void ", "", name).replace("(anonymous namespace)::", "")
    return re.split(r"[<(]", name, maxsplit=1)[0].strip() or name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--json")
    ap.add_argument("--top", type=int, default=20)
    a = ap.parse_args()
    lines = open(a.csv, errors="replace").read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"{a.csv}: no ncu CSV header (\"ID\", ...) found")
    fam = {}
    for row in csv.DictReader(lines[start:]):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        ms = float(row["Metric Value"].replace(",", "")) * UNITS.get(row.get("Metric Unit"), 1e-6)
        f = fam.setdefault(family(row.get("Kernel Name", "?")), [0.0, 0])
        f[0] += ms
        f[1] += 1
    total = sum(v[0] for v in fam.values())
    if not total:
        sys.exit(f"{a.csv}: no kernel durations")
    rows = sorted(({"family": k, "ms": v[0], "kernels": v[1], "share": v[0] / total}
                   for k, v in fam.items()), key=lambda r: -r["ms"])
    print(f"{'kernel family':60s} {'ms':>9s} {'count':>6s} {'share':>6s}")
    for r in rows[:a.top]:
        print(f"{r['family'][:60]:60s} {r['ms']:9.2f} {r['kernels']:6d} {100 * r['share']:5.1f}%")
    print(f"{'all kernels':60s} {total:9.2f} {sum(v[1] for v in fam.values()):6d}")
    if a.json:
        json.dump({"total_ms": total, "families": rows}, open(a.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
