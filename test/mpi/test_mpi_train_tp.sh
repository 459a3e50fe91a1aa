#!/bin/sh
# `mpirun -np 4 llmtrain train SPEC.json` with tensor parallelism: tp 2 x
# dp 2 (ZeRO stage $2) against one process on the same global batch (8 =
# micro 4 x accum 2 there, micro 4 x accum 1 x dp 2 here): every training
# and validation loss within 1e-5 relative (plus the 1e-6 of the 6 decimals
# metrics.jsonl prints), the layout in the banner and the progress line,
# the TP groups' ranks in their own run directories, a step-6 checkpoint
# that one process resumes (a TP checkpoint read under tp 1).
# usage: test_mpi_train_tp.sh path/to/llmtrain ZERO
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
zero=${2:-0}
. "$(dirname "$0")/mpi_lib.sh"
mk() { # file tp zero steps
  mpi_spec "$1" tiny-tp '"arch": "gpt2", "layers": 2, "hidden": 64, "heads": 4, "vocab": 320, "seq_len": 32' \
    '"micro": 4, "global": 8' "\"tp\": $2, \"zero\": $3" "$4"
}
mk ref.json 1 0 6
mk tp.json 2 "$zero" 6
"$exe" train ref.json --out ref > ref.log 2>&1 && ok "one process" || { bad "one process"; cat ref.log; }
mpi_train 4 tp.json --out tp > tp.log 2>&1 && ok "mpirun -np 4 (tp 2 x dp 2)" || { bad "mpirun -np 4"; cat tp.log; }
grep -q "tensor x data parallel: tp 2 x dp 2 = 4 ranks (mpi), ZeRO-$zero" tp.log &&
  ok "banner" || bad "no tp x dp banner"
grep -q "step .*/6 | loss .*| tp 2 x dp 2" tp.log && ok "progress line shows the layout" || { bad "progress line"; cat tp.log; }
for r in 1 2 3; do
  [ -f tp/rank-$r/metrics.jsonl ] || bad "no tp/rank-$r"
done
[ "$(grep -c '"loss"' tp/metrics.jsonl)" = 6 ] && ok "6 step lines" || bad "step lines"
ls tp/ckpt | grep -q '6$' && ok "checkpoint at step 6" || bad "no step-6 checkpoint: $(ls tp/ckpt)"
grep -Eqr '"tp\\?": ?2' tp/ckpt/*6 2>/dev/null && ok "the checkpoint names its layout" ||
  bad "no tp in the checkpoint's plan"
ext ref/metrics.jsonl > a.txt
ext tp/metrics.jsonl > b.txt
cmp_losses a.txt b.txt "losses equal one process's (train and validation)"
# the tp 2 x dp 2 checkpoint resumes in one process (tp 1): steps 7-8
# against the one-process run continued the same way
mk ref8.json 1 0 8
resume_one tp "the tp 2 x dp 2 checkpoint resumed by one process" "tp resume under tp 1"
exit $fail
