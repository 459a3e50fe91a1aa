#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: build llmtrain with CUDA (dependencies
# from .devdeps/, see /work/shared/device/prep-carry.sh or doc/gpu.md), run
# the `gpu` test suite and the GPU benchmarks (ours and, when python3 has
# torch, PyTorch's side by side), and write the results as JSON.
#
#   tools/gpu-check.sh [--tests-only] [--bench-only] [--gpt2] [--arch LIST]
#
# --gpt2 adds the GPT-2 124M training-step comparison (T=1024, B from
# $GPT2_B, default 16,32,64): ours (bench_gpt2), PyTorch with torch.compile
# (bench/gpu/gpt2_torch.py) and llm.c's train_gpt2.cu built on the machine
# (bench/gpu/llmc_peer.sh, from $LLMC_SRC or .llmc/, a copy of llm.c kept out
# of git), merged into gpu-gpt2.json.
#
# Results go to $OUT (the device tool's output folder) if set, else
# bench/results/. Files: gpu-env.json (device, driver, toolkit, torch),
# gpu-tests.log, gpu-bench.json (ours), gpu-torch.json (PyTorch), and
# gpu-results.json (the two merged with ratios).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tests=1 bench=1 gpt2=0 arch="arch=compute_90,code=sm_90"
while [ $# -gt 0 ]; do
  case "$1" in
    --tests-only) bench=0 ;;
    --bench-only) tests=0 ;;
    --gpt2) gpt2=1 ;;
    --gpt2-only) gpt2=1 tests=0 bench=0 ;;
    --arch) arch="$2"; shift ;;
    *) echo "usage: $0 [--tests-only] [--bench-only] [--arch LIST]" >&2; exit 2 ;;
  esac
  shift
done
out=${OUT:-$root/bench/results}
mkdir -p "$out"
if [ -f .devdeps/env.sh ]; then
  # shellcheck disable=SC1091
  source .devdeps/env.sh
fi
export PATH="/usr/local/cuda/bin:$PATH"
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no GPU (nvidia-smi -L failed)"
  exit 77
fi
py=python3
torch_ver=$($py -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)
$py - "$out/gpu-env.json" "$torch_ver" <<'PY'
import json, subprocess, sys
def sh(c):
    try: return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
    except Exception: return ""
env = {
  "gpu": sh("nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader"),
  "clocks": sh("nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,clocks.mem --format=csv,noheader"),
  "nvcc": sh("nvcc --version | tail -1"),
  "torch": sys.argv[2],
  "host": sh("uname -srm"),
  "date": sh("date -u +%Y-%m-%dT%H:%M:%SZ"),
  "commit": sh("git rev-parse --short HEAD 2>/dev/null"),
}
json.dump(env, open(sys.argv[1], "w"), indent=1)
print(env)
PY

bdir=build-gpu
if [ ! -f $bdir/build.ninja ]; then
  meson setup $bdir -Dgpu_arch="$arch" -Dbuildtype=release >"$out/gpu-setup.log" 2>&1 ||
    { tail -40 "$out/gpu-setup.log"; exit 1; }
fi
ninja -C $bdir >"$out/gpu-build.log" 2>&1 ||
  { grep -E "error|undefined" -A3 "$out/gpu-build.log" | head -60; exit 1; }
grep -q "CUDA (cudart, cuBLASLt).*13\|CUDA (cudart, cuBLASLt).*12" $bdir/meson-logs/meson-log.txt ||
  echo "gpu-check: warning: meson did not report CUDA"

rc=0
if [ $tests = 1 ]; then
  t0=$(date +%s)
  meson test -C $bdir --suite gpu --print-errorlogs --timeout-multiplier 4 \
    >"$out/gpu-tests.log" 2>&1
  rc=$?
  grep -E "^ *[0-9]+/[0-9]+ |Ok:|Fail:|Skipped:" "$out/gpu-tests.log" | tail -8
  cat $bdir/meson-logs/testlog.txt >>"$out/gpu-tests.log" 2>/dev/null
  grep -E "FAIL|relerr .*FAIL|failures" "$out/gpu-tests.log" | head -40
  echo "gpu tests: rc=$rc in $(( $(date +%s) - t0 )) s"
fi
if [ $bench = 1 ]; then
  $bdir/bench/gpu/bench_gpu --json "$out/gpu-bench.json" || rc=1
  if [ "$torch_ver" != none ]; then
    $py bench/gpu/torch_peer.py --json "$out/gpu-torch.json" || rc=1
    $py bench/gpu/compare.py "$out/gpu-bench.json" "$out/gpu-torch.json" \
      "$out/gpu-env.json" "$out/gpu-results.json" || rc=1
  else
    echo "gpu-check: python3 has no torch: PyTorch peer not run"
  fi
fi
if [ $gpt2 = 1 ]; then
  gb=${GPT2_B:-16,32,64}
  $bdir/bench/gpu/bench_gpt2 --B "$gb" --json "$out/gpu-gpt2-ours.json" || rc=1
  # the same model through the public trainer (device cuda)
  $bdir/bench/gpu/bench_gpt2 --engine trainer --B "$gb" \
    --json "$out/gpu-gpt2-trainer.json" || rc=1
  llmc=${LLMC_SRC:-$root/.llmc}
  if [ -f "$llmc/train_gpt2.cu" ]; then
    bench/gpu/llmc_peer.sh "$llmc" "$out/gpu-gpt2-llmc.json" "$gb" || rc=1
  else
    echo "gpu-check: no llm.c source at $llmc: llm.c peer not run"
  fi
  if [ "$torch_ver" != none ]; then
    PYTHONUNBUFFERED=1 $py bench/gpu/gpt2_torch.py --B "${GPT2_TORCH_B:-$gb}" \
      --json "$out/gpu-gpt2-torch.json" || rc=1
  fi
  $py - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
def load(n):
    p = os.path.join(out, n)
    return {r["name"]: r for r in json.load(open(p))["results"]} if os.path.exists(p) else {}
ours, llmc, torch = load("gpu-gpt2-ours.json"), load("gpu-gpt2-llmc.json"), load("gpu-gpt2-torch.json")
rows = []
print(f"{'case':24s} {'ours tok/s':>11s} {'llm.c':>11s} {'torch.compile':>13s} {'vs llm.c':>8s} {'vs torch':>8s}")
for n, r in ours.items():
    row = {"name": n, "ours_tokens_per_s": r["tokens_per_s"]}
    for peer, d in (("llmc", llmc), ("torch_compile", torch)):
        if n in d and d[n].get("tokens_per_s"):
            row[peer + "_tokens_per_s"] = d[n]["tokens_per_s"]
            row["ratio_vs_" + peer] = r["tokens_per_s"] / d[n]["tokens_per_s"]
    rows.append(row)
    print(f"{n:24s} {r['tokens_per_s']:11.0f} {row.get('llmc_tokens_per_s', float('nan')):11.0f} "
          f"{row.get('torch_compile_tokens_per_s', float('nan')):13.0f} "
          f"{row.get('ratio_vs_llmc', float('nan')):8.3f} {row.get('ratio_vs_torch_compile', float('nan')):8.3f}")
env = json.load(open(os.path.join(out, "gpu-env.json")))
json.dump({"device": env.get("gpu"), "env": env, "targets": ">= 1.1x llm.c, >= 1.2x torch.compile",
           "cases": rows, "ours": list(ours.values()), "llmc": list(llmc.values()),
           "torch": list(torch.values())}, open(os.path.join(out, "gpu-gpt2.json"), "w"), indent=1)
PY
fi
exit $rc
