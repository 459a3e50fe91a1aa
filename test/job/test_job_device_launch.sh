#!/bin/sh
# llmt_job on the device engine under `llmtrain launch` (Gloo, the fault-
# tolerance agent), one layout per call: the workers train a small Llama,
# rank 1 is killed at step 5, the agent restarts the gang with a spare from
# the newest checkpoint (step 4, or 2 when the kill came before rank 0
# committed 4), and every step's loss must equal one process's run of the
# same model on the same engine (tp = cp = pp = ep = 1).
#
# DEVICE emulated (unit suite, any machine): the GPU engine's arithmetic on
# the CPU, its buffers staged through host copies as on a GPU (doc/job-
# spec.md, train.device). Bound 2^-9 relative, the bf16 bound of the device
# engine's layout tests (test/train/test_device_tpdp.c: a layout changes
# only the order of fp32 sums, each op's output then rounded to bf16).
# DEVICE cuda (gpu suite): every worker on GPU 0 (layouts with dp 1: the
# groups go over the host group, staged); bound 2e-2 relative, the GPU
# job tests' (job_losses.sh: bf16 GEMMs in cuBLASLt's order). Exits 77
# without a GPU, and when the CUDA engine refuses the layout because it has
# not run there yet (lib/exec/dev.h, unverified_*: its engine test must pass
# on a GPU first), saying which.
#
# LAYOUT: tp (tp 2), tp-sp (tp 2, sequence parallel), cp (cp 2), pp (pp 2),
# fp8-tp, fp8-cp, fp8-pp, fp8-tpdp (fp8 GEMMs under tp 2 with sequence
# parallelism, cp 2, pp 2, tp 2 x dp 2 ZeRO-1; both runs fp8),
# moe-tp, moe-pp, moe-cp (4 experts, top-2, under tp, pp or cp 2); on
# emulated also tpdp (tp 2 x dp 2 ZeRO-1), ppdp (pp 2 x dp 2), moe-ep (dp 2
# x ep 2). A LAYOUT ending in -inplace recovers in place (`launch
# --in-place`, a host tier): the survivors stay in their processes, make a
# new trainer on the same engine and go back to the newest step every rank
# holds, the spare resumes from disk. dp-sdc (emulated): dp 4 with the
# silent-data-corruption check every 2 steps and a bit flipped in rank 1's
# parameters at step 3 instead of a kill: the check names rank 1 and
# repairs it from the majority, and the losses still equal one process's.
# usage: test_job_device_launch.sh path/to/llmtrain DEVICE LAYOUT
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
dev=$2 lay=$3
case $dev in
  emulated) bound=0.001953125 gpu=cpu ;;
  cuda)
    ngpu=$("$exe" features 2>/dev/null | sed -n 's/^cuda devices: *//p')
    [ "${ngpu:-0}" -ge 1 ] || { echo "no GPU: skip"; exit 77; }
    bound=2e-2 gpu=h100 ;;
  *) echo "usage: $0 llmtrain emulated|cuda LAYOUT"; exit 2 ;;
esac
"$exe" features 2>/dev/null | grep -qw gloo || { echo "no gloo in this build: skip"; exit 77; }
moe= par= n=2 inplace= sdc= fp8=
case $lay in *-inplace) inplace=1 lay=${lay%-inplace} ;; esac
case $lay in
  tp) par='"tp": 2' ;;
  tp-sp) par='"tp": 2, "sequence_parallel": true' ;;
  cp) par='"cp": 2' ;;
  pp) par='"pp": 2' ;;
  moe-tp) moe=1 par='"tp": 2' ;;
  moe-pp) moe=1 par='"pp": 2' ;;
  moe-cp) moe=1 par='"cp": 2' ;;
  tpdp) par='"tp": 2, "dp": 2, "zero": 1' n=4 ;;
  ppdp) par='"pp": 2, "dp": 2' n=4 ;;
  moe-ep) moe=1 par='"dp": 2, "ep": 2' ;;
  dp-sdc) par='"dp": 4' n=4 sdc=1 ;;
  fp8-tp) fp8=1 par='"tp": 2, "sequence_parallel": true' ;;
  fp8-cp) fp8=1 par='"cp": 2' ;;
  fp8-pp) fp8=1 par='"pp": 2' ;;
  fp8-tpdp) fp8=1 par='"tp": 2, "dp": 2, "zero": 1' n=4 ;;
  # fp8 with MoE layers: the experts' GEMMs fp8 too (lib/train/moe_dev.c)
  fp8-moe-ep) fp8=1 moe=1 par='"dp": 2, "ep": 2' ;;
  fp8-moe-tp) fp8=1 moe=1 par='"tp": 2' ;;
  fp8-moe-pp) fp8=1 moe=1 par='"pp": 2' ;;
  fp8-moe-cp) fp8=1 moe=1 par='"cp": 2' ;;
  *) echo "unknown layout '$lay'"; exit 2 ;;
