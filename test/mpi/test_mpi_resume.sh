#!/bin/sh
# Sharded checkpoints of `llmtrain train` under mpirun resume under another
# number of processes. `mpirun -np 4` (ZeRO-1) trains 6 steps with
# checkpoints at 3 and 6, all ranks saving their shares into one root
# (OUT/ckpt); then, from a copy with step 6 removed, `mpirun -np 2` (ZeRO-2,
# batch.micro doubled: the same global batch) and one process without
# mpirun (micro x 4) resume at step 3: their training losses of steps 4..6
# equal the np 4 run's within 2e-5. (Validation losses are not compared:
# the validation set is eval_batches x micro sequences, so it changes with
# micro.)
# usage: test_mpi_resume.sh path/to/llmtrain
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
. "$(dirname "$0")/mpi_lib.sh"
mk() { # file dp zero micro
  mpi_spec "$1" tiny-resume '"arch": "gpt2", "layers": 2, "hidden": 64, "heads": 4, "vocab": 512, "seq_len": 32' \
    "\"micro\": $4, \"grad_accum\": 2" "\"dp\": $2, \"zero\": $3" 6 \
    '"eval_interval": 3, "eval_batches": 4, "log_interval": 3, "sample_tokens": 0' \
    '{"kind": "bpe", "vocab_size": 512}' '"interval": 3, "async": true'
}
mk np4.json 4 1 1
mk np2.json 2 2 2
mk np1.json 1 0 4
mpi() { # np args...
  np=$1; shift
  OMPI_MCA_btl_vader_single_copy_mechanism=none LLMT_COMM_TIMEOUT_MS=120000 \
    mpirun -np "$np" --oversubscribe --allow-run-as-root -x LLMT_COMM_TIMEOUT_MS "$@"
}
mpi 4 "$exe" train np4.json --out run > np4.log 2>&1 && ok "mpirun -np 4" || { bad "mpirun -np 4"; cat np4.log; }
ls run/ckpt | grep -q 'step-0*3$' && ls run/ckpt | grep -q 'step-0*6$' &&
  ok "one shared root with steps 3 and 6" || bad "checkpoints: $(ls run/ckpt)"
[ ! -d run/rank-1/ckpt ] && [ -f run/rank-3/metrics.jsonl ] &&
  ok "ranks keep their run directories, not their own checkpoints" || bad "rank directories"
n=$(ls run/ckpt/step-000000000003 | grep -c '^rank-.*\.bin$')
[ "$n" = 4 ] && ok "step 3 holds 4 ranks' parts" || bad "step 3 has $n data files"
mf=run/ckpt/step-000000000003/manifest.json
grep -q '"world_size":4' $mf && grep -q '"dp":4,"zero":1' $mf &&
  ok "manifest: world 4, plan dp 4 ZeRO-1" || { bad "manifest"; head -c 300 $mf; }
# resume copies without step 6: the scan of the root decides what is latest
for k in np2 np1; do
  cp -r run "$k" && rm -rf "$k"/ckpt/step-000000000006 || exit 1
done
mpi 2 "$exe" train np2.json --out np2 --resume > np2.log 2>&1 &&
  ok "mpirun -np 2 --resume" || { bad "mpirun -np 2 --resume"; cat np2.log; }
grep -q "resumed from .* at step 3" np2.log && ok "np 2 resumed at step 3" || bad "np 2 did not resume at 3"
"$exe" train np1.json --out np1 --resume > np1.log 2>&1 &&
  ok "one process --resume" || { bad "one process --resume"; cat np1.log; }
grep -q "resumed from .* at step 3" np1.log && ok "one process resumed at step 3" || bad "one process did not resume at 3"
# the lines after the last resume event (metrics.jsonl is appended to:
# a resumed run's retrained steps follow the lines of the first attempt)
ext() { awk '/"event":"resume"/ {n = 0; delete l} {l[++n] = $0} END {for (i = 1; i <= n; i++) print l[i]}' "$1" |
        sed -n 's/.*"step":\([0-9]*\),"\(loss\)":\([-0-9.e]*\).*/\1 \2 \3/p' | awk '$1 > 3'; }
ext run/metrics.jsonl > a.txt
for k in np2 np1; do
  ext $k/metrics.jsonl > b.txt
  if [ "$(wc -l < a.txt)" = 3 ] && [ "$(wc -l < a.txt)" = "$(wc -l < b.txt)" ] &&
     paste a.txt b.txt | awk '{d = $3 - $6; if (d < 0) d = -d; if ($1 != $4 || $2 != $5 || d > 2e-5) bad = 1;
                               if (d > m) m = d} END {printf "max |loss diff| %.2g\n", m; exit bad}'; then
    ok "$k: losses of steps 4..6 equal np 4's"
  else
    bad "$k: losses differ"; paste a.txt b.txt
  fi
done
exit $fail
