#!/bin/sh
# One case of issue 16's mpirun matrix: `mpirun -np NP llmtrain train SPEC`
# with tp x dp (dp = NP / tp), ZeRO and sequence parallelism against one
# process on the same spec, seed and global batch (8 sequences: micro 2 x
# grad_accum 8/dp; micro is the same everywhere so the validation set is
# too). Every training loss of the 10 AdamW steps and every validation loss
# equal the one-process run's within 1e-5 relative, plus the 1e-6 of the 6
# decimals metrics.jsonl prints; the final parameters (the step-10
# checkpoints exported to safetensors) within test_device_tpdp.c's bounds,
# checked by cmp_params.py: relative L2 1e-5, each element within 1e-5
# except at most 1 in 10^4 (within 1e-4: an element whose gradient is
# within rounding of zero gets an AdamW step those ulps decide). The
# script prints the worst differences and each run's seconds.
#
# With resume=1 the run (NP ranks) checkpoints at step 5; copies without
# the step-10 checkpoint resume at step 5 under mpirun with tp 2 x dp 1
# (np 2), tp 1 x dp 4 ZeRO-3 and tp 4 x dp 1 (np 4), and under one process
# (tp 1) (issue 16's resharding list): their losses of steps 6..10,
# training and validation, and their final parameters equal the
# uninterrupted run's within the same bounds (the optimizer moments and
# the data cursor resharded).
#
# usage: test_mpi_matrix.sh path/to/llmtrain np=N tp=T [zero=Z] [sp=0|1]
#          [arch=gpt2|llama] [heads=H] [kv=K] [resume=1]
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
shift
np=1 tp=1 zero=0 sp=0 arch=gpt2 heads=4 kv= resume=0
for a in "$@"; do
  case $a in
    np=* | tp=* | zero=* | sp=* | arch=* | heads=* | kv=* | resume=*) eval "${a%%=*}=\${a#*=}" ;;
    *) echo "test_mpi_matrix.sh: unknown argument '$a'"; exit 2 ;;
  esac
done
command -v mpirun >/dev/null 2>&1 || { echo "no mpirun: skip"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "no python3 (cmp_params.py): skip"; exit 77; }
here=$(cd "$(dirname "$0")" && pwd)
[ $((np % tp)) = 0 ] || { echo "np $np is not a multiple of tp $tp"; exit 2; }
dp=$((np / tp))
[ $((8 % dp)) = 0 ] || { echo "dp $dp does not divide the global batch 8"; exit 2; }
. "$(dirname "$0")/../run_lib.sh"
kvkey=
[ -n "$kv" ] && kvkey=", \"kv_heads\": $kv"
[ "$sp" = 1 ] && spv=true || spv=false
mk() { # file tp zero sp
  cat > "$1" <<JSON
{"name": "mpi-matrix",
 "model": {"arch": "$arch", "layers": 2, "hidden": 64, "heads": $heads$kvkey,
           "vocab": 320, "seq_len": 32},
 "batch": {"micro": 2, "global": 8},
 "parallelism": {"tp": $2, "zero": $3, "sequence_parallel": $4},
 "optimizer": {"lr": 3e-3},
 "schedule": {"kind": "cosine", "warmup_steps": 2},
 "train": {"steps": 10, "seed": 5, "eval_interval": 5, "eval_batches": 2,
           "log_interval": 5, "threads": 1, "sample_tokens": 0},
 "data": {"train": "$tmp/corpus", "tokenizer": {"kind": "byte"}},
 "checkpoint": {"dir": "ckpt", "interval": 5, "async": false},
 "hardware": {"gpu": "cpu"},
 "metrics": {"jsonl": "metrics.jsonl"}}
JSON
}
mpi() { # np args...
  n=$1; shift
  OMPI_MCA_btl_vader_single_copy_mechanism=none LLMT_COMM_TIMEOUT_MS=120000 \
    mpirun -np "$n" --oversubscribe --allow-run-as-root -x LLMT_COMM_TIMEOUT_MS "$@"
}
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}'; }
# step, kind, loss of metrics.jsonl after its last resume event (a resumed
# run appends its retrained steps to the first attempt's lines)
ext() {
  awk '/"event":"resume"/ {n = 0; delete l} {l[++n] = $0} END {for (i = 1; i <= n; i++) print l[i]}' "$1" |
    sed -n 's/.*"step":\([0-9]*\),"\(loss\|val_loss\)":\([-0-9.e]*\).*/\1 \2 \3/p'
}
# compare FILE_A FILE_B WHAT: same steps and kinds, |a-b| <= 1e-5 |a| + 1e-6
compare() {
  if [ -s "$1" ] && [ "$(wc -l < "$1")" = "$(wc -l < "$2")" ] &&
     paste "$1" "$2" | awk '{d = $3 - $6; if (d < 0) d = -d; a = $3 < 0 ? -$3 : $3;
                            if ($1 != $4 || $2 != $5 || d > 1e-5 * a + 1e-6) bad = 1;
                            if (d / a > m) m = d / a}
                            END {printf "%s: max relative loss diff %.2g\n", w, m; exit bad}' w="$3"; then
    ok "$3: losses equal the reference's (train and validation)"
  else
    bad "$3: losses differ"; paste "$1" "$2"
  fi
}
layout="tp $tp x dp $dp = $np ranks (mpi), ZeRO-$zero"
# ZeRO needs dp > 1 (llmt_job refuses a stage that would change nothing)
# and sequence parallelism tp > 1, so the references run neither.
mk ref.json 1 0 false
mk run.json "$tp" "$zero" "$spv"
t=$(now)
"$exe" train ref.json --out ref > ref.log 2>&1 && ok "one process (${arch}, heads $heads, kv ${kv:-$heads}) $(secs "$t") s" ||
  { bad "one process"; cat ref.log; }
