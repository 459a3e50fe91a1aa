#!/bin/sh
# `llmtrain plan --auto` for a spec that names a degree's keys
# (parallelism.pp_schedule, stage_layers, cp_variant): llmt_job refuses
# them set without the degree, so a chosen layout that drops it (pp 1, cp
# 1) is one the job does not run, and the plan says so with the job's text
# and names the best layout it runs. Before, the auto-planner chose pp 1
# for a spec with pp_schedule or stage_layers and said nothing: the user
# learnt it at `llmtrain train`. Then the job's own refusal of such a spec,
# the same text. The same for fault_tolerance.sdc_interval (dp 1; zero 3
# beside tp) and sdc_replay step (zero 0-2), below.
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

# NAME.json trained on corpus/ (run directory RUN, output into OUT) must
# be refused: said as "train of WHAT"
train_refused() {
  python3 - "$1.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
s["data"]["train"] = "corpus"
json.dump(s, open(sys.argv[1], "w"))
EOF
  "$exe" train $1.json --out $2 > $3 2>&1 && { bad "train of $4 exits 0"; cat $3; } \
    || ok "train of $4 refused"
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
train_refused one run tr.txt "pp 1 with pp_schedule"
has tr.txt "parallelism.pp_schedule: set but parallelism.pp is 1" "train names pp_schedule"
"$exe" plan one.json > p1.txt 2>&1
has p1.txt "note: llmt_job does not run this layout yet: parallelism.pp_schedule" \
  "plan of the same spec says it"

# fault_tolerance.sdc_interval needs of the layout what the auto-planner
# chooses: dp 2 or more (replicas to compare), and under zero 3 a
# deterministic run of the cpu engine with tp 1 and pp 1; sdc_replay step
# needs zero 3. Before, plan --auto chose dp 1, zero 0-2 for a spec with
# sdc_replay step, or zero 3 beside tp 4, and said nothing.
# ft NAME FT DET [MODEL]: NAME.json with fault_tolerance FT (JSON),
# train.deterministic DET (true/false) and the model's fields MODEL (JSON)
ft() {
  python3 - "$1" "$2" "$3" "${4:-null}" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1] + ".json"))
s["fault_tolerance"] = json.loads(sys.argv[2])
s["train"]["deterministic"] = sys.argv[3] == "true"
s["model"].update(json.loads(sys.argv[4]) or {})
json.dump(s, open(sys.argv[1] + ".json", "w"))
EOF
}
auto() {
  "$exe" plan $1.json --world $2 --auto > $1.txt 2>&1 && ok "$1: plan --auto exits 0" \
    || { bad "$1: plan --auto exits non-zero"; cat $1.txt; }
}

# world 1: one replica whatever the layout
spec sdc1 '{"tp": 1, "pp": 1, "dp": 1}'
ft sdc1 '{"sdc_interval": 2}' false
auto sdc1 1
has sdc1.txt "note: llmt_job does not run this layout yet: fault_tolerance.sdc_interval: 2 compares the parameters of data-parallel replicas, and this job has one (dp = world size 1" \
  "sdc1: the chosen dp 1 layout is said not to run, in the job's words"
has sdc1.txt "note: llmt_job runs none of the layouts of 1 ranks" "sdc1: no layout of 1 rank runs"

# zero 3 with sdc_replay step on 2 ranks: a chosen zero 0-2 does not run
spec rstep '{"tp": 1, "pp": 1, "dp": 2, "zero": 3}'
ft rstep '{"sdc_interval": 2, "sdc_replay": "step"}' true
auto rstep 2
if grep -q "best: tp1 cp1 pp1 dp2 zero3 " rstep.txt; then
  grep -q "does not run this layout" rstep.txt && bad "rstep: a chosen zero 3 layout is said not to run" \
    || ok "rstep: the chosen zero 3 layout runs"
else
  has rstep.txt "note: llmt_job does not run this layout yet: fault_tolerance.sdc_replay: step (the check step alone) applies under parallelism.zero 3" \
    "rstep: the chosen zero 0-2 layout is said not to run"
  has rstep.txt "note: the best layout llmt_job runs today: tp1 cp1 pp1 dp2 zero3 " \
    "rstep: the best layout the job runs keeps zero 3"
fi

# a model large enough that 8 ranks need tp: the planner's best is zero 3
# beside tp 4 (or dp 1), neither of which the check runs on
spec big '{"tp": 1, "pp": 1, "dp": 2}'
ft big '{"sdc_interval": 2}' true \
  '{"layers": 24, "hidden": 4096, "heads": 16, "vocab": 32000, "seq_len": 2048}'
auto big 8
case "$(grep "best: " big.txt)" in
  *" dp1 "*) has big.txt "note: llmt_job does not run this layout yet: fault_tolerance.sdc_interval: 2 compares" \
    "big: the chosen dp 1 layout is said not to run" ;;
  *" zero3 "*) has big.txt "note: llmt_job does not run this layout yet: fault_tolerance.sdc_interval: under parallelism.zero 3 the check" \
    "big: the chosen zero 3 layout beside tp is said not to run" ;;
  *) grep -q "does not run this layout" big.txt && bad "big: a chosen dp > 1, zero 0-2 layout is said not to run" \
    || ok "big: the chosen dp > 1, zero 0-2 layout runs" ;;
esac
run=$(grep "note: the best layout llmt_job runs today: " big.txt)
case "$run" in
  "") grep -q "does not run this layout" big.txt && { bad "big: no best runnable layout named"; cat big.txt; } \
    || ok "big: the chosen layout runs, no other named" ;;
  *" dp1 "* | *" zero3 "*) bad "big: the best runnable layout has dp 1 or zero 3: $run" ;;
  *) ok "big: the best runnable layout has dp > 1 and zero 0-2" ;;
esac

# the job refuses the same: sdc_interval on one rank, in the same words
spec sdcj '{"tp": 1, "pp": 1, "dp": 1}'
ft sdcj '{"sdc_interval": 2}' false
train_refused sdcj runsdc trs.txt "dp 1 with sdc_interval"
has trs.txt "fault_tolerance.sdc_interval: 2 compares the parameters of data-parallel replicas" \
  "train names sdc_interval, in the plan's words"
exit $fail
