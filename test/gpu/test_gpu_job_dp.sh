#!/bin/sh
# llmt_job on the CUDA engine across processes: the job's host collectives
# stay on MPI or Gloo, the engine's gradients go over the NCCL twin of the
# data parallel group (lib/job/nccl_attach.c).
# usage: test_gpu_job_dp.sh path/to/llmtrain CASE
#   mpirun   (>= 2 GPUs, mpirun) `mpirun -np 2` with dp 2 against one
#            process with grad_accum 2 (the same global batch): every
#            step's loss within 2e-2 relative (bf16 parameters and GEMMs,
#            a different reduction order)
#   inplace  (>= 3 GPUs, gloo) `llmtrain launch --nproc 2 --spares 1
#            --in-place`, rank 1 killed at step 5: the survivor aborts its
#            NCCL communicator, makes a new one with a new unique id from
#            the next generation's store, restores from memory; the job
#            finishes and its losses after recovery match the uninterrupted
#            run within the same bound
# Exits 77 where the GPUs, mpirun or Gloo are missing: NCCL refuses two
# ranks on one GPU, so a one-GPU machine cannot run either case.
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
case_=$2
ngpu=$("$exe" features 2>/dev/null | sed -n 's/^cuda devices: *//p')
"$exe" features 2>/dev/null | grep -q '^nccl *yes' || { echo "no NCCL in this build: skip"; exit 77; }
need=2
[ "$case_" = inplace ] && need=3
[ "${ngpu:-0}" -ge "$need" ] || { echo "$ngpu GPU(s), $case_ needs $need: skip"; exit 77; }
. "$(dirname "$0")/job_losses.sh"
. "$(dirname "$0")/../run_lib.sh"
mk() { # file dp grad_accum
  cat > "$1" <<JSON
{"name": "gpu-dp",
 "model": {"arch": "gpt2", "layers": 2, "hidden": 128, "heads": 4, "vocab": 320, "seq_len": 64},
 "parallelism": {"dp": $2},
 "batch": {"micro": 4, "grad_accum": $3},
 "optimizer": {"lr": 3e-3},
 "train": {"steps": 10, "seed": 7, "device": "cuda", "eval_interval": 0, "log_interval": 1,
           "sample_tokens": 0},
 "data": {"train": "$tmp/corpus", "tokenizer": {"kind": "byte"}},
 "checkpoint": {"interval": 2, "async": false},
 "hardware": {"gpu": "h100"}}
JSON
}
mk one.json 1 2
"$exe" train one.json --out one > one.log 2>&1 || { bad "one GPU run"; cat one.log; exit 1; }
losses one/metrics.jsonl > a.txt
case $case_ in
mpirun)
  command -v mpirun >/dev/null 2>&1 || { echo "no mpirun: skip"; exit 77; }
  mk two.json 2 1
  mpirun -np 2 --oversubscribe --allow-run-as-root "$exe" train two.json --out two > two.log 2>&1 ||
    { bad "mpirun -np 2 on the CUDA engine"; cat two.log; }
  losses two/metrics.jsonl > b.txt
  close a.txt b.txt "dp 2 over NCCL = one GPU with grad_accum 2"
  ;;
inplace)
  "$exe" features 2>/dev/null | grep -q '^gloo *yes' || { echo "no gloo: skip"; exit 77; }
  mk two.json 2 1
  LLMT_FAULT=kill:1:5 "$exe" launch --nproc 2 --spares 1 --in-place two.json --out ip > ip.log 2>&1 ||
    { bad "launch --in-place on the CUDA engine"; cat ip.log; }
  grep -q '"event":"inplace"' ip/metrics.jsonl &&
    ok "the survivor recovered in place (a new NCCL communicator)" ||
    { bad "no in-place recovery"; cat ip.log; }
  losses ip/metrics.jsonl | sort -n -k1,1 -u > b.txt
  close a.txt b.txt "losses after the in-place recovery = one GPU's"
  ;;
*) echo "unknown case $case_"; exit 2 ;;
esac
exit $fail
