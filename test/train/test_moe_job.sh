#!/bin/sh
# llmtrain train on a tiny Llama MoE (doc/moe.md): the job runs model.moe,
# and each step's metrics line {"event":"moe"} accounts for every routed
# choice: sum of tokens_per_expert + dropped = tokens x top_k x MoE layers,
# with a capacity tight enough that some choices are dropped.
# usage: test_moe_job.sh path/to/llmtrain
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=${LLMT_SOURCE_ROOT:?}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
mkdir corpus && cp "$src"/test/data/corpus/*.md corpus/ || exit 1
# micro 4 x seq 32 = 128 tokens a micro-batch, 2 micro-batches a step;
# layers 2, every 1: 2 MoE layers; top_k 2
cat > moe.json <<JSON
{"name": "tiny-moe",
 "model": {"arch": "llama", "layers": 2, "hidden": 32, "heads": 4, "vocab": 320,
           "seq_len": 32,
           "moe": {"experts": 4, "top_k": 2, "expert_ffn": 32, "capacity_factor": 0.75}},
 "batch": {"micro": 4, "grad_accum": 2},
 "optimizer": {"lr": 3e-3},
 "schedule": {"kind": "cosine", "warmup_steps": 2},
 "train": {"steps": 6, "seed": 5, "eval_interval": 3, "eval_batches": 1,
           "log_interval": 3, "threads": 2, "sample_tokens": 8},
 "data": {"train": "corpus", "tokenizer": {"kind": "byte"}},
 "hardware": {"gpu": "cpu"},
 "metrics": {"jsonl": "metrics.jsonl"}}
JSON
if ! "$exe" train moe.json --out run > log.txt 2>&1; then
  cat log.txt
  echo "FAIL llmtrain train with model.moe"
  exit 1
fi
/usr/bin/env python3 - run/metrics.jsonl <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
moe = [l for l in lines if l.get("event") == "moe"]
steps = [l for l in lines if "loss" in l and "step" in l and "event" not in l]
want = 2 * 4 * 32 * 2 * 2  # micro-batches x tokens x top_k x MoE layers
bad = 0
if len(moe) != 6 or len(steps) != 6:
    print("FAIL: %d moe lines and %d step lines, want 6 each" % (len(moe), len(steps)))
    sys.exit(1)
for l in moe:
    got = sum(l["tokens_per_expert"]) + l["dropped"]
    ok = got == want and len(l["tokens_per_expert"]) == 4 and l["aux_loss"] > 0 \
        and l["z_loss"] > 0 and max(l["tokens_per_expert"]) <= 2 * 2 * 48
    print("%s step %d: kept %s dropped %d (sum %d, want %d) aux %.4f z %.4f" % (
        "ok  " if ok else "FAIL", l["step"], l["tokens_per_expert"], l["dropped"], got, want,
        l["aux_loss"], l["z_loss"]))
    bad |= not ok
if not any(l["dropped"] > 0 for l in moe):
    print("FAIL: capacity 0.75 dropped nothing")
    bad = 1
sys.exit(1 if bad else 0)
PY
