#!/bin/sh
# A run with checkpoint.interval 0 still saves (its final step): with two
# ranks (llmtrain launch --nproc 2, dp 2) its parts carry the run's attempt
# identity like any multi-rank run's (before: none, so a part another run
# left at the same step could commit with them), one identity on both
# parts and in the step's manifest; and a second run carries another.
# usage: test_job_attempt.sh path/to/llmtrain
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
"$exe" features 2>/dev/null | grep -qw gloo || { echo "SKIP: needs the gloo feature"; exit 77; }
. "$(dirname "$0")/../run_lib.sh"

cat > spec.json <<JSON
{"name": "attempt",
 "model": {"arch": "gpt2", "layers": 2, "hidden": 64, "heads": 4,
           "vocab": 512, "seq_len": 32},
 "parallelism": {"dp": 2, "zero": 0}, "batch": {"micro": 2, "grad_accum": 1},
 "optimizer": {"lr": 3e-3},
 "train": {"steps": 3, "seed": 7, "eval_interval": 0, "log_interval": 0,
           "threads": 1, "sample_tokens": 0},
 "data": {"train": "$tmp/corpus", "tokenizer": {"kind": "bpe", "vocab_size": 512}},
 "checkpoint": {"dir": "ckpt", "interval": 0},
 "hardware": {"gpu": "cpu"}}
JSON
d=run/ckpt/step-000000000003
# attempt FILE: the "attempt" value in FILE, or nothing
attempt() { sed -n 's/.*"attempt":"\([0-9a-f]\{16\}\)".*/\1/p' "$1"; }
"$exe" launch --out run --nproc 2 spec.json > run.log 2>&1 ||
  { bad "launch --nproc 2 with interval 0"; cat run.log; }
[ -f $d/manifest.json ] && ok "interval 0: the final step 3 is committed" ||
  bad "interval 0: no committed step 3"
a0=$(attempt $d/rank-00000.json); a1=$(attempt $d/rank-00001.json)
am=$(attempt $d/manifest.json)
[ -n "$a0" ] && ok "rank 0's part carries an attempt ($a0)" || bad "rank 0's part has no attempt"
[ -n "$a0" ] && [ "$a0" = "$a1" ] && [ "$a0" = "$am" ] &&
  ok "both parts and the manifest carry one attempt" ||
  bad "attempts differ: rank 0 '$a0', rank 1 '$a1', manifest '$am'"
"$exe" launch --out run2 --nproc 2 spec.json > run2.log 2>&1 ||
  { bad "second launch"; cat run2.log; }
b0=$(attempt run2/ckpt/step-000000000003/rank-00000.json)
[ -n "$b0" ] && [ "$b0" != "$a0" ] && ok "a second run carries another attempt ($b0)" ||
  bad "second run's attempt '$b0' (first '$a0')"
exit $fail
