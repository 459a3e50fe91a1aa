#!/bin/sh
# `mpirun -np N llmtrain train SPEC.json` on train.device emulated (the GPU
# engine's arithmetic on the CPU, its buffers staged through host copies
# as on a GPU: doc/job-spec.md) against one emulated process on the same
# global batch (8 sequences), a small Llama with grouped-query attention:
#   tp 2 x dp 2 ZeRO-1 with sequence parallelism (np 4), pp 2 x dp 2 (np 4),
#   cp 2 x dp 2 (np 4), tp 2 x pp 2 x dp 2 (np 8), and MoE layers (4
#   experts, top-2) under ep 2 x dp 2 (np 2: ep inside dp).
# Every training and validation loss within 2^-9 relative (+1e-6 for the 6
# decimals metrics.jsonl prints): the bf16 bound of the device engine's
# layout tests (test/train/test_device_tpdp.c: a layout changes the order
# of fp32 sums, each op's output then rounded to bf16). The tp 2 x dp 2
# checkpoint of step 6 then resumes in one emulated process for steps 7-8,
# against the one process continued the same way.
# usage: test_mpi_train_emulated.sh path/to/llmtrain
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
. "$(dirname "$0")/mpi_lib.sh"
bound=0.001953125
llama='"arch": "llama", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "vocab": 320, "seq_len": 32'
moe=', "moe": {"experts": 4, "top_k": 2, "expert_ffn": 48, "capacity_factor": 1.25}'
tr='"device": "emulated", "eval_interval": 3, "eval_batches": 2, "log_interval": 3, "sample_tokens": 0'
mk() { # file model parallelism steps
  mpi_spec "$1" tiny-emulated "$2" '"micro": 2, "global": 8' "$3" "$4" "$tr"
}
# near A B WHAT: cmp_losses with the bf16 bound
near() {
  if [ -s "$1" ] && [ "$(wc -l < "$1")" = "$(wc -l < "$2")" ] &&
     paste "$1" "$2" | awk -v b=$bound '{d = $3 - $6; if (d < 0) d = -d; r = d / ($3 < 0 ? -$3 : $3);
                             if ($1 != $4 || $2 != $5 || d > b * ($3 < 0 ? -$3 : $3) + 1e-6) bad = 1;
                             if (r > m) m = r} END {printf "max relative loss diff %.2g\n", m; exit bad}'; then
    ok "$3"
  else
    bad "$3"; paste "$1" "$2"
  fi
}
mk one.json "$llama" '"tp": 1' 6
mk moe1.json "$llama$moe" '"tp": 1' 6
"$exe" train one.json --out one > one.log 2>&1 && ok "one emulated process" ||
  { bad "one process"; cat one.log; }
grep -q "on the CPU (bf16, the GPU engine emulated)" one.log && ok "the banner names the engine" ||
  bad "no emulated engine in the banner"
"$exe" train moe1.json --out moe1 > moe1.log 2>&1 && ok "one emulated process, MoE" ||
  { bad "one process, MoE"; cat moe1.log; }
ext one/metrics.jsonl > one.loss
ext moe1/metrics.jsonl > moe1.loss
# run NAME NP REF MODEL PARALLELISM LAYOUT
run() {
  mk "$1.json" "$4" "$5" 6
  mpi_train "$2" "$1.json" --out "$1" > "$1.log" 2>&1 && ok "$1: mpirun -np $2" ||
    { bad "$1: mpirun -np $2"; tail -30 "$1.log"; }
  grep -qF "$6" "$1.log" && ok "$1: the layout in the log" || bad "$1: no '$6' in the log"
  ext "$1/metrics.jsonl" > "$1.loss"
  near "$3.loss" "$1.loss" "$1: losses equal one emulated process's (train and validation)"
}
run tpdp 4 one "$llama" '"tp": 2, "dp": 2, "zero": 1, "sequence_parallel": true' "tp 2 x dp 2"
run ppdp 4 one "$llama" '"pp": 2, "dp": 2' "pp 2 x dp 2"
run cpdp 4 one "$llama" '"cp": 2, "dp": 2' "cp 2 x dp 2"
run tpppdp 8 one "$llama" '"tp": 2, "pp": 2, "dp": 2' "tp 2 x pp 2 x dp 2"
run moeep 2 moe1 "$llama$moe" '"dp": 2, "ep": 2' "(ep 2)"
# the tp 2 x dp 2 checkpoint of step 6 resumed by one emulated process
mk one8.json "$llama" '"tp": 1' 8
cp -r one one8 && cp -r tpdp tpdp8 || exit 1
"$exe" train one8.json --out one8 --resume > one8.log 2>&1 && ok "one process, steps 7-8" ||
  { bad "one process resume"; cat one8.log; }
"$exe" train one8.json --out tpdp8 --resume > tpdp8.log 2>&1 &&
  ok "the tp 2 x dp 2 checkpoint resumed by one emulated process" ||
  { bad "tp 2 x dp 2 resume under tp 1"; cat tpdp8.log; }
ext one8/metrics.jsonl | awk '$1 > 6' > c.txt
ext tpdp8/metrics.jsonl | awk '$1 > 6' > d.txt
near c.txt d.txt "resumed losses equal"
exit $fail
