#!/bin/sh
# A job with a constant learning-rate schedule: the job leaves the
# trainer's min_lr and total_steps at their defaults (the trainer refuses
# them set beside a constant schedule, which never reads them), so it
# still trains at the spec's LR, resumes exactly, and resumes without a
# schedule warning from a checkpoint written when the job set them
# (min_lr = 0.1 * lr, total = train.steps), as it did before.
# usage: test_lr_constant_job.sh path/to/llmtrain
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
. "$(dirname "$0")/../run_lib.sh"

cat > c.json <<JSON
{"name": "const",
 "model": {"arch": "gpt2", "layers": 1, "hidden": 32, "heads": 2,
           "vocab": 320, "seq_len": 16},
 "batch": {"micro": 2, "grad_accum": 1},
 "optimizer": {"lr": 2e-3},
 "schedule": {"kind": "constant", "warmup_steps": 2},
 "train": {"steps": 8, "seed": 3, "eval_interval": 0, "log_interval": 1, "threads": 1,
           "sample_tokens": 0},
 "data": {"train": "$tmp/corpus", "tokenizer": {"kind": "byte"}},
 "checkpoint": {"dir": "ckpt", "interval": 4, "async": false},
 "hardware": {"gpu": "cpu"},
 "metrics": {"jsonl": "metrics.jsonl"}}
JSON

# lr of every step line: warmup 1e-3 at step 1, then the peak 2e-3
lrs() { python3 -c '
import json, sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    if "loss" in j: print(j["step"], "%.6g" % j["lr"])' "$1"; }

"$exe" train c.json --out full > full.log 2>&1 && ok "constant schedule trains" ||
  { bad "constant schedule run"; cat full.log; }
lrs full/metrics.jsonl > full.lr
[ "$(sed -n 1p full.lr)" = "1 0.001" ] && [ "$(sed -n 8p full.lr)" = "8 0.002" ] &&
  [ "$(awk '$2 != "0.002"' full.lr | wc -l)" = 1 ] &&
  ok "lr: warmup then the constant peak" || { bad "constant lr"; cat full.lr; }

# stopped at 4, resumed: the same numbers
"$exe" train c.json --out part --steps 4 > p1.log 2>&1 &&
  "$exe" train c.json --out part --resume > p2.log 2>&1 && grep -q "resumed from .* at step 4" p2.log &&
  ! grep -q 'learning-rate schedule' p2.log && ok "resumed at 4, no schedule warning" ||
  { bad "resume"; cat p1.log p2.log; }
strip() { grep -v '"event"' "$1" | sed 's/,"step_s".*//'; }
strip full/metrics.jsonl > a.txt && strip part/metrics.jsonl > b.txt && cmp -s a.txt b.txt &&
  ok "resumed run = uninterrupted run" || { bad "resumed run differs"; diff a.txt b.txt | head; }

# a checkpoint of before: the schedule text as the job wrote it then (and
# without the manifest digest, which came later still)
"$exe" train c.json --out old --steps 4 > o1.log 2>&1 || { bad "old: first half"; cat o1.log; }
m=old/ckpt/step-000000000004/manifest.json
grep -q 'min_lr=0 warmup=2 total=1000 ' "$m" &&
  sed -i 's/min_lr=0 warmup=2 total=1000 /min_lr=0.000200000009 warmup=2 total=8 /; s/,"digest":"[0-9a-f]\{16\}"}$/}/' "$m" &&
  grep -q 'min_lr=0.000200000009 warmup=2 total=8 ' "$m" && ok "old schedule text written" ||
  { bad "schedule text of step 4"; grep -o '"trainer.schedule"[^,]*' "$m"; }
"$exe" train c.json --out old --resume > o2.log 2>&1 && grep -q "resumed from .* at step 4" o2.log &&
  ! grep -q 'learning-rate schedule' o2.log && ok "old constant checkpoint resumes, no warning" ||
  { bad "old checkpoint resume"; grep -i "schedule\|error" o2.log | head -3; }
strip old/metrics.jsonl > c.txt && cmp -s a.txt c.txt && ok "and continues like the uninterrupted run" ||
  { bad "old checkpoint run differs"; diff a.txt c.txt | head; }
# the comparison still sees what a constant schedule reads: another peak LR warns
"$exe" train c.json --out other --steps 4 > o4.log 2>&1 && sed 's/"lr": 2e-3/"lr": 3e-3/' c.json > c3.json &&
  "$exe" train c3.json --out other --resume --steps 5 > o3.log 2>&1 &&
  grep -q 'learning-rate schedule' o3.log && ok "another lr still warns" ||
  { bad "lr change not warned"; cat o3.log; }
exit $fail
