#!/bin/sh
# `mpirun -np 2 llmtrain train SPEC.json` (data parallel, ZeRO stage $2)
# against one process on the same global batch (grad_accum doubled): the
# same training and validation losses step by step (to 2e-5), rank 1 in its
# own run directory, everyone exits 0.
# usage: test_mpi_train.sh path/to/llmtrain ZERO
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
zero=${2:-0}
. "$(dirname "$0")/mpi_lib.sh"
mk() { # file dp accum
  # ZeRO shards over dp ranks: llmt_job refuses a stage on one rank (it
  # would change nothing), so the one-process reference runs ZeRO-0
  z=$zero; [ "$2" -gt 1 ] || z=0
  mpi_spec "$1" tiny-dp '"arch": "gpt2", "layers": 2, "hidden": 64, "heads": 4, "vocab": 512, "seq_len": 32' \
    "\"micro\": 4, \"grad_accum\": $3" "\"dp\": $2, \"zero\": $z" 6 "" \
    '{"kind": "bpe", "vocab_size": 512}'
}
mk ref.json 1 2
mk dp.json 2 1
"$exe" train ref.json --out ref > ref.log 2>&1 && ok "one process" || { bad "one process"; cat ref.log; }
OMPI_MCA_btl_vader_single_copy_mechanism=none LLMT_COMM_TIMEOUT_MS=60000 \
  mpirun -np 2 --oversubscribe --allow-run-as-root -x LLMT_COMM_TIMEOUT_MS \
  "$exe" train dp.json --out dp > dp.log 2>&1 && ok "mpirun -np 2" || { bad "mpirun -np 2"; cat dp.log; }
grep -q "data parallel: 2 ranks (mpi), ZeRO-$zero" dp.log && ok "banner" || bad "no data-parallel banner"
[ -f dp/rank-1/metrics.jsonl ] && ok "rank 1 has its own run directory" || bad "no dp/rank-1"
[ "$(grep -c '"loss"' dp/metrics.jsonl)" = 6 ] && ok "6 step lines" || bad "step lines"
ls dp/ckpt | grep -q '6$' && ok "checkpoint at step 6" || bad "no step-6 checkpoint: $(ls dp/ckpt)"
# compare every loss and val_loss of the two runs
ext() { sed -n 's/.*"step":\([0-9]*\),"\(loss\|val_loss\)":\([-0-9.e]*\).*/\1 \2 \3/p' "$1"; }
ext ref/metrics.jsonl > a.txt
ext dp/metrics.jsonl > b.txt
if [ -s a.txt ] && [ "$(wc -l < a.txt)" = "$(wc -l < b.txt)" ] &&
   paste a.txt b.txt | awk '{d = $3 - $6; if (d < 0) d = -d; if ($1 != $4 || $2 != $5 || d > 2e-5) bad = 1;
                             if (d > m) m = d} END {printf "max |loss diff| %.2g\n", m; exit bad}'; then
  ok "losses equal one process's (train and validation)"
else
  bad "losses differ"; paste a.txt b.txt
fi
exit $fail
