#!/bin/sh
# `mpirun -np 4 llmtrain train SPEC.json` with context parallelism
# composed with sequence parallelism: cp 2 x tp 2, sequence_parallel on
# (each CP rank's rows of every sequence split again over its TP pair for
# the norms and residuals, MPI's all-gather and reduce-scatter; K/V over
# the CP pair), against one process on the same global batch: GPT-2
# (learned positions by chunk) with the ring exchange and Llama kv 2
# (RoPE at global positions) with the all-gather; every training and
# validation loss within 1e-5 relative (plus the 1e-6 of the 6 decimals
# metrics.jsonl prints), and the same sampled text.
# usage: test_mpi_train_cpsp.sh path/to/llmtrain
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
. "$(dirname "$0")/mpi_lib.sh"
mk() { # file model parallelism
  mpi_spec "$1" tiny-cpsp "$2, \"vocab\": 257, \"seq_len\": 32" '"micro": 4, "global": 8' \
    "$3" 6 '"eval_interval": 3, "eval_batches": 2, "log_interval": 3, "sample_tokens": 7' \
    '' '"interval": 6, "async": false'
}
gpt2='"arch": "gpt2", "layers": 2, "hidden": 64, "heads": 4'
llama='"arch": "llama", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2'
for run in "gpt2 ring" "llama allgather"; do
  set -- $run
  eval model=\$$1
  mk ref-$1.json "$model" '"tp": 1'
  mk cpsp-$1.json "$model" "\"cp\": 2, \"tp\": 2, \"sequence_parallel\": true, \"cp_variant\": \"$2\""
  mpi_vs_one $1 ref-$1 cpsp-$1 4 "cp 2 x tp 2, sequence parallel, $2" "tp 2 x cp 2 x dp 1"
done
exit $fail
