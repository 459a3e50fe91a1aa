#!/bin/sh
# `mpirun -np 2 llmtrain train SPEC.json` with sequence parallelism
# (parallelism.sequence_parallel over tp 2: the residual stream and norms
# split by rows across two processes, MPI's all-gather and reduce-scatter)
# against one process on the same global batch: every training and
# validation loss within 1e-5 relative (plus the 1e-6 of the 6 decimals
# metrics.jsonl prints); the run also samples (generate pads its lengths
# to a multiple of tp).
# usage: test_mpi_train_sp.sh path/to/llmtrain
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
. "$(dirname "$0")/mpi_lib.sh"
mk() { # file tp sp
  mpi_spec "$1" tiny-sp '"arch": "llama", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2,
    "vocab": 320, "seq_len": 32' '"micro": 4, "global": 8' \
    "\"tp\": $2, \"sequence_parallel\": $3" 6 \
    '"eval_interval": 3, "eval_batches": 2, "log_interval": 3, "sample_tokens": 7'
}
mk ref.json 1 false
mk sp.json 2 true
"$exe" train ref.json --out ref > ref.log 2>&1 && ok "one process" || { bad "one process"; cat ref.log; }
mpi_train 2 sp.json --out sp > sp.log 2>&1 && ok "mpirun -np 2 (tp 2, sequence parallel)" ||
  { bad "mpirun -np 2"; cat sp.log; }
ext ref/metrics.jsonl > a.txt
ext sp/metrics.jsonl > b.txt
cmp_losses a.txt b.txt "losses equal one process's (train and validation)"
exit $fail
