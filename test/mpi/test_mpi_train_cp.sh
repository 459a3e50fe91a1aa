#!/bin/sh
# `mpirun -np 4 llmtrain train SPEC.json` with context parallelism: cp 2 x
# dp 2 (attention variant $2: ring or allgather) against one process on
# the same global batch (8 = micro 4 x accum 2 there, micro 4 x accum 1 x
# dp 2 here; the two CP ranks of a replica read the same sequences and
# train on their chunks of them): every training and validation loss
# within 1e-5 relative (plus the 1e-6 of the 6 decimals metrics.jsonl
# prints), the same sampled text (generation through the split engine),
# the layout in the banner and the progress line, a step-6 checkpoint
# that names cp, holds each tensor once, and one process resumes (cp 2 ->
# cp 1) with the uninterrupted run's losses.
# usage: test_mpi_train_cp.sh path/to/llmtrain VARIANT
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
variant=${2:-ring}
. "$(dirname "$0")/mpi_lib.sh"
mk() { # file parallelism steps
  mpi_spec "$1" tiny-cp '"arch": "gpt2", "layers": 2, "hidden": 64, "heads": 4, "vocab": 257, "seq_len": 32' \
    '"micro": 4, "global": 8' "$2" "$3"
}
mk ref.json '"tp": 1' 6
mk cp.json "\"cp\": 2, \"cp_variant\": \"$variant\"" 6
"$exe" train ref.json --out ref > ref.log 2>&1 && ok "one process" || { bad "one process"; cat ref.log; }
mpi_train 4 cp.json --out cp > cp.log 2>&1 && ok "mpirun -np 4 (cp 2 x dp 2, $variant)" ||
  { bad "mpirun -np 4"; cat cp.log; }
grep -q "context x data parallel: tp 1 x cp 2 x dp 2 = 4 ranks (mpi), ZeRO-0" cp.log &&
  ok "banner" || { bad "no cp banner"; head -5 cp.log; }
grep -q "step .*/6 | loss .*| tp 1 x cp 2 x dp 2" cp.log && ok "progress line shows the layout" ||
  { bad "progress line"; cat cp.log; }
for r in 1 2 3; do
  [ -f cp/rank-$r/metrics.jsonl ] || bad "no cp/rank-$r"
done
[ "$(grep -c '"loss"' cp/metrics.jsonl)" = 6 ] && ok "6 step lines" || bad "step lines"
ls cp/ckpt | grep -q '6$' && ok "checkpoint at step 6" || bad "no step-6 checkpoint: $(ls cp/ckpt)"
grep -Eqr '"cp\\?": ?2' cp/ckpt/*6 2>/dev/null && ok "the checkpoint names its layout" ||
  bad "no cp in the checkpoint's plan"
# CP rank 1 of each replica (world ranks 1 and 3) writes no tensor data
for r in 1 3; do
  f=$(ls cp/ckpt/*6/rank-0000$r.bin 2>/dev/null)
  [ -n "$f" ] && [ "$(stat -c %s "$f")" -le 4096 ] && ok "rank $r saved no tensor (once per replica)" ||
    bad "rank $r's checkpoint part: $(ls -l cp/ckpt/*6/ 2>&1)"
done
s1=$(mpi_sample ref.log) s2=$(mpi_sample cp.log)
[ -n "$s1" ] && [ "$s1" = "$s2" ] && ok "the same sample" || bad "sample '$s2', one process '$s1'"
ext ref/metrics.jsonl > a.txt
ext cp/metrics.jsonl > b.txt
cmp_losses a.txt b.txt "losses equal one process's (train and validation)"
# the cp 2 x dp 2 checkpoint resumes in one process (cp 1): steps 7-8
# against the one-process run continued the same way
mk ref8.json '"tp": 1' 8
resume_one cp "the cp 2 x dp 2 checkpoint resumed by one process" "cp resume under cp 1"
exit $fail