t=$(now)
mpi "$np" "$exe" train run.json --out run > run.log 2>&1 &&
  ok "mpirun -np $np: $layout, sequence parallel $spv: $(secs "$t") s" || { bad "mpirun -np $np"; cat run.log; }
grep -q "tensor x data parallel: $layout" run.log && ok "banner" ||
  { bad "no '$layout' banner"; grep -i parallel run.log; }
[ "$(grep -c '"loss"' run/metrics.jsonl)" = 10 ] && ok "10 step lines" || bad "step lines"
[ "$(grep -c '"val_loss"' run/metrics.jsonl)" = 3 ] && ok "3 validation lines (steps 0, 5, 10)" || bad "validation lines"
ext ref/metrics.jsonl > a.txt
ext run/metrics.jsonl > b.txt
compare a.txt b.txt "np $np $arch tp $tp dp $dp zero $zero sp $sp"
# the final parameters: both step-10 checkpoints exported to safetensors
"$exe" ckpt export ref/ckpt --step 10 --out ref.st > export.log 2>&1 &&
  "$exe" ckpt export run/ckpt --step 10 --out run.st >> export.log 2>&1 &&
  ok "step-10 checkpoints exported" || { bad "export"; cat export.log; }
python3 "$here/cmp_params.py" ref.st run.st && ok "final parameters equal the reference's" ||
  bad "final parameters differ"
[ "$resume" = 1 ] || exit $fail

# Resume the step-5 checkpoint under other layouts: name np tp zero
# (sequence parallelism as the run's where tp > 1).
ls run/ckpt | grep -q 'step-0*5$' && ok "checkpoint at step 5" || bad "no step-5 checkpoint: $(ls run/ckpt)"
ext run/metrics.jsonl | awk '$1 > 5' > c.txt
[ "$(wc -l < c.txt)" = 6 ] || bad "the uninterrupted run has $(wc -l < c.txt) lines after step 5, not 6"
for target in "tp2-dp1 2 2 0" "tp1-dp4-zero3 4 1 3" "tp4-dp1 4 4 0" "one-process 1 1 0"; do
  set -- $target
  k=$1 n=$2 t2=$3 z2=$4 s2=$spv
  [ "$t2" -gt 1 ] || s2=false
  cp -r run "$k" && rm -rf "$k"/ckpt/step-000000000010 || exit 1
  mk "$k.json" "$t2" "$z2" "$s2"
  t=$(now)
  if [ "$n" = 1 ]; then
    "$exe" train "$k.json" --out "$k" --resume > "$k.log" 2>&1
  else
    mpi "$n" "$exe" train "$k.json" --out "$k" --resume > "$k.log" 2>&1
  fi && ok "$k (np $n) --resume: $(secs "$t") s" || { bad "$k --resume"; cat "$k.log"; }
  grep -q "resumed from .* at step 5" "$k.log" && ok "$k resumed at step 5" || bad "$k did not resume at step 5"
  ext "$k/metrics.jsonl" | awk '$1 > 5' > d.txt
  compare c.txt d.txt "$k resumed from np $np tp $tp dp $dp zero $zero"
  "$exe" ckpt export "$k/ckpt" --step 10 --out "$k.st" > export.log 2>&1 || { bad "$k export"; cat export.log; }
  python3 "$here/cmp_params.py" run.st "$k.st" && ok "$k: final parameters equal the uninterrupted run's" ||
    bad "$k: final parameters differ"
done
exit $fail
