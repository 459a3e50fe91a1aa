#!/bin/sh
# `mpirun -np 4 llmtrain train SPEC.json` with context parallelism composed
# with pipeline parallelism: cp 2 x pp 2 (1F1B; ranks 0, 1 the first
# stage's CP pair, 2, 3 the last's), MPI's send/recv carrying both the K/V
# exchange inside each stage and the activations between stages, against
# one process on the same global batch: GPT-2 (learned positions by chunk,
# tied head) with the ring exchange and Llama kv 2 (RoPE at global
# positions) with the all-gather; every training and validation loss
# within 1e-5 relative (plus the 1e-6 of the 6 decimals metrics.jsonl
# prints), the same sampled text (the window's last position on one CP
# rank of the last stage), the layout in the banner; the GPT-2 run's step-6
# checkpoint resumed by one process with the uninterrupted losses.
# usage: test_mpi_train_cppp.sh path/to/llmtrain
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
. "$(dirname "$0")/mpi_lib.sh"
mk() { # file model parallelism steps
  mpi_spec "$1" tiny-cppp "$2, \"vocab\": 257, \"seq_len\": 32" '"micro": 2, "global": 8' \
    "$3" "$4" '"eval_interval": 3, "eval_batches": 2, "log_interval": 3, "sample_tokens": 7' \
    '' '"interval": 6, "async": false'
}
gpt2='"arch": "gpt2", "layers": 2, "hidden": 64, "heads": 4'
llama='"arch": "llama", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2'
for run in "gpt2 ring" "llama allgather"; do
  set -- $run
  eval model=\$$1
  mk ref-$1.json "$model" '"tp": 1' 6
  mk cppp-$1.json "$model" "\"cp\": 2, \"pp\": 2, \"cp_variant\": \"$2\"" 6
  mpi_vs_one $1 ref-$1 cppp-$1 4 "cp 2 x pp 2, $2" \
    "tensor x context x pipeline x data parallel: tp 1 x cp 2 x pp 2 x dp 1 = 4 ranks"
done
# the GPT-2 cp 2 x pp 2 checkpoint resumes in one process: steps 7-8
# against the one-process run continued the same way
mk ref8.json "$gpt2" '"tp": 1' 8
mv ref-gpt2 ref && mv cppp-gpt2 cppp || exit 1
resume_one cppp "the cp 2 x pp 2 checkpoint resumed by one process" \
  "one process could not resume the cp 2 x pp 2 checkpoint"
exit $fail
