#!/usr/bin/env python3
"""Run llmtrain and a peer side by side and print ratios.

Both sides write the harness JSON format (bench/harness.h; a peer wrapper
script converts the peer's own output into it). Cases are matched by name.

  compare.py --ours 'build/bench/bench_x --json {json}' \\
             --peer 'bench/peers/llmc_x.sh --json {json}' [--rounds 3] [--out R.json]
  compare.py OURS.json PEER.json          # compare two existing result files

The ratio printed is peer_median / ours_median: > 1 means llmtrain is faster.
With --rounds N the two commands alternate N times (ours, peer, ours, ...)
so that drift in the machine's state hits both sides alike; the best median
of each side is used.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile


def run(cmd, path):
    args = [a.replace("{json}", path) for a in shlex.split(cmd)]
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stdout.write(r.stdout)
    if r.returncode != 0:
        sys.exit(f"compare: '{cmd}' exited {r.returncode}")
    with open(path) as f:
        return json.load(f)


def merge(best, result):
    for r in result["results"]:
        old = best.get(r["name"])
        if old is None or r["median_s"] < old["median_s"]:
            best[r["name"]] = r
    return best


def compare(ours, peer):
    rows = []
    for name, o in ours.items():
        p = peer.get(name)
        if p is None or o["median_s"] <= 0:
            continue
        rows.append({"name": name, "ours_median_s": o["median_s"],
                     "peer_median_s": p["median_s"],
                     "speedup": p["median_s"] / o["median_s"]})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*")
    ap.add_argument("--ours")
    ap.add_argument("--peer")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.files and len(a.files) == 2:
        with open(a.files[0]) as f:
            ours = merge({}, json.load(f))
        with open(a.files[1]) as f:
            peer = merge({}, json.load(f))
    elif a.ours and a.peer:
        ours, peer = {}, {}
        with tempfile.TemporaryDirectory() as d:
            for i in range(a.rounds):
                ours = merge(ours, run(a.ours, os.path.join(d, f"ours{i}.json")))
                peer = merge(peer, run(a.peer, os.path.join(d, f"peer{i}.json")))
    else:
        ap.error("give two JSON files, or --ours and --peer commands")
    rows = compare(ours, peer)
    if not rows:
        sys.exit("compare: no case names in common")
    print(f"\n{'case':40s} {'ours':>12s} {'peer':>12s} {'peer/ours':>10s}")
    for r in rows:
        print(f"{r['name']:40s} {r['ours_median_s']:12.6g} {r['peer_median_s']:12.6g} "
              f"{r['speedup']:10.3f}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
