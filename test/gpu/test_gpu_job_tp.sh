#!/bin/sh
# llmt_job with tensor parallelism on the CUDA engine: `llmtrain launch
# --nproc 2 --spares 1` (Gloo), tp 2 x dp 1, train.device cuda, rank 1 killed at step
# 5. Both workers drive GPU 0 when the machine has one (a TP group's
# collectives go over the host group, lib/train/tp.c staging the device
# buffers, so no NCCL communicator needs two GPUs). The agent restarts the
# gang from the newest checkpoint (step 4, or 2 when the kill came before
# rank 0 committed 4); every step's loss must match one
# process's tp 1 run on the same GPU within 2e-2 relative (bf16 parameters
# and GEMMs, the partial sums added in another order), and the restart
# must have read the tp 2 checkpoint. Without and with sequence
# parallelism.
# usage: test_gpu_job_tp.sh path/to/llmtrain
# Exits 77 without a GPU or without Gloo.
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
ngpu=$("$exe" features 2>/dev/null | sed -n 's/^cuda devices: *//p')
[ "${ngpu:-0}" -ge 1 ] || { echo "no GPU: skip"; exit 77; }
"$exe" features 2>/dev/null | grep -q '^gloo *yes' || { echo "no gloo: skip"; exit 77; }
. "$(dirname "$0")/job_losses.sh"
. "$(dirname "$0")/../run_lib.sh"
mk() { # file tp sequence_parallel
  cat > "$1" <<JSON
{"name": "gpu-tp",
 "model": {"arch": "llama", "layers": 2, "hidden": 128, "heads": 4, "kv_heads": 2,
           "vocab": 320, "seq_len": 64},
 "parallelism": {"tp": $2, "sequence_parallel": $3},
 "batch": {"micro": 4, "grad_accum": 2},
 "optimizer": {"lr": 3e-3},
 "train": {"steps": 10, "seed": 7, "device": "cuda", "eval_interval": 0, "log_interval": 1,
           "sample_tokens": 0},
 "data": {"train": "$tmp/corpus", "tokenizer": {"kind": "byte"}},
 "checkpoint": {"interval": 2, "async": false},
 "hardware": {"gpu": "h100"}}
JSON
}
mk one.json 1 false
"$exe" train one.json --out one > one.log 2>&1 || { bad "one process, tp 1"; cat one.log; exit 1; }
losses one/metrics.jsonl > a.txt
for sp in false true; do
  mk tp.json 2 $sp
  LLMT_FAULT=kill:1:5 "$exe" launch --nproc 2 --spares 1 --heartbeat-timeout 120 tp.json --out tp-$sp \
    > tp-$sp.log 2>&1 || { bad "launch --nproc 2, tp 2 (sequence_parallel $sp)"; cat tp-$sp.log; }
  grep -q "tensor x data parallel: tp 2 x dp 1 = 2 ranks (gloo)" tp-$sp.log &&
    ok "tp 2 x dp 1 over gloo on the CUDA engine (sequence_parallel $sp)" ||
    { bad "no tp 2 banner (sequence_parallel $sp)"; tail -20 tp-$sp.log; }
  grep -qE "recovered: gen 1 resumed at step (2|4) " tp-$sp.log &&
    ok "the restart resumed a tp 2 checkpoint (sequence_parallel $sp)" ||
    { bad "no resume from a checkpoint (sequence_parallel $sp)"; grep -iE "resum|recover" tp-$sp.log; }
  losses tp-$sp/metrics.jsonl > b.txt
  close a.txt b.txt "tp 2 (sequence_parallel $sp), killed and restarted = tp 1 on one GPU" 10
done
exit $fail
