#!/bin/sh
# Pipeline parallelism under `llmtrain launch` (Gloo, the fault-tolerance
# agent): pp 2 x dp 2 on 4 workers, no spare, rank 1 killed at step 5. The
# agent shrinks the world to the largest the job accepts, 2 ranks (pp 2 x
# dp 1: a pipeline stays whole), which gang-restarts from the pp 2 x dp 2
# checkpoint of step 3 and finishes; every step's loss equals the
# uninterrupted one-process run's within 1e-5 relative (+1e-6 for the 6
# printed decimals), and the restarted run's metrics have a pp line per
# step it ran.
# Killed at step 5, not 4: rank 0 commits step 3's checkpoint (the
# manifest) after rank 1's part is written, so a kill right after the save
# could take that step with it when the agent stops the gang while rank 0
# still writes; before rank 1 reaches step 5, rank 0 has run step 4 with it
# and so has committed step 3 (a loaded machine lost it about 1 run in 4).
# usage: test_job_pp_launch.sh path/to/llmtrain (exit 77 without gloo)
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
"$exe" features 2>/dev/null | grep -qw gloo || { echo "no gloo in this build"; exit 77; }
. "$(dirname "$0")/../run_lib.sh"
mk() { # file pp
  cat > "$1" <<JSON
{"name": "tiny-pp-launch",
 "model": {"arch": "gpt2", "layers": 4, "hidden": 64, "heads": 4,
           "vocab": 320, "seq_len": 32},
 "batch": {"micro": 2, "global": 8},
 "parallelism": {"pp": $2},
 "optimizer": {"lr": 3e-3},
 "schedule": {"kind": "cosine", "warmup_steps": 2},
 "train": {"steps": 6, "seed": 5, "eval_interval": 0, "eval_batches": 1,
           "log_interval": 3, "threads": 1, "sample_tokens": 0},
 "data": {"train": "$tmp/corpus", "tokenizer": {"kind": "byte"}},
 "checkpoint": {"dir": "ckpt", "interval": 3, "async": false},
 "hardware": {"gpu": "cpu"}}
JSON
}
mk ref.json 1
mk pp.json 2
"$exe" train ref.json --out ref > ref.log 2>&1 && ok "one process" || { bad "one process"; cat ref.log; }
LLMT_FAULT=kill:1:5 "$exe" launch --nproc 4 --heartbeat-timeout 60 pp.json --out pp > pp.log 2>&1 &&
  ok "launch --nproc 4, rank 1 killed at step 5: finished" || { bad "launch"; cat pp.log; }
grep -q "continuing elastically on 2 ranks" pp.log && ok "shrunk to 2 ranks (pp 2 x dp 1)" ||
  { bad "no shrink to 2 ranks"; cat pp.log; }
grep -q "resumed at step 3" pp.log && ok "resumed the pipeline's step-3 checkpoint" ||
  { bad "no resume at step 3"; cat pp.log; }
# rank 0's progress line after the restart (pp 2 x dp 1, accum 4): the
# bubble on the compute-time clocks beside the plan's 1/(4+1) = 20%
grep -q "step *6/6 | loss .*| tp 1 x pp 2 x dp 1 | bubble [0-9]*% (plan 20%), wall [0-9]*%" pp.log &&
  ok "progress line: bubble beside the plan's 20%" ||
  { bad "progress line (bubble, plan's)"; grep "step " pp.log; }
[ "$(grep -c '"event":"pp"' pp/metrics.jsonl)" -ge 6 ] && ok "pp lines in the metrics" ||
  bad "pp lines: $(grep -c '"event":"pp"' pp/metrics.jsonl)"
# the latest line of each step wins (steps after the restart point ran twice)
ext() {
  sed -n 's/.*"step":\([0-9]*\),"loss":\([-0-9.e]*\).*/\1 \2/p' "$1" |
    awk '{v[$1] = $2} END {for (k in v) print k, v[k]}' | sort -n
}
ext ref/metrics.jsonl > a.txt
ext pp/metrics.jsonl > b.txt
if [ "$(wc -l < a.txt)" = 6 ] && [ "$(wc -l < b.txt)" = 6 ] &&
   paste a.txt b.txt | awk '{d = $2 - $4; if (d < 0) d = -d;
                             if ($1 != $3 || d > 1e-5 * $2 + 1e-6) bad = 1}
                             END {exit bad}'; then
  ok "every step's loss equals one process's"
else
  bad "losses differ"; paste a.txt b.txt
fi
exit $fail
