#!/bin/sh
# Tensor parallelism under `llmtrain launch` (Gloo, the fault-tolerance
# agent): tp 2 x dp 2 on 4 workers, no spare, rank 1 killed at step 5. The
# agent shrinks the world to the largest the job accepts, 2 ranks (tp 2 x
# dp 1: a TP group stays whole), which resumes the tp 2 x dp 2 checkpoint of
# step 3 and finishes; every step's loss equals the uninterrupted
# one-process run's within 1e-5 relative (+1e-6 for the 6 printed
# decimals). With ZeRO-1 no smaller world is runnable (dp 1 refuses a
# stage): the agent stops at once saying so, naming parallelism.zero.
# Killed at step 5, not 4: rank 0 commits step 3's checkpoint (the
# manifest) after rank 1's part is written, so a kill right after the save
# could take that step with it when the agent stops the gang while rank 0
# still writes; before rank 1 reaches step 5, rank 0 has run step 4 with it
# and so has committed step 3 (a loaded machine lost it about 1 run in 4).
# usage: test_job_tp_launch.sh path/to/llmtrain (exit 77 without gloo)
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
"$exe" features 2>/dev/null | grep -qw gloo || { echo "no gloo in this build"; exit 77; }
. "$(dirname "$0")/../run_lib.sh"
mk() { # file tp zero
  cat > "$1" <<JSON
{"name": "tiny-tp-launch",
 "model": {"arch": "gpt2", "layers": 2, "hidden": 64, "heads": 4,
           "vocab": 320, "seq_len": 32},
 "batch": {"micro": 4, "global": 8},
 "parallelism": {"tp": $2, "zero": $3},
 "optimizer": {"lr": 3e-3},
 "schedule": {"kind": "cosine", "warmup_steps": 2},
 "train": {"steps": 6, "seed": 5, "eval_interval": 0, "eval_batches": 1,
           "log_interval": 3, "threads": 1, "sample_tokens": 0},
 "data": {"train": "$tmp/corpus", "tokenizer": {"kind": "byte"}},
 "checkpoint": {"dir": "ckpt", "interval": 3, "async": false},
 "hardware": {"gpu": "cpu"}}
JSON
}
mk ref.json 1 0
mk tp.json 2 0
mk tpz.json 2 1
"$exe" train ref.json --out ref > ref.log 2>&1 && ok "one process" || { bad "one process"; cat ref.log; }
LLMT_FAULT=kill:1:5 "$exe" launch --nproc 4 --heartbeat-timeout 60 tp.json --out tp > tp.log 2>&1 &&
  ok "launch --nproc 4, rank 1 killed at step 5: finished" || { bad "launch"; cat tp.log; }
grep -q "continuing elastically on 2 ranks, 1 data-parallel groups of 2 (was 4 ranks)" tp.log &&
  ok "shrank to tp 2 x dp 1" || { bad "no elastic shrink to 2 ranks"; cat tp.log; }
grep -q "tensor x data parallel: tp 2 x dp 1 = 2 ranks (gloo)" tp.log &&
  ok "gen 1 runs tp 2 x dp 1 over gloo" || bad "no tp 2 x dp 1 banner"
ext() { sed -n 's/.*"step":\([0-9]*\),"loss":\([-0-9.e]*\).*/\1 \2/p' "$1" | sort -n -k1,1 -u; }
ext ref/metrics.jsonl > a.txt
ext tp/metrics.jsonl > b.txt
if [ "$(wc -l < a.txt)" = 6 ] && [ "$(wc -l < b.txt)" = 6 ] &&
   paste a.txt b.txt | awk '{d = $2 - $4; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2);
                             if ($1 != $3 || d > 1e-5 * ($2 < 0 ? -$2 : $2) + 1e-6) bad = 1;
                             if (r > m) m = r} END {printf "max relative loss diff %.2g\n", m; exit bad}'; then
  ok "every step's loss equals the uninterrupted one-process run's"
else
  bad "losses differ"; paste a.txt b.txt
fi
LLMT_FAULT=kill:1:5 "$exe" launch --nproc 4 --heartbeat-timeout 60 tpz.json --out tpz > tpz.log 2>&1 &&
  bad "ZeRO-1 on a shrunk tp group finished" || ok "ZeRO-1: the agent stops"
grep -q "no smaller world.*parallelism.zero 1 needs 2 or more data-parallel ranks" tpz.log &&
  ok "saying why (parallelism.zero)" || { bad "no reason naming parallelism.zero"; cat tpz.log; }
exit $fail
