#!/bin/sh
# Deep models under `mpirun -np N llmtrain train SPEC.json`: every other
# layout test trains 2 layers, so a limit that grows with the depth went
# unseen (the device sumsq op took at most 64 arrays, one per gradient
# norm run a rank holds: GPT-2 at tp 2 failed its first step from 4
# layers, fixed in 07d8671). Here a narrow Llama (or GPT-2) of LAYERS
# layers (default 24: 170 and 219 norm runs on the tp 2 ranks, past the
# usual 64 and 128 caps) trains 4 steps in one process, then under LAYOUT
# for 2 steps and resumed from its step-2 checkpoint for steps 3-4; its
# step-2 checkpoint is also resumed by one process for steps 3-4. Every loss
# within the engine's bound of the one process's straight run: 2^-9
# relative on train.device emulated (bf16, as test_mpi_train_emulated.sh;
# measured: at most 4.2e-4, fp8 tp 2), 5e-5 on cpu (fp32: a TP layout
# reorders the sums of all 24 layers: measured 6.5e-6, too near the
# 1e-5 of the 2-layer tests' cmp_losses), + 1e-6 for the 6 decimals.
# DEVICE: emulated | cpu. LAYOUT: tp-sp (tp 2, sequence parallel, np 2),
# pp4v2 (pp 4 x virtual_stages 2, np 4), zero3 (dp 2 ZeRO-3, np 2),
# tpppdp (tp 2 x pp 2 x dp 2, np 8), ep (4 experts, dp 2 x ep 2, np 2),
# fp8-tp (fp8 GEMMs, tp 2 with sequence parallelism, np 2; emulated only),
# fp8-ep (fp8 GEMMs with MoE experts padded to 16 rows, dp 2 x ep 2, np 2;
# emulated only).
# usage: test_mpi_train_deep.sh path/to/llmtrain DEVICE LAYOUT [LAYERS]
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
dev=$2 lay=$3 layers=${4:-24}
case $dev in
  emulated) bound=0.001953125 ;;
  cpu) bound=0.00005 ;;
  *) echo "usage: $0 llmtrain emulated|cpu LAYOUT [LAYERS]"; exit 2 ;;
esac
arch=llama moe= prec= np=2
case $lay in
  tp-sp) par='"tp": 2, "sequence_parallel": true' ;;
  pp4v2) par='"pp": 4, "virtual_stages": 2' np=4 ;;
  zero3) par='"dp": 2, "zero": 3' arch=gpt2 ;;
  tpppdp) par='"tp": 2, "pp": 2, "dp": 2' np=8 ;;
  ep) par='"dp": 2, "ep": 2' moe=', "moe": {"experts": 4, "top_k": 2, "expert_ffn": 48}' ;;
  fp8-tp) par='"tp": 2, "sequence_parallel": true' prec='"precision": {"gemm": "fp8"},' ;;
  fp8-ep) par='"dp": 2, "ep": 2' prec='"precision": {"gemm": "fp8"},'
    moe=', "moe": {"experts": 4, "top_k": 2, "expert_ffn": 48}' ;;
  *) echo "unknown layout '$lay'"; exit 2 ;;
esac
[ -z "$prec" ] || [ "$dev" = emulated ] || { echo "fp8 GEMMs need train.device emulated"; exit 2; }
. "$(dirname "$0")/mpi_lib.sh"
kv=; [ $arch = llama ] && kv=', "kv_heads": 2'
model="\"arch\": \"$arch\", \"layers\": $layers, \"hidden\": 64, \"heads\": 4$kv, \"vocab\": 320, \"seq_len\": 32$moe"
mk() { # file parallelism steps: mpi_spec's job with precision.gemm
  mpi_spec "$1" deep "$model" '"micro": 2, "global": 8' "$2" "$3" \
    "\"device\": \"$dev\", \"eval_interval\": 0, \"log_interval\": 1, \"sample_tokens\": 0" \
    '' '"interval": 2, "async": false'
  [ -z "$prec" ] || sed -i "s/^ \"batch\"/ $prec\n \"batch\"/" "$1"
}
# near A B WHAT: the same steps, each loss within the bound
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
mk one.json '"tp": 1' 4
mk run2.json "$par" 2
mk run4.json "$par" 4
"$exe" train one.json --out one > one.log 2>&1 && ok "one process, $layers layers, 4 steps" ||
  { bad "one process"; tail -20 one.log; exit 1; }
ext one/metrics.jsonl > one.loss
[ "$(wc -l < one.loss)" = 4 ] || { bad "one process logged $(wc -l < one.loss) losses, not 4"; exit 1; }
mpi_train $np run2.json --out run > run.log 2>&1 && ok "$lay: mpirun -np $np, steps 1-2" ||
  { bad "$lay: mpirun -np $np, steps 1-2"; tail -30 run.log; }
[ -d run/ckpt/step-000000000002 ] && ok "$lay: its step-2 checkpoint" ||
  bad "$lay: no step-2 checkpoint"
cp -r run solo || exit 1
mpi_train $np run4.json --out run --resume > run4.log 2>&1 &&
  grep -q "resumed from run/ckpt at step 2" run4.log && ok "$lay: mpirun -np $np resumed step 2, steps 3-4" ||
  { bad "$lay: resume under the layout"; tail -30 run4.log; }
ext run/metrics.jsonl | sort -n -k1,1 -u > run.loss
near one.loss run.loss "$lay: steps 1-4 (3-4 resumed) equal one process's"
# the layout's step-2 checkpoint resumed by one process
"$exe" train one.json --out solo --resume > solo.log 2>&1 &&
  grep -q "resumed from solo/ckpt at step 2" solo.log && ok "$lay: its step-2 checkpoint resumed by one process" ||
  { bad "$lay: one process resuming the layout's checkpoint"; tail -20 solo.log; }
ext solo/metrics.jsonl | awk '$1 > 2' > solo.loss
awk '$1 > 2' one.loss > one34.loss
near one34.loss solo.loss "$lay: one process's steps 3-4 from the layout's checkpoint"
exit $fail
