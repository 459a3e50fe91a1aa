#!/usr/bin/env bash
# llm.c's train_gpt2.cu as a peer for bench_gpt2: builds it on the GPU
# machine (USE_CUDNN=0: cuDNN's frontend headers are not there; single GPU,
# no MPI), writes a random-token data file in llm.c's format, runs GPT-2 124M
# from random init ("-e d12") for each batch size at T=1024, and reports the
# median step time after warm-up as JSON.
#
#   bench/gpu/llmc_peer.sh LLMC_SOURCE_DIR OUT_JSON [B_LIST] [STEPS]
set -uo pipefail
src=$1 out=$2 blist=${3:-16,32,64} steps=${4:-25}
work=/tmp/llmc-peer
rm -rf "$work" && cp -r "$src" "$work" && cd "$work" || exit 1
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
make train_gpt2cu USE_CUDNN=0 NO_MULTI_GPU=1 NO_USE_MPI=1 GPU_COMPUTE_CAPABILITY=90 \
  >"$work/build.log" 2>&1 || { tail -30 "$work/build.log"; exit 1; }
echo "llm.c built in $(( $(date +%s) - t0 )) s"
python3 - <<'PY'
import numpy as np
n = 8 << 20
hdr = np.zeros(256, dtype=np.int32)
hdr[0], hdr[1], hdr[2] = 20240520, 1, n
rng = np.random.default_rng(0)
with open("tok.bin", "wb") as f:
    f.write(hdr.tobytes())
    f.write(rng.integers(0, 50257, n, dtype=np.uint16).tobytes())
PY
echo "[" >"$out.tmp"
first=1
for B in ${blist//,/ }; do
  ./train_gpt2cu -i tok.bin -j tok.bin -e d12 -b "$B" -t 1024 -x "$steps" -v 100000 \
    -s 0 -m 1 -l 3e-4 >"$work/run_B$B.log" 2>&1
  rc=$?
  python3 - "$work/run_B$B.log" "$B" "$rc" "$first" >>"$out.tmp" <<'PY'
import json, re, sys
log, B, rc, first = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
ms, losses = [], []
for line in open(log, errors="replace"):
    m = re.search(r"step\s+(\d+)/\d+ \| loss ([\d.]+).*\| ([\d.]+) ms", line)
    if m:
        losses.append(float(m.group(2)))
        if int(m.group(1)) > 3:
            ms.append(float(m.group(3)))
ms.sort()
r = {"name": f"gpt2_124M_B{B}_T1024", "B": B, "T": 1024, "rc": rc}
if ms:
    med = ms[len(ms) // 2]
    r.update(median_step_ms=med, tokens_per_s=B * 1024 / (med * 1e-3), steps=len(ms),
             loss_first=losses[0], loss_last=losses[-1])
    print(f"llm.c B={B}: step median {med:.2f} ms {B * 1024 / (med * 1e-3):9.0f} tok/s "
          f"loss {losses[0]:.3f} -> {losses[-1]:.3f}", file=sys.stderr)
else:
    print(f"llm.c B={B}: no step lines (rc {rc}); log tail:", file=sys.stderr)
    print("".join(open(log, errors="replace").readlines()[-15:]), file=sys.stderr)
print(("" if first else ",") + json.dumps(r))
PY
  first=0
done
echo "]" >>"$out.tmp"
python3 -c "import json,sys; json.dump({'suite':'gpu-gpt2-llmc','options':'make train_gpt2cu USE_CUDNN=0 NO_MULTI_GPU=1 NO_USE_MPI=1 GPU_COMPUTE_CAPABILITY=90; ./train_gpt2cu -e d12 -b B -t 1024 -l 3e-4 (defaults otherwise: bf16, master weights, recompute=1)','results':json.load(open(sys.argv[1]))}, open(sys.argv[2],'w'), indent=1)" "$out.tmp" "$out"
