#!/bin/sh
# The cost of a ZeRO-3 SDC check (issue 19, doc/fault-tolerance.md,
# "Deterministic SDC replay"): `llmtrain launch`, 2 Gloo ranks, GPT-2 2
# layers width 128, seq 64, micro 2 global 4, 40 steps, zero 3,
# deterministic. One line per run: the checks made, their time (the
# job's goodput checks_s, rank 0) in units of the run's mean step time,
# and the whole run's wall time.
# usage: sdc_cost.sh path/to/llmtrain MODE SDC_INTERVAL CKPT_INTERVAL
#   MODE: window, step (fault_tolerance.sdc_replay) or none (no checks)
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
mode=$2 si=$3 ci=$4
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
extra=""
[ "$mode" != none ] && extra=", \"sdc_interval\": $si, \"sdc_replay\": \"$mode\""
cat > "$tmp/b.json" <<JSON
{"name": "b",
 "model": {"arch": "gpt2", "layers": 2, "hidden": 128, "heads": 4, "vocab": 320, "seq_len": 64},
 "parallelism": {"zero": 3},
 "batch": {"micro": 2, "global": 4},
 "optimizer": {"lr": 1e-3},
 "train": {"steps": 40, "seed": 3, "eval_interval": 0, "log_interval": 1, "threads": 1,
           "sample_tokens": 0, "deterministic": true},
 "data": {"train": "$root/test/data/corpus", "tokenizer": {"kind": "byte"}},
 "checkpoint": {"interval": $ci, "async": false},
 "fault_tolerance": {"collective_timeout_s": 30 $extra},
 "hardware": {"gpu": "cpu"}}
JSON
t0=$(date +%s.%N)
"$exe" launch --out "$tmp/o" --nproc 2 "$tmp/b.json" > "$tmp/log" 2>&1 ||
  { echo "the run failed:"; tail -5 "$tmp/log"; exit 1; }
t1=$(date +%s.%N)
python3 - "$tmp/o/metrics.jsonl" "$mode $si ($ci)" "$t0" "$t1" <<'PY'
import json, sys
L = [json.loads(l) for l in open(sys.argv[1])]
st = [j["step_s"] for j in L if "loss" in j and "step_s" in j]
mean = sum(st) / len(st)
ev = [j for j in L if j.get("event") == "sdc"]
made = [j for j in ev if j.get("checked") is not False]
c = [j for j in L if "checks_s" in j][-1]["checks_s"]
print("%-16s checks %2d (not made %d)  checks_s %.3f  mean step %.4f s  "
      "a check: %.2f steps  run %.1f s" % (
          sys.argv[2], len(made), len(ev) - len(made), c, mean,
          c / len(made) / mean if made else 0, float(sys.argv[4]) - float(sys.argv[3])))
PY
