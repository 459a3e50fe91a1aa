#!/bin/sh
# Expert parallelism under `llmtrain launch` (Gloo): a Llama MoE with ep 2
# inside dp 4 on 4 workers against one process on the same micro-batches
# (micro 2: the capacity is per micro-batch): every training loss within
# 1e-5 relative (+1e-6 for the 6 printed decimals), the layout in the
# progress line, and each step's expert counts equal the one process's.
# usage: test_job_ep_launch.sh path/to/llmtrain (exit 77 without gloo)
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
"$exe" features 2>/dev/null | grep -qw gloo || { echo "no gloo in this build"; exit 77; }
. "$(dirname "$0")/../run_lib.sh"
mk() { # file dp ep
  cat > "$1" <<JSON
{"name": "tiny-ep-launch",
 "model": {"arch": "llama", "layers": 2, "hidden": 32, "heads": 4, "vocab": 320,
           "seq_len": 32,
           "moe": {"experts": 4, "top_k": 2, "expert_ffn": 32, "capacity_factor": 0.75}},
 "batch": {"micro": 2, "global": 8},
 "parallelism": {"dp": $2, "ep": $3},
 "optimizer": {"lr": 3e-3},
 "schedule": {"kind": "cosine", "warmup_steps": 2},
 "train": {"steps": 4, "seed": 5, "eval_interval": 0, "eval_batches": 1,
           "log_interval": 2, "threads": 1, "sample_tokens": 0},
 "data": {"train": "$tmp/corpus", "tokenizer": {"kind": "byte"}},
 "hardware": {"gpu": "cpu"},
 "metrics": {"jsonl": "metrics.jsonl"}}
JSON
}
mk ref.json 1 1
mk ep.json 4 2
"$exe" train ref.json --out ref > ref.log 2>&1 && ok "one process" || { bad "one process"; cat ref.log; }
"$exe" launch --nproc 4 --heartbeat-timeout 60 ep.json --out ep > ep.log 2>&1 &&
  ok "llmtrain launch --nproc 4 (gloo, dp 4, ep 2)" || { bad "launch"; cat ep.log; }
grep -q "tp 1 x dp 4 (ep 2)" ep.log && ok "progress line shows the layout" ||
  { bad "progress line"; cat ep.log; }
ext() { sed -n 's/.*"step":\([0-9]*\),"loss":\([-0-9.e]*\).*/\1 \2/p' "$1"; }
moe() { grep '"event":"moe"' "$1" | sed 's/,"aux_loss".*//'; }
ext ref/metrics.jsonl > a.txt
ext ep/metrics.jsonl > b.txt
if [ "$(wc -l < a.txt)" = 4 ] && [ "$(wc -l < b.txt)" = 4 ] &&
   paste a.txt b.txt | awk '{d = $2 - $4; if (d < 0) d = -d;
                             if ($1 != $3 || d > 1e-5 * ($2 < 0 ? -$2 : $2) + 1e-6) bad = 1}
                             END {exit bad}'; then
  ok "losses equal one process's"
else
  bad "losses differ"; paste a.txt b.txt
fi
moe ref/metrics.jsonl > c.txt
moe ep/metrics.jsonl > d.txt
[ -s c.txt ] && cmp -s c.txt d.txt && ok "expert counts equal" || { bad "expert counts"; paste c.txt d.txt; }
exit $fail
