#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: build llmtrain with CUDA (dependencies
# from .devdeps/, see /work/shared/device/prep-carry.sh or doc/gpu.md), run
# the `gpu` test suite and the GPU benchmarks (ours and, when python3 has
# torch, PyTorch's side by side), and write the results as JSON.
#
#   tools/gpu-check.sh [--tests-only] [--bench-only] [--gpt2] [--gpt2-only]
#                      [--llama] [--llama-only] [--tp-only] [--cp-only] [--arch LIST]
#
# --gpt2 adds the GPT-2 124M training-step comparison (T=1024, B from
# $GPT2_B, default 16,32,64): ours (bench_gpt2: the public trainer), PyTorch with torch.compile
# (bench/gpu/gpt2_torch.py) and llm.c's train_gpt2.cu built on the machine
# (bench/gpu/llmc_peer.sh, from $LLMC_SRC or .llmc/, a copy of llm.c kept out
# of git), merged into gpu-gpt2.json.
#
# --llama adds the Llama-style ~1B model (TinyLlama-1.1B's shape, T=2048, B
# from $LLAMA_B, default 4,8; $LLAMA_TORCH_B for torch's, default the same):
# ours through the public trainer (bench_llama) and PyTorch with
# torch.compile (bench/gpu/llama_torch.py), each with MFU by the planner's
# FLOP count and peak device memory: gpu-llama-ours.json,
# gpu-llama-torch.json, merged with per-B ratios into gpu-llama.json.
# --gpt2-only / --llama-only skip the tests and the kernel benchmarks.
# --tp-only runs only the tests of tensor parallelism's and context
# parallelism's CUDA pieces (gpu-tp-ops, gpu-tp-engine, gpu-cp-ops,
# gpu-cp-engine: never run on a GPU yet, issues 16 and 18) and their CPU
# halves (vp-ops-emul, tp-stage-emul, cp-stage-emul); --cp-only those of
# context parallelism alone (gpu-cp-ops, gpu-cp-engine, cp-stage-emul).
# They are in the full `gpu` suite too.
#
# Results go to $OUT (the device tool's output folder) if set, else
# bench/results/. Files: gpu-env.json (device, driver, toolkit, torch),
# gpu-tests.log, gpu-bench.json (ours), gpu-torch.json (PyTorch), and
# gpu-results.json (the two merged with ratios).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tests=1 bench=1 gpt2=0 llama=0 arch="arch=compute_90,code=sm_90" only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tests-only) bench=0 ;;
    --bench-only) tests=0 ;;
    --gpt2) gpt2=1 ;;
    --gpt2-only) gpt2=1 tests=0 bench=0 ;;
    --llama) llama=1 ;;
    --llama-only) llama=1 tests=0 bench=0 ;;
    --tp-only) bench=0 only="gpu-tp-ops gpu-tp-engine gpu-cp-ops gpu-cp-engine vp-ops-emul
      tp-stage-emul cp-stage-emul" ;;
    --cp-only) bench=0 only="gpu-cp-ops gpu-cp-engine cp-stage-emul" ;;
    --arch) arch="$2"; shift ;;
    *) echo "usage: $0 [--tests-only] [--bench-only] [--gpt2] [--gpt2-only] [--llama]" \
         "[--llama-only] [--tp-only] [--cp-only] [--arch LIST]" >&2; exit 2 ;;
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
# --tp-only / --cp-only build just their tests' programs (device minutes
# are scarce)
targets=""
norebuild=""
if [ -n "$only" ]; then
  targets="test/gpu/test_gpu_tp_ops test/gpu/test_gpu_tp test/gpu/test_gpu_cp_ops
    test/gpu/test_gpu_cp"
  norebuild="--no-rebuild"
fi
# shellcheck disable=SC2086
ninja -C $bdir $targets >"$out/gpu-build.log" 2>&1 ||
  { grep -E "error|undefined" -A3 "$out/gpu-build.log" | head -60; exit 1; }
grep -q "CUDA (cudart, cuBLASLt).*13\|CUDA (cudart, cuBLASLt).*12" $bdir/meson-logs/meson-log.txt ||
  echo "gpu-check: warning: meson did not report CUDA"

