#!/bin/sh
# `mpirun -np 4 llmtrain train SPEC.json` with a Llama MoE under context
# parallelism (issue 18), against one process on the same global batch (8
# = micro 2 x accum 4 there): $2 = dp: cp 2 x dp 2 with the experts split
# over ep 2 (ZeRO 1; each CP rank routes its own rows, the experts of a
# rank's EP group exchanged by all-to-all); $2 = pp: cp 2 x pp 2 (1F1B,
# each stage's CP pair), dropless. Under cp a rank's capacity is of its
# rows (doc/moe.md), so the capacity drops nothing: capacity_factor 2
# with 4 experts and top-2 (every expert takes every row of its rank), or
# dropless; no layout then changes a routing decision. Checks: the layout
# in the banner, the same sampled text, every training and validation
# loss within 1e-5 relative (plus the 1e-6 of the 6 decimals
# metrics.jsonl prints), each step's {"event":"moe"} line equal to one
# process's and counting the global batch (kept = 8 x 32 tokens x top_k 2
# x 2 MoE layers, none dropped, the aux loss within 1e-5), the step-6
# parameters (experts among them) within cmp_params.py's bounds of one
# process's, and the step-6 checkpoint resumed by one process (cp 2 ->
# cp 1): steps 7-8 equal the one-process run continued the same way.
# usage: test_mpi_train_moecp.sh path/to/llmtrain dp|pp
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
case "$2" in
dp)
  moe='"capacity_factor": 2.0, "shared_experts": 1'
  par='"cp": 2, "dp": 2, "ep": 2, "zero": 1'
  lay="tensor x context x data parallel: tp 1 x cp 2 x dp 2 (ep 2) = 4 ranks (mpi), ZeRO-1"
  ;;
pp)
  moe='"dropless": true'
  par='"cp": 2, "pp": 2, "pp_schedule": "1f1b"'
  lay="tensor x context x pipeline x data parallel: tp 1 x cp 2 x pp 2 x dp 1 = 4 ranks"
  ;;
*) echo "usage: $0 LLMTRAIN dp|pp" >&2; exit 2 ;;
esac
. "$(dirname "$0")/mpi_lib.sh"
mk() { # file parallelism steps
  mpi_spec "$1" tiny-moecp "\"arch\": \"llama\", \"layers\": 2, \"hidden\": 32, \"heads\": 4,
    \"vocab\": 320, \"seq_len\": 32, \"moe\": {\"experts\": 4, \"top_k\": 2,
    \"expert_ffn\": 32, $moe}" '"micro": 2, "global": 8' "$2" "$3"
}
mk ref.json '"dp": 1' 6
mk cp.json "$par" 6
mpi_vs_one "cp 2 x $2" ref cp 4 "$par" "$lay"
# sequences x tokens x top_k x MoE layers, none dropped
mpi_moe_counts cp ref $((8 * 32 * 2 * 2)) none 1 "expert counts of the global batch"
mpi_pair_params ref cp
mk ref8.json '"dp": 1' 8
resume_one cp "the cp 2 x $2 checkpoint resumed by one process" "cp resume under one process"
exit $fail
