#!/bin/sh
# `mpirun -np 8 llmtrain train SPEC.json` with pipeline parallelism: tp 2 x
# pp 2 x dp 2 (ZeRO-1, schedule $2) against one process on the same global
# batch (8 = micro 2 x accum 4 there, micro 2 x accum 2 x dp 2 here): every
# training and validation loss within 1e-5 relative (plus the 1e-6 of the
# 6 decimals metrics.jsonl prints), the same sample text, the layout in the
# banner and the progress line (with the bubble), a "pp" line per step in
# every rank's metrics, a step-6 checkpoint that one process resumes (a
# pipeline checkpoint read under pp 1) with equal losses.
# usage: test_mpi_train_pp.sh path/to/llmtrain SCHEDULE
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
sched=${2:-1f1b}
. "$(dirname "$0")/mpi_lib.sh"
mk() { # file parallelism steps
  mpi_spec "$1" tiny-pp '"arch": "gpt2", "layers": 4, "hidden": 64, "heads": 4, "vocab": 320,
    "seq_len": 32' '"micro": 2, "global": 8' "$2" "$3"
}
mk ref.json '"tp": 1' 6
mk pp.json "\"tp\": 2, \"pp\": 2, \"zero\": 1, \"pp_schedule\": \"$sched\"" 6
"$exe" train ref.json --out ref > ref.log 2>&1 && ok "one process" || { bad "one process"; cat ref.log; }
mpi_train 8 pp.json --out pp > pp.log 2>&1 && ok "mpirun -np 8 (tp 2 x pp 2 x dp 2)" ||
  { bad "mpirun -np 8"; cat pp.log; }
grep -q "tensor x pipeline x data parallel: tp 2 x pp 2 x dp 2 = 8 ranks (mpi), ZeRO-1" pp.log &&
  ok "banner" || { bad "no tp x pp x dp banner"; cat pp.log; }
# the bubble on the compute-time clocks beside the plan's (p-1)/(m+p-1) =
# 1/3 (accum 2) and the wall time's share
grep -q "step .*/6 | loss .*| tp 2 x pp 2 x dp 2 | bubble [0-9]*% (plan 33%), wall [0-9]*%" pp.log &&
  ok "progress line shows the layout and the bubble (the plan's beside)" ||
  { bad "progress line"; cat pp.log; }
lines=ok
for r in 0 1 2 3 4 5 6 7; do
  m=pp/metrics.jsonl
  [ "$r" = 0 ] || m=pp/rank-$r/metrics.jsonl
  [ "$(grep -c '"event":"pp"' "$m" 2>/dev/null)" = 6 ] || { bad "rank $r: no 6 pp lines in $m"; lines=; }
done
[ -n "$lines" ] && ok "every rank's metrics has a pp line per step"
[ "$(grep -c '"loss"' pp/metrics.jsonl)" = 6 ] && ok "6 step lines" || bad "step lines"
ls pp/ckpt | grep -q '6$' && ok "checkpoint at step 6" || bad "no step-6 checkpoint: $(ls pp/ckpt)"
ext ref/metrics.jsonl > a.txt
ext pp/metrics.jsonl > b.txt
cmp_losses a.txt b.txt "losses equal one process's (train and validation)"
sample() { sed -n '/^---- sample/,/^----$/p' "$1"; }
[ -n "$(sample ref.log)" ] && [ "$(sample ref.log)" = "$(sample pp.log | head -n "$(sample ref.log | wc -l)")" ] &&
  ok "the sample equals one process's" || { bad "samples differ"; sample ref.log; sample pp.log; }
# the pipeline's checkpoint resumes in one process (pp 1): steps 7-8
# against the one-process run continued the same way
mk ref8.json '"tp": 1' 8
resume_one pp "the tp 2 x pp 2 x dp 2 checkpoint resumed by one process" "pp resume under pp 1"
exit $fail
