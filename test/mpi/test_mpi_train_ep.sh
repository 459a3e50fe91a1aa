#!/bin/sh
# `mpirun -np 4 llmtrain train SPEC.json` with a Llama MoE under expert
# parallelism: ep 2 inside dp 4 (each expert on 2 of the 4 ranks), ZeRO
# stage $2, against one process on the same global batch (8 = micro 2 x
# accum 4 there, micro 2 x accum 1 x dp 4 here: the capacity is per
# micro-batch, so the micro-batches must be the same): every training and
# validation loss within 1e-5 relative (plus the 1e-6 of the 6 decimals
# metrics.jsonl prints), the same sampled text; each step's
# {"event":"moe"} line counts the global batch's routed choices (kept +
# dropped = 8 x 32 tokens x top_k 2 x 2 MoE layers, summed over the data
# parallel group) with drops; the
# step-6 checkpoint resumed by one process (ep 2 -> ep 1): steps 7-8 equal
# the one-process run continued the same way; the step-6 parameters
# (exported; the expert tensors [4 x 32, 32] among them) within
# cmp_params.py's bounds of one process's.
# usage: test_mpi_train_ep.sh path/to/llmtrain ZERO
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
zero=${2:-0}
. "$(dirname "$0")/mpi_lib.sh"
mk() { # file micro dp ep zero steps
  mpi_spec "$1" tiny-ep '"arch": "llama", "layers": 2, "hidden": 32, "heads": 4, "vocab": 320,
    "seq_len": 32, "moe": {"experts": 4, "top_k": 2, "expert_ffn": 32, "capacity_factor": 0.75}' \
    "\"micro\": $2, \"global\": 8" "\"dp\": $3, \"ep\": $4, \"zero\": $5" "$6"
}
mk ref.json 2 1 1 0 6
mk ep.json 2 4 2 "$zero" 6
mpi_pair ref ep 4 "dp 4, ep 2"
grep -q "data parallel: 4 ranks (mpi), ZeRO-$zero, experts split over ep 2" ep.log &&
  ok "the banner names ep" || bad "no ep in the banner"
grep -q "step .*/6 | loss .*| tp 1 x dp 4 (ep 2)" ep.log && ok "progress line shows the layout" ||
  bad "progress line"
[ "$(grep -c '"loss"' ep/metrics.jsonl)" = 6 ] && ok "6 step lines" || bad "step lines"
mpi_pair_losses ref ep
mpi_pair_sample ref ep
# sequences x tokens x top_k x MoE layers, with drops
mpi_moe_counts ep ref $((8 * 32 * 2 * 2)) some 0 "expert counts of the global batch"
# the step-6 parameters (expert tensors among them) against one process's
mpi_pair_params ref ep
python3 - ep.st <<'PY' && ok "the export holds the [E*F, C] expert tensors" || bad "expert tensors"
import json, struct, sys
b = open(sys.argv[1], "rb").read()
h = json.loads(b[8:8 + struct.unpack_from("<Q", b, 0)[0]])
sys.exit(0 if h.get("param/layers.0.feed_forward.experts.w1.weight", {}).get("shape") == [128, 32] else 1)
PY
# the ep 2 checkpoint resumes in one process (ep 1): steps 7-8
mk ref8.json 2 1 1 0 8
resume_one ep "the ep 2 checkpoint resumed by one process" "ep resume under ep 1"
exit $fail
