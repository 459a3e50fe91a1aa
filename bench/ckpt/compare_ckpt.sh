#!/bin/sh
# Checkpoint I/O side by side on one disk, one session, alternating rounds:
#   dd if=/dev/zero bs=8M oflag=direct conv=fsync  (the disk's own sequential
#       O_DIRECT write figure),
#   bench_ckpt (our save/persist/snapshot/load),
#   torch.save / torch.load of the same state (/usr/bin/python3 with torch).
# Prints the ratios and writes bench/results/ckpt-<date>.json.
# usage: bench/ckpt/compare_ckpt.sh [BUILD_DIR] [DIR] [MIB] [ROUNDS] [MTBF_HOURS]
#   DIR: where to write (default BUILD_DIR; must be the disk you care about)
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$top/build}" && pwd)
dir=$(cd "${2:-$build}" && pwd)
mib=${3:-512}
rounds=${4:-3}
mtbf=${5:-24}
nt=8
bench=$build/bench/ckpt/bench_ckpt
[ -x "$bench" ] || { echo "compare_ckpt: build $bench first" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; rm -f "$dir/llmt-dd-$$.bin"' EXIT
fs=$(df -T "$dir" | awk 'NR==2 {print $2 " " $1}')
echo "compare_ckpt: $mib MiB, $nt tensors, in $dir ($fs), $rounds rounds"
i=0
while [ $i -lt "$rounds" ]; do
  i=$((i + 1))
  rm -f "$dir/llmt-dd-$$.bin"
  dd if=/dev/zero of="$dir/llmt-dd-$$.bin" bs=8M count=$((mib / 8)) oflag=direct conv=fsync 2>"$tmp/dd.$i" || true
  dd if="$dir/llmt-dd-$$.bin" of=/dev/null bs=8M iflag=direct 2>"$tmp/ddr.$i" || true
  rm -f "$dir/llmt-dd-$$.bin"
  LLMT_BENCH_CKPT_DIR=$dir LLMT_BENCH_CKPT_MB=$mib LLMT_BENCH_CKPT_TENSORS=$nt \
    "$bench" --warmup 1 --repeats 3 --json "$tmp/ours.$i.json" >/dev/null
  if [ -x /usr/bin/python3 ]; then
    /usr/bin/python3 "$top/bench/ckpt/torch_peer.py" "$dir" "$mib" "$nt" 3 > "$tmp/torch.$i.json" 2>/dev/null || rm -f "$tmp/torch.$i.json"
  fi
  echo "round $i done"
done
out="$top/bench/results/ckpt-$(date -u +%Y%m%d-%H%M%S).json"
python3 - "$tmp" "$rounds" "$mib" "$mtbf" "$dir" "$fs" "$out" <<'PY'
import glob, json, math, os, platform, re, statistics as st, sys
tmp, rounds, mib, mtbf_h, d, fs, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6], sys.argv[7]
nbytes = None
def ddrate(pattern):
    out = []
    for f in sorted(glob.glob(tmp + pattern)):
        m = re.search(r"(\d+) bytes .* copied, ([0-9.]+) s", open(f).read())
        if m:
            out.append(int(m.group(1)) / float(m.group(2)))
    return out
dd, ddr = ddrate("/dd.*"), ddrate("/ddr.*")
ours = {}
for f in sorted(glob.glob(tmp + "/ours.*.json")):
    j = json.load(open(f))
    for r in j.get("results", []):
        ours.setdefault(r["name"], []).append(r["median_s"])
        nbytes = r.get("items") or nbytes
tsave, tload = [], []
for f in sorted(glob.glob(tmp + "/torch.*.json")):
    j = json.load(open(f))
    tsave += j["save_s"]; tload += j["load_s"]
