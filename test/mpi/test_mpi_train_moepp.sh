#!/bin/sh
# `mpirun -np 4 llmtrain train SPEC.json` with a Llama MoE under pipeline
# parallelism: pp 2 x dp 2 (ZeRO $2, 1F1B; with $3 = ep, experts split
# over ep 2 inside each stage's data parallel group), against one
# process on the same global batch (8 = micro 2 x accum 4 there, micro 2
# x accum 2 x dp 2 here: the capacity is per micro-batch, and the
# pipeline's micro-batches are the accumulation's): every training and
# validation loss within 1e-5 relative (plus the 1e-6 of the 6 decimals
# metrics.jsonl prints); the sampled text equal (capacity 0.75 binds:
# the pipeline's padded window routes its real rows alone); each
# step's {"event":"moe"} line (rank 0, stage 0: it holds layer 0 only, so
# the other stage's layer reached it over the pipeline group) equals one
# process's, counts and drops, with drops in some step; the step-6
# checkpoint resumed by one process (pp 2 -> pp 1): steps 7-8 equal the
# one-process run continued the same way.
# usage: test_mpi_train_moepp.sh path/to/llmtrain ZERO [ep]
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
zero=${2:-0}
ep=1
[ "$3" = ep ] && ep=2
. "$(dirname "$0")/mpi_lib.sh"
mk() { # file parallelism steps
  mpi_spec "$1" tiny-moe-pp '"arch": "llama", "layers": 2, "hidden": 32, "heads": 4,
    "vocab": 320, "seq_len": 32,
    "moe": {"experts": 4, "top_k": 2, "expert_ffn": 32, "capacity_factor": 0.75}' \
    '"micro": 2, "global": 8' "$2" "$3"
}
mk ref.json '"dp": 1' 6
mk pp.json "\"pp\": 2, \"dp\": 2, \"ep\": $ep, \"zero\": $zero, \"pp_schedule\": \"1f1b\"" 6
mpi_pair ref pp 4 "pp 2 x dp 2, ep $ep, MoE"
[ "$(grep -c '"loss"' pp/metrics.jsonl)" = 6 ] && ok "6 step lines" || bad "step lines"
mpi_pair_losses ref pp
# the sample: the pipeline's pass pads the window to a micro-batch, its
# MoE layers route the window's rows alone (pp_infer.c), so under this
# binding capacity it keeps the tokens one process keeps
mpi_pair_sample ref pp
# sequences x tokens x top_k x MoE layers
mpi_moe_counts pp ref $((8 * 32 * 2 * 2)) some 1 "expert counts of both stages' layers"
# the pp 2 x dp 2 checkpoint resumes in one process (pp 1): steps 7-8
mk ref8.json '"dp": 1' 8
resume_one pp "the pp 2 x dp 2 checkpoint resumed by one process" "pp resume under pp 1"
exit $fail
