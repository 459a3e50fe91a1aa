#!/bin/sh
# `llmtrain plan --auto` for a spec that names a degree's keys
# (parallelism.pp_schedule, stage_layers, cp_variant): llmt_job refuses
# them set without the degree, so a chosen layout that drops it (pp 1, cp
# 1) is one the job does not run, and the plan says so with the job's text
# and names the best layout it runs. Before, the auto-planner chose pp 1
# for a spec with pp_schedule or stage_layers and said nothing: the user
# learnt it at `llmtrain train`. Then the job's own refusal of such a spec,
# the same text.
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=${LLMT_SOURCE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
fail=0
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
ok() { printf 'ok   %s\n' "$1"; }
bad() { printf 'FAIL %s\n' "$1"; fail=1; }
has() { grep -q -- "$2" "$1" && ok "$3" || { bad "$3 (no '$2' in output)"; cat "$1"; }; }

# demo-cpu with parallelism PAR (JSON) into NAME.json
spec() {
  python3 - "$src/examples/specs/demo-cpu.json" "$1" "$2" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
s["parallelism"] = json.loads(sys.argv[3])
s["data"] = {"tokenizer": {"kind": "byte"}}
s["model"]["vocab"] = 320
s["train"]["steps"] = 2
s["schedule"] = {"kind": "cosine", "warmup_steps": 1}
s["checkpoint"] = {"interval": 0}
for k in ("eval_interval", "sample_tokens"):
    s["train"].pop(k, None)
json.dump(s, open(sys.argv[2] + ".json", "w"))
EOF
}

spec pps '{"tp": 1, "pp": 2, "dp": 1, "pp_schedule": "1f1b"}'
spec sl '{"tp": 1, "pp": 2, "dp": 1, "stage_layers": [1, 3]}'
for k in pps sl; do
  "$exe" plan $k.json --world 2 --auto > $k.txt 2>&1 && ok "$k: plan --auto exits 0" \
    || { bad "$k: plan --auto exits non-zero"; cat $k.txt; }
  if grep -q "best: tp1 cp1 pp1 " $k.txt; then
    key=pp_schedule
    [ $k = sl ] && key=stage_layers
    has $k.txt "note: llmt_job does not run this layout yet: parallelism.$key: set but parallelism.pp is 1" \
      "$k: the chosen pp 1 layout is said not to run"
    has $k.txt "note: the best layout llmt_job runs today: tp[0-9]* cp[0-9]* pp2 " \
      "$k: the best layout the job runs keeps pp 2"
  else
    has $k.txt "best: " "$k: a layout is chosen"
    if grep -q "does not run this layout" $k.txt; then
      bad "$k: a chosen pp > 1 layout is said not to run"
    else
      ok "$k: the chosen pp > 1 layout runs"
    fi
  fi
done

# the job refuses the same: pp 1 with pp_schedule, naming the key
spec one '{"tp": 1, "pp": 1, "dp": 1, "pp_schedule": "1f1b"}'
mkdir -p corpus && printf 'some text for the tokenizer to read\n%.0s' $(seq 50) > corpus/a.txt
python3 - <<'EOF'
import json
s = json.load(open("one.json"))
s["data"]["train"] = "corpus"
json.dump(s, open("one.json", "w"))
EOF
"$exe" train one.json --out run > tr.txt 2>&1 && { bad "train of pp 1 with pp_schedule exits 0"; cat tr.txt; } \
  || ok "train of pp 1 with pp_schedule refused"
has tr.txt "parallelism.pp_schedule: set but parallelism.pp is 1" "train names pp_schedule"
"$exe" plan one.json > p1.txt 2>&1
has p1.txt "note: llmt_job does not run this layout yet: parallelism.pp_schedule" \
  "plan of the same spec says it"
exit $fail
