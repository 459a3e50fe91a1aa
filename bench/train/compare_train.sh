#!/bin/sh
# Side by side, one run, same machine, same threads: the GPT-2 124M
# training step (B=4, T=64, fp32) of llmtrain's CPU backend, of llm.c's
# train_gpt2.c (built here with -O3 -march=native -fopenmp) and of PyTorch
# CPU eager; peak RSS of each; the GEMM share of our step (cblas_sgemm
# timed by an LD_PRELOAD shim). Writes bench/results/train-cpu-<date>.json.
# usage: bench/train/compare_train.sh [BUILD_DIR] [THREADS] [STEPS]
# env: LLMC_DIR (default ../shared/anchors/llm.c), TORCH_PY (/usr/bin/python3)
# A missing llm.c or torch is recorded as null (Python None) in the JSON.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$top/build}" && pwd)
threads=${2:-$(nproc)}
steps=${3:-5}
llmc=${LLMC_DIR:-$top/../shared/anchors/llm.c}
py=${TORCH_PY:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
# The machine's OpenBLAS kernel choice is recorded, then removed so that
# every program picks its own (ours asks for SkylakeX kernels on AVX-512
# CPUs, lib/exec/cpu.c); ours also runs once with Haswell (AVX2) kernels,
# the ones the other programs' OpenBLAS picks on this CPU.
env_coretype=${OPENBLAS_CORETYPE:-}
unset OPENBLAS_CORETYPE
bt=$build/bench/train/bench_train
med() { python3 -c "import json;print(json.load(open('$1'))['results'][0]['median_s'])"; }

echo "== ours (llmtrain, $threads threads)"
"$bt" --case gpt2-124m-B4-T64 --threads "$threads" --warmup 1 \
  --repeats "$steps" --json "$tmp/ours2.json" | tee "$tmp/ours2.txt"
ours2=$(med "$tmp/ours2.json")
ours_rss=$(awk '/^peak_rss_mib/{print $2}' "$tmp/ours2.txt")
core=$(awk '/^blas_core/{print $2}' "$tmp/ours2.txt")
echo "== ours with the GEMM timer"
GEMM_TIMER_OUT=$tmp/gemm.txt LD_PRELOAD=$build/bench/train/libgemm_timer.so \
  "$bt" --case gpt2-124m-B4-T64 --threads "$threads" --warmup 1 \
  --repeats "$steps" --json "$tmp/ours.json" | tee "$tmp/ours.txt"
ours=$(med "$tmp/ours.json")
gemm=$(awk '{print $2}' "$tmp/gemm.txt")
echo "== ours with OpenBLAS' Haswell (AVX2) kernels"
OPENBLAS_CORETYPE=Haswell "$bt" --case gpt2-124m-B4-T64 --threads "$threads" \
  --warmup 1 --repeats "$steps" --json "$tmp/ours3.json" | tee "$tmp/ours3.txt"
ours3=$(med "$tmp/ours3.json")

llmc_s=None llmc_rss=None
if [ -f "$llmc/train_gpt2.c" ]; then
  echo "== llm.c train_gpt2.c (-O3 -march=native -fopenmp)"
  cc -O3 -march=native -fopenmp -I"$llmc" -Dmain=llmc_main -o "$tmp/llmc_bench" \
    "$top/bench/train/llmc_bench.c" -lm
  "$build/bench/train/bench_train" --export "$tmp/gpt2_124M.bin"
  "$tmp/llmc_bench" "$tmp/gpt2_124M.bin" 4 64 "$steps" | grep '^llmc' | tee "$tmp/llmc.txt"
  llmc_s=$(awk '/median_s/{print $3}' "$tmp/llmc.txt")
  llmc_rss=$(awk '/median_s/{print $7}' "$tmp/llmc.txt")
else
  echo "== llm.c: no $llmc/train_gpt2.c, skipped"
fi

torch_s=None torch_rss=None torch_v=None
if "$py" -c 'import torch' 2>/dev/null; then
  echo "== PyTorch CPU eager"
  "$py" "$top/bench/train/torch_gpt2.py" "$threads" "$steps" | tee "$tmp/torch.txt"
  torch_s=$(awk '/median_s/{print $3}' "$tmp/torch.txt")
  torch_rss=$(awk '/median_s/{print $7}' "$tmp/torch.txt")
  torch_v=\"$(awk '/median_s/{print $9}' "$tmp/torch.txt")\"
else
  echo "== PyTorch: $py has no torch, skipped"
fi

mkdir -p "$top/bench/results"
out="$top/bench/results/train-cpu-$(date -u +%Y%m%d-%H%M%S).json"
python3 - "$out" <<PY
import json, sys, platform, os
ours, ours2, gemm = $ours, $ours2, $gemm
steps = $steps
llmc, torch_s = $llmc_s, $torch_s
gemm_per_step = gemm / (steps + 1)   # the shim saw warm-up + repeats
cpu = [l.split(':', 1)[1].strip() for l in open('/proc/cpuinfo') if l.startswith('model name')][0]
r = {
  "benchmark": "GPT-2 124M training step, B=4, T=64, fp32, CPU",
  "command": "bench/train/compare_train.sh BUILD $threads $steps",
  "machine": {"cpu": cpu, "cpus": os.cpu_count(), "host": platform.node()},
  "threads": $threads, "steps_timed": steps,
  "env_openblas_coretype": "$env_coretype",
  "ours": {"median_step_s": ours2, "openblas_kernels": "$core",
           "median_step_s_with_gemm_timer": ours,
           "peak_rss_mib": $ours_rss,
           "gemm_s_per_step": gemm_per_step,
           "gemm_share": gemm_per_step / ours,
           "median_step_s_haswell_kernels": $ours3},
  "llmc": {"median_step_s": llmc, "peak_rss_mib": $llmc_rss,
           "build": "cc -O3 -march=native -fopenmp train_gpt2.c"},
  "pytorch": {"median_step_s": torch_s, "peak_rss_mib": $torch_rss,
              "version": $torch_v},
  "speedup_vs_llmc": (llmc / ours2) if llmc else None,
  "speedup_vs_pytorch": (torch_s / ours2) if torch_s else None,
  "speedup_vs_llmc_haswell_kernels": (llmc / $ours3) if llmc else None,
  "speedup_vs_pytorch_haswell_kernels": (torch_s / $ours3) if torch_s else None,
}
json.dump(r, open(sys.argv[1], "w"), indent=2)
print(json.dumps(r, indent=2))
PY
echo "results in $out"
