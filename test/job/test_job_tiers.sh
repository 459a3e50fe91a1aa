#!/bin/sh
# llmt_job through `llmtrain train`: a durable tier receives every
# committed checkpoint, and after the local tier is deleted a --resume
# continues from the durable copy (and takes a step from it when the local
# copy of that step is corrupt); checkpoint.interval "auto" prints the
# Young/Daly interval with its inputs and writes them to metrics.jsonl.
# usage: test_job_tiers.sh path/to/llmtrain
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
. "$(dirname "$0")/../run_lib.sh"
mk() { # file checkpoint-block
  cat > "$1" <<JSON
{"name": "tiers",
 "model": {"arch": "gpt2", "layers": 1, "hidden": 32, "heads": 2, "vocab": 320, "seq_len": 16},
 "batch": {"micro": 2, "grad_accum": 1},
 "optimizer": {"lr": 1e-2},
 "train": {"steps": 8, "seed": 3, "eval_interval": 0, "log_interval": 0, "threads": 1,
           "sample_tokens": 0},
 "data": {"train": "$tmp/corpus", "tokenizer": {"kind": "byte"}},
 "checkpoint": $2,
 "hardware": {"gpu": "cpu"}}
JSON
}
mk durable.json '{"interval": 2, "tiers": [{"kind": "local", "keep_last": 2},
  {"kind": "durable", "path": "'"$tmp"'/shared", "keep_last": 0}]}'
"$exe" train durable.json --out d --steps 6 > d1.log 2>&1 && ok "run to step 6" || { bad "run"; cat d1.log; }
for s in 2 4 6; do
  [ -f "shared/step-00000000000$s/manifest.json" ] || bad "durable tier lacks step $s: $(ls shared)"
done
[ -f shared/step-000000000002/manifest.json ] && ok "durable tier holds steps 2, 4, 6 (keep_last 0)"
[ ! -d d/ckpt/step-000000000002 ] && [ -d d/ckpt/step-000000000006 ] &&
  ok "local tier kept its newest 2" || bad "local retention: $(ls d/ckpt)"
rm -rf d/ckpt
"$exe" train durable.json --out d --resume > d2.log 2>&1 && ok "resume without the local tier" ||
  { bad "resume from durable"; cat d2.log; }
grep -q "resumed from the durable tier .* at step 6" d2.log && ok "resumed from the durable tier at 6" ||
  { bad "durable resume message"; cat d2.log; }
[ -f d/ckpt/step-000000000008/manifest.json ] && [ -f shared/step-000000000008/manifest.json ] &&
  ok "step 8 written to both tiers" || bad "step 8: $(ls d/ckpt shared)"
grep -q '"event":"resume","step":6' d/metrics.jsonl && ok "resume event in metrics.jsonl" ||
  bad "no resume event"

# a bit flipped in the local tier's newest step (8) only: the resume sets it
# aside and, the durable tier holding an intact step 8, restores that one
# rather than the local step 6 (two steps less to train again)
mk durable2.json '{"interval": 2, "tiers": [{"kind": "local", "keep_last": 2},
  {"kind": "durable", "path": "'"$tmp"'/shared2", "keep_last": 0}]}'
"$exe" train durable2.json --out e > e1.log 2>&1 || { bad "run to step 8"; cat e1.log; }
python3 - e/ckpt/step-000000000008/rank-00000.bin <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(4096 + 40)
    b = bytearray(f.read(16))
    f.seek(4096 + 40)
    f.write(bytes(x ^ 0x33 for x in b))
PY
"$exe" train durable2.json --out e --resume > e2.log 2>&1 && ok "resume over a corrupt local step 8" ||
  { bad "resume over a corrupt local step"; cat e2.log; }
grep -q "resumed from the durable tier .* at step 8 (the local tier's newer steps were unusable; it had 6)" e2.log &&
  ls e/ckpt/quarantine | grep -q step-000000000008 &&
  ok "step 8 taken from the durable tier, not the local step 6; the local copy quarantined" ||
  { bad "durable step 8 over a corrupt local one"; grep -i "resum\|skipping" e2.log; ls e/ckpt e/ckpt/quarantine; }

mk auto.json '{"interval": "auto"}'
"$exe" train auto.json --out a > a.log 2>&1 && ok "auto interval run" || { bad "auto run"; cat a.log; }
grep -q 'checkpoint.interval auto: .*Young/Daly sqrt(2 x C x MTBF).*C = .* s (save stall, measured on the first save).*MTBF = .* h (fault_tolerance.gpu_failures_per_hour .* x 1 GPU' a.log &&
  ok "auto interval printed with its inputs: $(grep -o 'checkpoint.interval auto: [^:]*' a.log)" ||
  { bad "auto interval line"; cat a.log; }
grep -q '"event":"ckpt_interval".*"stall_s":.*"mtbf_s":' a/metrics.jsonl && ok "auto interval inputs in metrics.jsonl" ||
  bad "no ckpt_interval event"
# a given stall (checkpoint.save_stall_s) is used instead of a measured one
mk auto2.json '{"interval": "auto", "save_stall_s": 0.0005, "save_write_s": 0.0001}'
sed -i 's/"hardware"/"fault_tolerance": {"gpu_failures_per_hour": 1},\n "hardware"/' auto2.json
"$exe" train auto2.json --out a2 > a2.log 2>&1 && grep -q 'C = 0.0005 s (save stall, checkpoint.save_stall_s)' a2.log &&
  ok "given stall used: $(grep -o 'auto: [^=]*' a2.log)" || { bad "auto with a given stall"; cat a2.log; }
exit $fail
