#!/bin/sh
# Context parallelism under `llmtrain launch` (Gloo, the fault-tolerance
# agent): cp 2 x dp 2 (all-gather attention) on 4 workers, no spare, rank 1
# killed at step 4. The agent shrinks the world to the largest the job
# accepts, 2 ranks (cp 2 x dp 1: a CP group stays whole), which resumes
# the cp 2 x dp 2 checkpoint of step 2 and finishes; every step's
# training and validation loss equals the uninterrupted one-process run's
# within 1e-5 relative (+1e-6 for the 6 printed decimals). Then the same
# with a spare and --in-place: the survivors stay in their processes,
# restore step 2 from the memory tier (each CP rank 1's snapshot holds no
# tensor: the group's rank 0 saved it) and the losses are again equal.
# usage: test_job_cp_launch.sh path/to/llmtrain (exit 77 without gloo)
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
"$exe" features 2>/dev/null | grep -qw gloo || { echo "no gloo in this build"; exit 77; }
. "$(dirname "$0")/../run_lib.sh"
mk() { # file parallelism
  cat > "$1" <<JSON
{"name": "tiny-cp-launch",
 "model": {"arch": "llama", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2,
           "vocab": 257, "seq_len": 32},
 "batch": {"micro": 4, "global": 8},
 "parallelism": {$2},
 "optimizer": {"lr": 3e-3},
 "schedule": {"kind": "cosine", "warmup_steps": 2},
 "train": {"steps": 6, "seed": 5, "eval_interval": 3, "eval_batches": 2,
           "log_interval": 3, "threads": 1, "sample_tokens": 0},
 "data": {"train": "$tmp/corpus", "tokenizer": {"kind": "byte"}},
 "checkpoint": {"dir": "ckpt", "interval": 2, "async": false},
 "hardware": {"gpu": "cpu"}}
JSON
}
mk ref.json '"tp": 1'
mk cp.json '"cp": 2, "cp_variant": "allgather"'
"$exe" train ref.json --out ref > ref.log 2>&1 && ok "one process" || { bad "one process"; cat ref.log; }
LLMT_FAULT=kill:1:4 "$exe" launch --nproc 4 --heartbeat-timeout 60 cp.json --out cp > cp.log 2>&1 &&
  ok "launch --nproc 4, rank 1 killed at step 4: finished" || { bad "launch"; cat cp.log; }
grep -q "tensor x context x data parallel: tp 1 x cp 2 x dp 2 = 4 ranks (gloo)" cp.log &&
  ok "gen 0 runs cp 2 x dp 2 over gloo" || bad "no cp 2 x dp 2 banner"
grep -q "continuing elastically on 2 ranks" cp.log &&
  ok "shrank to 2 ranks" || { bad "no elastic shrink to 2 ranks"; cat cp.log; }
grep -q "tensor x context x data parallel: tp 1 x cp 2 x dp 1 = 2 ranks (gloo)" cp.log &&
  ok "gen 1 runs cp 2 x dp 1 over gloo" || bad "no cp 2 x dp 1 banner"
ext() {
  sed -n 's/.*"step":\([0-9]*\),"\(loss\|val_loss\)":\([-0-9.e]*\).*/\1 \2 \3/p' "$1" |
    sort -k1,1n -k2,2 -u
}
ext ref/metrics.jsonl > a.txt
ext cp/metrics.jsonl > b.txt
if [ "$(wc -l < a.txt)" -ge 8 ] && [ "$(wc -l < a.txt)" = "$(wc -l < b.txt)" ] &&
   paste a.txt b.txt | awk '{d = $3 - $6; if (d < 0) d = -d; r = d / ($3 < 0 ? -$3 : $3);
                             if ($1 != $4 || $2 != $5 || d > 1e-5 * ($3 < 0 ? -$3 : $3) + 1e-6) bad = 1;
                             if (r > m) m = r} END {printf "max relative loss diff %.2g\n", m; exit bad}'; then
  ok "every step's loss and validation loss equal the uninterrupted one-process run's"
else
  bad "losses differ"; paste a.txt b.txt
fi
LLMT_FAULT=kill:1:4 "$exe" launch --nproc 4 --spares 1 --in-place --heartbeat-timeout 60 \
  cp.json --out cpi > cpi.log 2>&1 && ok "launch --in-place with a spare: finished" ||
  { bad "launch --in-place"; cat cpi.log; }
n=$(cat cpi/metrics.jsonl cpi/rank-*/metrics.jsonl 2>/dev/null |
    grep -c '"event":"inplace".*"step":2,"tier":"memory"')
# what is checked here is the job's side once the agent has chosen to
# recover in place (the agent's choice is test launch-inplace's): when it
# says so, the 3 survivors must have restored in place
if ! grep -q "in-place recovery as gen 1" cpi.log; then
  echo "note: the agent did not recover in place this time:"; grep "launch:" cpi.log
elif [ "$n" = 3 ]; then
  ok "3 survivors restored step 2 from the memory tier in place"
else
  bad "in-place restores: $n"; grep -h inplace cpi/metrics.jsonl cpi/rank-*/metrics.jsonl
  grep "launch:" cpi.log
fi
ext cpi/metrics.jsonl > c.txt
if [ "$(wc -l < c.txt)" = "$(wc -l < a.txt)" ] &&
   paste a.txt c.txt | awk '{d = $3 - $6; if (d < 0) d = -d;
                             if ($1 != $4 || $2 != $5 || d > 1e-5 * ($3 < 0 ? -$3 : $3) + 1e-6) bad = 1}
                             END {exit bad}'; then
  ok "in place: every loss equals the one-process run's"
else
  bad "in place: losses differ"; paste a.txt c.txt
fi
exit $fail
