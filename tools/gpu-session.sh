#!/usr/bin/env bash
# One lent GPU session in one call: build llmtrain for sm_90, run the GPU
# tests that never ran first, then the trainer's engine against the bench
# engine, then (time left) the Llama ~1B MFU run. Each step is skipped once
# the time budget is spent, so the call ends inside the device tool's limit
# and still returns every log.
#
#   BUDGET_S=480 OUT=... tools/gpu-session.sh
#
# Needs .devdeps/ (see /work/shared/device/prep-carry.sh). Writes to $OUT
# (else bench/results/session/): session.log (the summary), tests.log
# (meson's test log), build.log, bench-*.json, and logs.tgz with the rest.
# The steps and why they are ordered so: doc/gpu.md, "Running on a GPU
# machine".
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit
budget=${BUDGET_S:-480}
out=${OUT:-$root/bench/results/session}
mkdir -p "$out" /tmp/llmt-session
log=$out/session.log
say() { echo "[$SECONDS s] $*" | tee -a "$log"; }
left() { echo $((budget - SECONDS)); }
# run STEP SECONDS CMD...: the command under a timeout of at most what is
# left, its output in /tmp/llmt-session/STEP.log
run() {
  local name=$1 want=$2 t
  shift 2
  t=$(left)
  [ "$t" -gt "$want" ] && t=$want
  if [ "$t" -lt 15 ]; then say "$name: skipped (budget spent)"; return 99; fi
  timeout -k 5 "$t" "$@" </dev/null >"/tmp/llmt-session/$name.log" 2>&1
  local rc=$?
  say "$name: rc $rc ($(tail -1 "/tmp/llmt-session/$name.log" | cut -c1-160))"
  return $rc
}

[ -f .devdeps/env.sh ] && source .devdeps/env.sh >>"$log" 2>&1
export PATH="/usr/local/cuda/bin:$PATH"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm \
  --format=csv,noheader >>"$log" 2>&1 || { say "no GPU"; exit 77; }
say "nvcc: $(nvcc --version | tail -1); torch: $(python3 -c 'import torch; print(torch.__version__)' 2>&1 | tail -1); commit $(git rev-parse --short HEAD 2>/dev/null)"

b=build-gpu
if [ ! -f $b/build.ninja ]; then
  meson setup $b -Dgpu_arch="arch=compute_90,code=sm_90" -Dbuildtype=release \
    >"$out/build.log" 2>&1 || { say "meson setup failed"; tail -30 "$out/build.log"; exit 1; }
fi
grep -E "CUDA|NCCL|cJSON|libaio" $b/meson-logs/meson-log.txt | grep -i "found" | head -6 >>"$log"
targets="test/gpu/test_gpu_tp_ops test/gpu/test_gpu_tp test/gpu/test_gpu_cp_ops
  test/gpu/test_gpu_cp test/gpu/test_gpu_moe_ops test/gpu/test_gpu_kernels
  test/train/test_device_trainer bench/gpu/bench_gpt2
  bench/gpu/bench_llama tools/llmtrain"
# shellcheck disable=SC2086
run build 300 ninja -C $b $targets || { grep -E "error|undefined" -A3 /tmp/llmt-session/build.log | head -40; }
cat /tmp/llmt-session/build.log >>"$out/build.log"

# 1. The tests of code that never ran on a GPU (issues 16, 18, 22), all at
# once: they share the GPU, none of them times anything.
tests="gpu-tp-ops gpu-cp-ops gpu-moe-ops gpu-tp-engine gpu-cp-engine gpu-trainer-vs-cpu
  gpu-kernels"
# shellcheck disable=SC2086
run tests 240 meson test -C $b --no-rebuild --print-errorlogs --num-processes 8 \
  --timeout-multiplier 1 $tests
grep -E "^ *[0-9]+/[0-9]+ " /tmp/llmt-session/tests.log | tee -a "$log"
cp $b/meson-logs/testlog.txt "$out/tests.log" 2>/dev/null
# A failing test of the op tables runs again under compute-sanitizer
# (memcheck): an out-of-bounds access or a launch error names the kernel.
python3 - "$b" >/tmp/llmt-session/failed.txt <<'PY'
import json, sys
b = sys.argv[1]
try:
    log = [json.loads(l) for l in open(f"{b}/meson-logs/testlog.json")]
except OSError:
    sys.exit(0)
cmds = {t["name"]: t["cmd"] for t in json.load(open(f"{b}/meson-info/intro-tests.json"))}
for r in log:
    if r["result"] in ("FAIL", "TIMEOUT") and r["name"].endswith("-ops"):
        print(r["name"], " ".join(cmds[r["name"]]))
PY
while read -r name cmd; do
  # shellcheck disable=SC2086
  run "sanitize-$name" 90 compute-sanitizer --tool memcheck --print-limit 20 $cmd
  grep -E "Invalid|ERROR SUMMARY|at .*\(" "/tmp/llmt-session/sanitize-$name.log" | head -12 |
    tee -a "$log"
done </tmp/llmt-session/failed.txt

# 2. GPT-2 124M through the public trainer's CUDA engine.
run gpt2-trainer 60 $b/bench/gpu/bench_gpt2 --B 16 --steps 10 --json "$out/bench-gpt2.json"
grep -E "tok/s|failed" /tmp/llmt-session/gpt2-trainer.log | tee -a "$log"

# 3. `llmtrain train` with train.device cuda, the demo model in bf16.
python3 - <<'PY'
import json
s = json.load(open("examples/specs/demo-cpu.json"))
s["name"] = "demo-cuda"
s["precision"] = {"param": "bf16", "master": "fp32", "gemm": "bf16"}
s["train"].update(device="cuda", steps=200, eval_interval=100)
s["data"]["train"] = "doc"
s["hardware"] = {"gpu": "H100-SXM", "gpus_per_node": 1}
json.dump(s, open("/tmp/llmt-session/demo-cuda.json", "w"), indent=1)
PY
run cli-train 90 $b/tools/llmtrain train /tmp/llmt-session/demo-cuda.json --out /tmp/llmt-session/run
grep -E "step +(1|100|200)/|val|error|refus" /tmp/llmt-session/cli-train.log | head -8 | tee -a "$log"

# 4. Llama ~1B (TinyLlama shape) through the public trainer: MFU, peak;
# then fp8 forward GEMMs; then PyTorch (torch.compile) on the same shape.
run llama 150 $b/bench/gpu/bench_llama --model 1b --B 4,8 --T 2048 --steps 8 \
  --json "$out/bench-llama.json"
grep -E "tok/s.*MFU|fail" /tmp/llmt-session/llama.log | tee -a "$log"
run llama-fp8 90 $b/bench/gpu/bench_llama --model 1b --B 4 --T 2048 --steps 8 --fp8 1 \
  --json "$out/bench-llama-fp8.json"
grep -E "tok/s.*MFU|fail" /tmp/llmt-session/llama-fp8.log | tee -a "$log"
PYTHONUNBUFFERED=1 run llama-torch 240 python3 bench/gpu/llama_torch.py --model 1b --B 4,8 \
  --T 2048 --json "$out/bench-llama-torch.json"
tail -4 /tmp/llmt-session/llama-torch.log | tee -a "$log"

tar czf "$out/logs.tgz" -C /tmp/llmt-session --exclude=run . 2>/dev/null
say "done"
