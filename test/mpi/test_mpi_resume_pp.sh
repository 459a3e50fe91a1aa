#!/bin/sh
# Checkpoints under pipeline parallelism through `llmtrain train` and
# mpirun (issue 17): `mpirun -np 2` with parallelism.pp 2 trains steps 1-4
# of 8 (GPT-2, 4 layers, a tied head; checkpoints every 2 steps, each
# stage saving its layers into rank 0's run directory), then
# `mpirun -np 4` with pp 2 x dp 2 resumes it for steps 5-6 and one process
# (pp 1) for steps 7-8 (`--resume`); the first under 1F1B, the second
# under GPipe. One process running 8 steps
# uninterrupted is the reference: every training loss within 1e-5
# relative (the bound of test/train/test_device_ppckpt.c and why: only the
# order of a few fp32 sums differs), plus the 1e-6 of the 6 decimals
# metrics.jsonl prints; the step-4 checkpoint's plan names pp 2.
# usage: test_mpi_resume_pp.sh path/to/llmtrain
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
. "$(dirname "$0")/mpi_lib.sh"
mk() { # file pp dp [extra parallelism keys]
  mpi_spec "$1" tiny-pp '"arch": "gpt2", "layers": 4, "hidden": 64, "heads": 4, "vocab": 320,
    "seq_len": 32' '"micro": 2, "global": 8' "\"pp\": $2, \"dp\": $3$4" 8 \
    '"eval_interval": 0, "log_interval": 2, "sample_tokens": 0' "" '"interval": 2, "async": false'
}
mk ref.json 1 1
mk pp2.json 2 1 ', "pp_schedule": "1f1b"'
mk pp2dp2.json 2 2 ', "pp_schedule": "gpipe"'
"$exe" train ref.json --out ref > ref.log 2>&1 && ok "one process, 8 steps" ||
  { bad "one process"; cat ref.log; }
mpi_train 2 pp2.json --out pp --steps 4 > pp2.log 2>&1 &&
  ok "mpirun -np 2 (pp 2, 1F1B), steps 1-4" || { bad "mpirun -np 2 pp 2"; cat pp2.log; }
ls pp/ckpt | grep -q '4$' && ok "checkpoint at step 4" || bad "no step-4 checkpoint: $(ls pp/ckpt)"
grep -Eqr '"pp\\?": ?2' pp/ckpt/*4 2>/dev/null && ok "the checkpoint's plan names pp 2" ||
  bad "no pp in the checkpoint's plan"
mpi_train 4 pp2dp2.json --out pp --resume --steps 6 > pp2dp2.log 2>&1 &&
  ok "mpirun -np 4 (pp 2 x dp 2, GPipe) resumed, steps 5-6" ||
  { bad "pp 2 x dp 2 resume"; cat pp2dp2.log; }
grep -q "resumed from .* at step 4" pp2dp2.log && ok "pp 2 x dp 2 resumed at step 4" ||
  bad "pp 2 x dp 2 did not resume at step 4"
grep -Eqr '"pp\\?": ?2' pp/ckpt/*6 2>/dev/null && grep -Eqr '"dp\\?": ?2' pp/ckpt/*6 2>/dev/null &&
  ok "the step-6 checkpoint's plan names pp 2 x dp 2" || bad "no pp 2 x dp 2 in the step-6 plan"
"$exe" train ref.json --out pp --resume > pp1.log 2>&1 &&
  ok "one process (pp 1) resumed, steps 7-8" || { bad "pp 1 resume"; cat pp1.log; }
grep -q "resumed from .* at step 6" pp1.log && ok "one process resumed at step 6" ||
  bad "one process did not resume at step 6"
ext() { sed -n 's/.*"step":\([0-9]*\),"loss":\([-0-9.e]*\).*/\1 \2/p' "$1"; }
ext ref/metrics.jsonl > a.txt
ext pp/metrics.jsonl > b.txt
if [ "$(wc -l < a.txt)" = 8 ] && [ "$(wc -l < b.txt)" = 8 ] &&
   paste a.txt b.txt | awk '{d = $2 - $4; if (d < 0) d = -d; a = $2 < 0 ? -$2 : $2;
                             if ($1 != $3 || d > 1e-5 * a + 1e-6) bad = 1;
                             if (d / a > m) m = d / a}
                             END {printf "max relative loss diff %.2g\n", m; exit bad}'; then
  ok "steps 1-8 across pp 2 -> pp 2 x dp 2 -> pp 1 equal one process's"
else
  bad "losses differ"; paste a.txt b.txt
fi
exit $fail
