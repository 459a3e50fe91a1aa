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
# each step's {"event":"moe"} line equal to one process's and counting
# the global batch (kept = 8 x 32 tokens x top_k 2 x 2 MoE layers); the
# step-6 parameters within cmp_params.py's bounds of one process's; the
# step-6 checkpoint resumed by one process: steps 7-8 equal the
# one-process run continued the same way. With PP 2: tp 2 x pp 2 (each
# pipeline stage's layers tensor parallel, micro-batches micro 2 x accum
# 4 through the pipeline) instead of tp 2 x dp 2.
# usage: test_mpi_train_moetp.sh path/to/llmtrain SP [PP]
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
here=$(cd "$(dirname "$0")" && pwd)
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
"$exe" train ref.json --out ref > ref.log 2>&1 && ok "one process" || { bad "one process"; cat ref.log; }
mpi_train 4 tp.json --out tp > tp.log 2>&1 && ok "mpirun -np 4 ($lay, sp $sp)" ||
  { bad "mpirun -np 4"; cat tp.log; }
grep -q "step .*/6 | loss .*| $lay" tp.log && ok "progress line shows the layout" ||
  bad "progress line"
ext ref/metrics.jsonl > a.txt
ext tp/metrics.jsonl > b.txt
cmp_losses a.txt b.txt "losses equal one process's (train and validation)"
python3 - tp/metrics.jsonl ref/metrics.jsonl <<'PY' && ok "expert counts of the global batch" || bad "expert counts"
import json, sys
def moe(p):
    return [l for l in map(json.loads, open(p)) if l.get("event") == "moe"]
tp, ref = moe(sys.argv[1]), moe(sys.argv[2])
want = 8 * 32 * 2 * 2  # sequences x tokens x top_k x MoE layers
bad = len(tp) != 6 or len(ref) != 6
for a, b in zip(tp, ref):
    bad |= sum(a["tokens_per_expert"]) != want or a["dropped"] != 0
    bad |= a["tokens_per_expert"] != b["tokens_per_expert"]
    bad |= abs(a["aux_loss"] - b["aux_loss"]) > 1e-5 * abs(b["aux_loss"]) + 1e-6
    print("step %d: kept %s aux %g (one process: %s, %g)" % (
        a["step"], a["tokens_per_expert"], a["aux_loss"], b["tokens_per_expert"], b["aux_loss"]))
sys.exit(1 if bad else 0)
PY
"$exe" ckpt export ref/ckpt --step 6 --out ref.st > export.log 2>&1 &&
  "$exe" ckpt export tp/ckpt --step 6 --out tp.st >> export.log 2>&1 &&
  ok "step-6 checkpoints exported" || { bad "export"; cat export.log; }
python3 "$here/cmp_params.py" ref.st tp.st && ok "step-6 parameters equal one process's" ||
  bad "step-6 parameters differ"
mk ref8.json 1 1 8
resume_one tp "the $lay checkpoint resumed by one process" "tp resume under one process"
exit $fail