rc=0
if [ $tests = 1 ]; then
  t0=$(date +%s)
  # shellcheck disable=SC2086
  meson test -C $bdir $norebuild ${only:---suite gpu} --print-errorlogs --timeout-multiplier 4 \
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
  # ours: the public trainer with device cuda
  $bdir/bench/gpu/bench_gpt2 --B "$gb" --json "$out/gpu-gpt2-ours.json" || rc=1
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
if [ $llama = 1 ]; then
  lb=${LLAMA_B:-4,8}
  $bdir/bench/gpu/bench_llama --model 1b --B "$lb" --T 2048 \
    --json "$out/gpu-llama-ours.json" || rc=1
  if [ "$torch_ver" != none ]; then
    PYTHONUNBUFFERED=1 $py bench/gpu/llama_torch.py --model 1b --B "${LLAMA_TORCH_B:-$lb}" \
      --T 2048 --json "$out/gpu-llama-torch.json" || rc=1
  else
    echo "gpu-check: python3 has no torch: PyTorch Llama peer not run"
  fi
  $py - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
def load(n):
    p = os.path.join(out, n)
    return json.load(open(p)) if os.path.exists(p) else {"results": []}
ours_f, torch_f = load("gpu-llama-ours.json"), load("gpu-llama-torch.json")
ours = {r["name"]: r for r in ours_f["results"]}
torch = {r["name"]: r for r in torch_f["results"]}
nan = float("nan")
rows = []
print(f"{'case':22s} {'ours tok/s':>10s} {'torch tok/s':>11s} {'ratio':>6s} {'ours MFU':>8s} "
      f"{'torch MFU':>9s} {'ours GiB':>8s} {'torch GiB':>9s}")
for n in list(ours) + [n for n in torch if n not in ours]:
    o, t = ours.get(n, {}), torch.get(n, {})
    row = {"name": n, "B": o.get("B", t.get("B")), "T": o.get("T", t.get("T"))}
    for side, r in (("ours", o), ("torch", t)):
        if r.get("oom"):
            row[side + "_oom"] = True
        for k in ("tokens_per_s", "mfu", "mfu_6n", "peak_device_bytes"):
            if k in r:
                row[side + "_" + k] = r[k]
    if o.get("tokens_per_s") and t.get("tokens_per_s"):
        row["ratio_tokens_per_s"] = o["tokens_per_s"] / t["tokens_per_s"]
    if o.get("peak_device_bytes") and t.get("peak_device_bytes"):
        row["peak_ratio"] = o["peak_device_bytes"] / t["peak_device_bytes"]
    if "ours_mfu" in row:
        row["mfu_target_met"] = row["ours_mfu"] >= 0.5
    if "peak_ratio" in row:
        row["peak_target_met"] = row["peak_ratio"] <= 1.0
    rows.append(row)
    g = lambda k, s=1.0: row[k] * s if k in row else nan
    print(f"{n:22s} {g('ours_tokens_per_s'):10.0f} {g('torch_tokens_per_s'):11.0f} "
          f"{g('ratio_tokens_per_s'):6.3f} {g('ours_mfu', 100):7.1f}% {g('torch_mfu', 100):8.1f}% "
          f"{g('ours_peak_device_bytes', 2**-30):8.2f} {g('torch_peak_device_bytes', 2**-30):9.2f}"
          + ("  (ours: OOM)" if row.get("ours_oom") else "")
          + ("  (torch: OOM)" if row.get("torch_oom") else ""))
env = json.load(open(os.path.join(out, "gpu-env.json")))
json.dump({"device": env.get("gpu"), "env": env, "model": ours_f.get("model"),
           "peak_tflops": ours_f.get("peak_tflops", torch_f.get("peak_tflops")),
           "targets": "MFU >= 50% (the planner's model FLOPs); peak device memory <= PyTorch's",
           "cases": rows, "ours": list(ours.values()), "torch": list(torch.values())},
          open(os.path.join(out, "gpu-llama.json"), "w"), indent=1)
PY
fi
exit $rc
