#!/bin/sh
# `mpirun -np 2 llmtrain train` with an interleaved pipeline (pp 2,
# virtual_stages 2) is refused at creation, naming parallelism.pp_schedule,
# instead of deadlocking: interleaving's wrapped-round exchanges wait on
# each other when sends block (MPI's rendezvous); the schedule runs with
# in-process ranks only for now (test job-pp). The refusal must come well
# before the communicator's timeout (set to 120 s here).
# usage: test_mpi_ppv_refused.sh path/to/llmtrain
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=${LLMT_SOURCE_ROOT:?}
command -v mpirun >/dev/null 2>&1 || { echo "no mpirun: skip"; exit 77; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
mkdir corpus && cp "$src"/doc/*.md corpus/ || exit 1
cat > v.json <<JSON
{"name": "tiny-ppv",
 "model": {"arch": "gpt2", "layers": 4, "hidden": 64, "heads": 4,
           "vocab": 320, "seq_len": 32},
 "batch": {"micro": 2, "global": 8},
 "parallelism": {"pp": 2, "virtual_stages": 2},
 "train": {"steps": 2, "seed": 5, "threads": 1},
 "data": {"train": "$tmp/corpus", "tokenizer": {"kind": "byte"}},
 "checkpoint": {"dir": "ckpt", "interval": 2, "async": false},
 "hardware": {"gpu": "cpu"}}
JSON
t0=$(date +%s)
OMPI_MCA_btl_vader_single_copy_mechanism=none LLMT_COMM_TIMEOUT_MS=120000 \
  timeout 300 mpirun -np 2 --oversubscribe --allow-run-as-root -x LLMT_COMM_TIMEOUT_MS \
  "$exe" train v.json --out v > v.log 2>&1
rc=$?
t1=$(date +%s)
fail=0
[ "$rc" != 0 ] && echo "ok   refused (exit $rc)" || { echo "FAIL accepted"; fail=1; }
grep -q "parallelism.pp_schedule: interleaved (virtual_stages 2) over processes" v.log &&
  echo "ok   the message names parallelism.pp_schedule" || { echo "FAIL message"; fail=1; }
[ $((t1 - t0)) -lt 100 ] && echo "ok   in $((t1 - t0)) s (no timeout)" ||
  { echo "FAIL took $((t1 - t0)) s"; fail=1; }
[ "$fail" = 0 ] || cat v.log
exit $fail
