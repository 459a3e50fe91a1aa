#!/bin/sh
# The interleaved pipeline (parallelism.pp_schedule interleaved, pp 2 x
# virtual_stages 2: 4 model chunks over 2 processes) across processes,
# against one process on the same global batch: every training and
# validation loss within 1e-5 relative (plus the 1e-6 of the 6 decimals
# metrics.jsonl prints). Its messages wrap round the stages (stage 1's
# chunk 0 feeds stage 0's chunk 1), which waits forever when sends wait
# for their receivers: the stages leave their sends in flight
# (lib/train/pp_send.h).
#   mpi:  `mpirun -np 2` (pp 2, m 4), `mpirun -np 4` (pp 2 x dp 2,
#         ZeRO-1, m 4) and `mpirun -np 8` (tp 2 x pp 2 x dp 2, ZeRO-1,
#         m 4): MPI_Isend with the rendezvous protocol (the boundary
#         tensors, 16 KiB, are over Open MPI's shared-memory eager limit)
#   gloo: `llmtrain launch --nproc 2` (Gloo), pp 2
# Each run must end well before the communicator's timeout (120 s): a ring
# that waited would only end there.
# usage: test_mpi_train_ppv.sh path/to/llmtrain mpi|gloo
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
mode=${2:-mpi}
if [ "$mode" = gloo ]; then
  "$exe" features 2>/dev/null | grep -qw gloo || { echo "no gloo in this build"; exit 77; }
fi
. "$(dirname "$0")/mpi_lib.sh"
mk() { # file parallelism global steps
  cat > "$1" <<JSON
{"name": "tiny-ppv",
 "model": {"arch": "gpt2", "layers": 4, "hidden": 64, "heads": 4,
           "vocab": 320, "seq_len": 32},
 "batch": {"micro": 2, "global": $3},
 "parallelism": {$2},
 "optimizer": {"lr": 3e-3},
 "schedule": {"kind": "cosine", "warmup_steps": 2},
 "train": {"steps": $4, "seed": 5, "eval_interval": 3, "eval_batches": 2,
           "log_interval": 3, "threads": 1, "sample_tokens": 0},
 "data": {"train": "$tmp/corpus", "tokenizer": {"kind": "byte"}},
 "checkpoint": {"dir": "ckpt", "interval": 3, "async": false},
 "hardware": {"gpu": "cpu"},
 "metrics": {"jsonl": "metrics.jsonl"}}
JSON
}
v='"pp": 2, "virtual_stages": 2, "pp_schedule": "interleaved"'
# run NAME GLOBAL PARALLELISM LAUNCHER...: the pipeline run against one
# process on the same global batch
run() {
  name=$1 global=$2 par=$3
  shift 3
  mk "ref$global.json" '"tp": 1' "$global" 6
  [ -d "ref$global" ] || "$exe" train "ref$global.json" --out "ref$global" > "ref$global.log" 2>&1 ||
    { bad "one process (global $global)"; cat "ref$global.log"; }
  mk "$name.json" "$par" "$global" 6
  t0=$(date +%s)
  "$@" "$name.json" --out "$name" > "$name.log" 2>&1 && ok "$name: finished" ||
    { bad "$name: failed"; cat "$name.log"; return; }
  t1=$(date +%s)
  [ $((t1 - t0)) -lt 100 ] && ok "$name: in $((t1 - t0)) s (no wait for the timeout)" ||
    bad "$name: took $((t1 - t0)) s"
  # (p-1)/(v m+p-1) = 1/9: the run's pp lines are the interleaved schedule's
  [ "$(grep -c '"event":"pp".*"bubble_balanced":0.1111' "$name/metrics.jsonl")" = 6 ] &&
    ok "$name: a pp line per step, v 2 x m 4 (balanced bubble 1/9)" ||
    { bad "$name: no interleaved pp lines"; grep '"event":"pp"' "$name/metrics.jsonl"; }
  # stage 0 sends chunk 1's input gradients (4 a step) from pooled copies
  # (lib/train/pp_send.c): never more than the planner's count for the
  # transport (lib/plan/pp_pool.c: all 4 over Gloo, which cannot ask
  # whether a send is done; the schedule's bound, 2, over MPI), at least one
  grep '"event":"pp"' "$name/metrics.jsonl" |
    sed 's/.*"grad_copies":\([0-9]*\),"grad_copies_plan":\([0-9]*\).*/\1 \2/' > copies.txt
  if [ "$(wc -l < copies.txt)" = 6 ] &&
     awk -v g="$mode" '{ if ($1 < 1 || $1 > $2 || (g == "gloo" && $1 != $2) || $2 > 4) bad = 1 }
                       END { exit bad }' copies.txt; then
    ok "$name: gradient copies (run, plan) $(sort -u copies.txt | tr '\n' ';')"
  else
    bad "$name: gradient copies against the plan"; cat copies.txt
  fi
  ext "ref$global/metrics.jsonl" > a.txt
  ext "$name/metrics.jsonl" > b.txt
  [ "$(grep -c loss a.txt)" -ge 6 ] || bad "$name: reference has $(grep -c loss a.txt) losses"
  cmp_losses a.txt b.txt "$name: losses equal one process's (train and validation)"
}
gloo_launch() { "$exe" launch --nproc 2 --heartbeat-timeout 60 "$@"; }
if [ "$mode" = gloo ]; then
  LLMT_COMM_TIMEOUT_MS=120000 run gloo-pp2v2 8 "$v" gloo_launch
else
  run mpi-pp2v2 8 "$v" mpi_train 2
  run mpi-pp2v2-dp2 16 "$v, \"zero\": 1" mpi_train 4
  grep -q "tp 1 x pp 2 x dp 2 = 4 ranks (mpi), ZeRO-1" mpi-pp2v2-dp2.log &&
    ok "banner: tp 1 x pp 2 x dp 2 (mpi), ZeRO-1" || { bad "banner"; head -5 mpi-pp2v2-dp2.log; }
  run mpi-tp2-pp2v2-dp2 16 "\"tp\": 2, $v, \"zero\": 1" mpi_train 8
  grep -q "tp 2 x pp 2 x dp 2 = 8 ranks (mpi), ZeRO-1" mpi-tp2-pp2v2-dp2.log &&
    ok "banner: tp 2 x pp 2 x dp 2 (mpi), ZeRO-1" || { bad "banner"; head -5 mpi-tp2-pp2v2-dp2.log; }
fi
exit $fail