esac
[ $n = 2 ] || [ "$dev" = emulated ] || { echo "layout $lay has dp > 1: emulated only"; exit 2; }
. "$(dirname "$0")/../run_lib.sh"
moekey= prec=
# fp8 GEMMs (delayed scaling) in both runs: the layout's amaxes maximised
# over its groups, its recipe state checkpointed and restored by the restart
[ -z "$fp8" ] || prec='"precision": {"gemm": "fp8"},'
[ -z "$moe" ] || moekey=', "moe": {"experts": 4, "top_k": 2, "expert_ffn": 48, "capacity_factor": 1.25}'
mk() { # file parallelism
  cat > "$1" <<JSON
{"name": "device-launch",
 "model": {"arch": "llama", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2,
           "vocab": 320, "seq_len": 32$moekey},
 "parallelism": {$2},
 "batch": {"micro": 2, "global": 8},$prec
 "optimizer": {"lr": 3e-3},
 "schedule": {"kind": "cosine", "warmup_steps": 2},
 "train": {"steps": 8, "seed": 7, "device": "$dev", "eval_interval": 0, "log_interval": 1,
           "threads": 1, "sample_tokens": 0},
 "data": {"train": "$tmp/corpus", "tokenizer": {"kind": "byte"}},
 "checkpoint": {"interval": 2, "async": false$tiers},$ft
 "hardware": {"gpu": "$gpu"},
 "metrics": {"jsonl": "metrics.jsonl"}}
JSON
}
losses() { sed -n 's/.*"step":\([0-9]*\),"loss":\([-0-9.e]*\).*/\1 \2/p' "$1" | sort -n -k1,1 -u; }
tiers= flag= ft= fault=kill:1:5
mk one.json '"tp": 1'
[ -z "$inplace" ] || { tiers=', "tiers": [{"kind": "host"}, {"kind": "local"}]'; flag=--in-place; }
[ -z "$sdc" ] || { ft=' "fault_tolerance": {"sdc_interval": 2},'; fault=bitflip:1:3; }
mk run.json "$par"
"$exe" train one.json --out one > one.log 2>&1 && ok "one process on $dev" ||
  { bad "one process on $dev"; cat one.log; exit 1; }
LLMT_FAULT=$fault "$exe" launch --nproc $n --spares 1 $flag --heartbeat-timeout 120 run.json --out run \
  > run.log 2>&1
rc=$?
# the engine's refusals (lib/exec/dev.h, unverified_*): "the cuda backend
# has not run pipeline parallelism on a GPU", "... on the cuda backend: MoE
# layers with ... have not run on a GPU"
unverified='backend has not run|have not run on a GPU'
if [ $rc != 0 ] && [ "$dev" = cuda ] && grep -rqsE "$unverified" run.log run/agent; then
  echo "the CUDA engine refuses $lay until its engine test passes on a GPU:"
  grep -rhsE "$unverified" run/agent run.log | head -1 | cut -c1-400
  exit 77
fi
[ $rc = 0 ] && ok "launch --nproc $n --spares 1, $lay on $dev, LLMT_FAULT $fault: finished" ||
  { bad "launch ($lay on $dev)"; tail -30 run.log; }
[ -z "$inplace" ] || { grep -q "in-place recovery as gen 1" run.log && ok "recovered in place" ||
  { bad "no in-place recovery"; grep -iE "place|recover" run.log; }; }
if [ -n "$sdc" ]; then
  grep -q '"event":"sdc","step":4,"ok":false,"ranks":4,"bad_ranks":\[1\],.*"action":"repaired"' \
    run/metrics.jsonl && ok "the check at step 4 named rank 1 and repaired it" ||
    { bad "no sdc event naming rank 1"; grep sdc run/metrics.jsonl; }
else
  grep -qE "recovered: gen 1 resumed at step (2|4) " run.log &&
    ok "the restart resumed the layout's checkpoint" ||
    { bad "no resume from a checkpoint"; grep -iE "resum|recover" run.log; }
fi
losses one/metrics.jsonl > a.txt
losses run/metrics.jsonl > b.txt
if [ -n "$fp8" ]; then # fp8 took effect: one process in bf16 gives other losses
  prec= mk bf16.json '"tp": 1'
  "$exe" train bf16.json --out bf16 > bf16.log 2>&1 && losses bf16/metrics.jsonl > c.txt &&
    ! cmp -s a.txt c.txt && ok "the fp8 run's losses differ from bf16's" ||
    { bad "fp8 made no difference to the losses (or the bf16 run failed)"; tail -5 bf16.log; }
fi
if [ "$(wc -l < a.txt)" = 8 ] && [ "$(wc -l < b.txt)" = 8 ] &&
   paste a.txt b.txt | awk -v b="$bound" '{d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > m) m = r;
                                          if ($1 != $3 || r > b) bad = 1}
                                         END {printf "max relative loss diff %.3g (bound %g)\n", m, b; exit bad}'; then
  ok "every step's loss equals one process's ($lay on $dev, after LLMT_FAULT $fault)"
else
  bad "losses differ ($lay on $dev)"; paste a.txt b.txt
fi
exit $fail