med = {k: st.median(v) for k, v in ours.items()}
B = nbytes
res = {
    "machine": platform.node(), "cpus": os.cpu_count(), "dir": d, "filesystem": fs,
    "state_bytes": B, "tensors": 8, "rounds": rounds,
    "command": "bench/ckpt/compare_ckpt.sh BUILD %s %d %d %g" % (d, mib, rounds, mtbf_h),
    "dd_oflag_direct_Bps": st.median(dd) if dd else None, "dd_runs_Bps": dd,
    "ours_median_s": med,
    "ours_Bps": {k: B / v for k, v in med.items()},
}
res["dd_iflag_direct_read_Bps"] = st.median(ddr) if ddr else None
res["dd_read_runs_Bps"] = ddr
ddb = res["dd_oflag_direct_Bps"]
if ddr:
    res["load_vs_dd_read"] = (B / med["load_cold"]) / st.median(ddr)
if ddb:
    res["persist_vs_dd"] = (B / med["persist_async"]) / ddb
    res["save_sync_direct_vs_dd"] = (B / med["save_sync_direct"]) / ddb
if tsave:
    res["torch_save_median_s"] = st.median(tsave)
    res["torch_load_median_s"] = st.median(tload)
    res["torch_save_over_ours_sync"] = st.median(tsave) / med["save_sync_direct"]
    res["torch_save_over_ours_stall"] = st.median(tsave) / med["snapshot_stall"]
    res["torch_load_over_ours_load"] = st.median(tload) / med["load_cold"]
stall, cp = med["snapshot_stall"], med["memcpy_state"]
res["stall_over_memcpy"] = stall / cp
M = mtbf_h * 3600.0
tau = math.sqrt(2 * stall * M)
tau_sync = math.sqrt(2 * med["save_sync_direct"] * M)
res["young_daly"] = {
    "mtbf_hours": mtbf_h,
    "interval_s_async": tau, "stall_pct_of_training_async": 100 * stall / tau,
    "interval_s_sync": tau_sync,
    "stall_pct_of_training_sync": 100 * med["save_sync_direct"] / tau_sync,
}
json.dump(res, open(out, "w"), indent=1)
print("state %.0f MiB on %s" % (B / 2**20, fs))
if ddb:
    print("dd oflag=direct      %7.0f MB/s (runs: %s)" % (ddb / 1e6, ", ".join("%.0f" % (x / 1e6) for x in dd)))
    print("ours persist (async) %7.0f MB/s  = %.0f%% of dd" % (B / med["persist_async"] / 1e6, 100 * res["persist_vs_dd"]))
    print("ours save (sync)     %7.0f MB/s  = %.0f%% of dd" % (B / med["save_sync_direct"] / 1e6, 100 * res["save_sync_direct_vs_dd"]))
if ddr:
    print("dd iflag=direct read %7.0f MB/s" % (st.median(ddr) / 1e6))
print("ours load (cold)     %7.0f MB/s%s" % (B / med["load_cold"] / 1e6,
      "  = %.0f%% of dd read" % (100 * res["load_vs_dd_read"]) if ddr else ""))
if tsave:
    print("torch.save %.3f s vs ours sync save %.3f s: ours %.2fx faster; stall of async save %.3f s (%.1fx)" %
          (res["torch_save_median_s"], med["save_sync_direct"], res["torch_save_over_ours_sync"], stall, res["torch_save_over_ours_stall"]))
    print("torch.load %.3f s vs ours load %.3f s: ours %.2fx faster" % (res["torch_load_median_s"], med["load_cold"], res["torch_load_over_ours_load"]))
print("snapshot stall %.1f ms vs memcpy of the state %.1f ms (ratio %.2f)" % (stall * 1e3, cp * 1e3, stall / cp))
print("Young/Daly at MTBF %g h: interval %.0f s, stall %.4f%% of training (sync saves: %.4f%%)" %
      (mtbf_h, tau, res["young_daly"]["stall_pct_of_training_async"], res["young_daly"]["stall_pct_of_training_sync"]))
print("wrote", out)
PY
