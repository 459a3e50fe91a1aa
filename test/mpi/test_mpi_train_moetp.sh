#!/bin/sh
# `mpirun -np 4 llmtrain train SPEC.json` with a Llama MoE under tensor
# parallelism: tp 2 x dp 2 (ZeRO 1), sequence parallel when $2 is 1 (each
# TP rank then routes its own rows: the router statistics and the MoE
# gradients summed over the TP group), against one process on the same
# global batch (8 = micro 2 x accum 4 there, micro 2 x accum 2 x dp 2
# here). A capacity that drops nothing (capacity_factor 2 with 4 experts
# and top-2: every expert takes every row of its rank), so the layout
# changes no routing decision: every training and validation loss within
# 1e-5 relative (plus the 1e-6 of the 6 decimals metrics.jsonl prints),
# the same sampled text, each step's {"event":"moe"} line equal to one
# process's and counting the global batch (kept = 8 x 32 tokens x top_k
# 2 x 2 MoE layers); the
# step-6 parameters within cmp_params.py's bounds of one process's; the
# step-6 checkpoint resumed by one process: steps 7-8 equal the
# one-process run continued the same way. With PP 2: tp 2 x pp 2 (each
# pipeline stage's layers tensor parallel, micro-batches micro 2 x accum
# 4 through the pipeline) instead of tp 2 x dp 2.
# usage: test_mpi_train_moetp.sh path/to/llmtrain SP [PP]
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
sp=${2:-0}
pp=${3:-1}
dp=$(( pp > 1 ? 1 : 2 ))
lay="tp 2 x dp 2"
[ "$pp" -gt 1 ] && lay="tp 2 x pp $pp"
spj=false
[ "$sp" = 1 ] && spj=true
. "$(dirname "$0")/mpi_lib.sh"
mk() { # file dp tp steps [pp]
  mpi_spec "$1" tiny-moetp '"arch": "llama", "layers": 2, "hidden": 32, "heads": 4, "vocab": 320,
    "seq_len": 32, "moe": {"experts": 4, "top_k": 2, "expert_ffn": 32, "capacity_factor": 2.0,
    "shared_experts": 1}' \
    "\"micro\": 2, \"global\": 8" "\"dp\": $2, \"tp\": $3, \"zero\": $(( $2 > 1 ? 1 : 0 )),
    \"sequence_parallel\": $([ "$3" -gt 1 ] && echo $spj || echo false), \"pp\": ${5:-1}" "$4"
}
mk ref.json 1 1 6
mk tp.json $dp 2 6 $pp
mpi_pair ref tp 4 "$lay, sp $sp"
grep -q "step .*/6 | loss .*| $lay" tp.log && ok "progress line shows the layout" ||
  bad "progress line"
mpi_pair_losses ref tp
mpi_pair_sample ref tp
# sequences x tokens x top_k x MoE layers, none dropped
mpi_moe_counts tp ref $((8 * 32 * 2 * 2)) none 1 "expert counts of the global batch"
mpi_pair_params ref tp
mk ref8.json 1 1 8
resume_one tp "the $lay checkpoint resumed by one process" "tp resume under one process"
exit $fail
