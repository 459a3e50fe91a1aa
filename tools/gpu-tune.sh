#!/usr/bin/env bash
# One short lent GPU call for kernel tuning: build, the kernel tests (every
# attention tile configuration against the CPU reference), then every
# tile configuration of the mma.sync attention beside the default and
# PyTorch's flash SDPA, the norms (per call and queued) beside PyTorch's,
# a Llama 1B step, and where the Llama and GPT-2 steps' time goes (ncu).
# Each step runs under a share of BUDGET_S so the call ends inside the
# device tool's limit and returns its logs (about 120 s without ncu).
#
#   BUDGET_S=300 OUT=... tools/gpu-tune.sh     (carry .devdeps)
#
# Writes $OUT/tune.log (the summary) and $OUT/tune.tgz (every log and JSON).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit
budget=${BUDGET_S:-300}
final=${OUT:-$root/bench/results/tune}
w=/tmp/llmt-tune
rm -rf $w
mkdir -p "$final" $w
log=$final/tune.log
steps=$w
# shellcheck source=tools/gpu-lib.sh
. tools/gpu-lib.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >>"$log" 2>&1 ||
  { say "no GPU"; exit 77; }
b=build-gpu
gpu_build_setup $b "$log" $w/setup.log || { say "setup failed"; exit 1; }
say "commit $(git rev-parse --short HEAD 2>/dev/null), $(git status --short | wc -l) changed files"
run build 120 ninja -C $b test/gpu/test_gpu_kernels test/train/test_device_trainer \
  bench/gpu/bench_gpu bench/gpu/bench_llama bench/gpu/bench_gpt2 || grep -E "error" -A3 $w/build.log | head -20 >>"$log"

run kernels 60 $b/test/gpu/test_gpu_kernels
grep -E "FAIL|failures" $w/kernels.log | head -8 | tee -a "$log"
run trainer 60 meson test -C $b --no-rebuild --print-errorlogs gpu-trainer-vs-cpu
grep -E "^ *[0-9]+/[0-9]+ " $w/trainer.log | tee -a "$log"

o=$w/out
mkdir -p $o
python3 -c "import json,subprocess as s;json.dump({'gpu':s.run('nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader',shell=True,capture_output=True,text=True).stdout.strip()},open('$o/env.json','w'))"
run attn-ours 90 $b/bench/gpu/bench_gpu --only attention --json $o/attn-ours.json
grep -E "differ" $w/attn-ours.log | head -5 | tee -a "$log"
run norm-ours 30 $b/bench/gpu/bench_gpu --only "copy layernorm rmsnorm" --json $o/norm-ours.json
run torch 80 env PYTHONUNBUFFERED=1 python3 bench/gpu/torch_peer.py \
  --only "attention layernorm rmsnorm" --json $o/torch.json
python3 - $o/attn-ours.json $o/norm-ours.json $o/all-ours.json <<'PY'
import json, sys
a, n = (json.load(open(f)) for f in sys.argv[1:3])
a["results"] += n["results"]
json.dump(a, open(sys.argv[3], "w"))
PY
run compare 20 python3 bench/gpu/compare.py $o/all-ours.json $o/torch.json $o/env.json \
  $o/compare.json
grep -E "norm|copy" $w/compare.log | tee -a "$log"
grep -E "^attention" $w/compare.log | tee -a "$log"
run llama 70 $b/bench/gpu/bench_llama --model 1b --B 8 --T 2048 --steps 6 --json $o/llama.json
grep -E "tok/s" $w/llama.log | tee -a "$log"
# Where a step's time goes (Nsight Compute, kernel durations only; shares
# over the warm-up steps and the one timed: every step alike)
if command -v ncu >/dev/null; then
  for m in "llama:$b/bench/gpu/bench_llama --model 1b --B 4 --T 2048 --steps 1" \
    "gpt2:$b/bench/gpu/bench_gpt2 --B 16 --steps 1"; do
    n=${m%%:*}
    # shellcheck disable=SC2086
    run "ncu-$n" 70 ncu --csv --log-file $o/ncu-$n.csv --metrics gpu__time_duration.sum \
      --clock-control none ${m#*:} &&
      python3 bench/gpu/ncu_summary.py $o/ncu-$n.csv --json $o/ncu-$n.json --top 14 |
      tee -a "$log"
  done
fi
say "done"
cp "$log" $w/
tar czf "$final/tune.tgz" -C $w . 2>/dev/null
