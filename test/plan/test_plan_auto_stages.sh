#!/bin/sh
# `llmtrain plan --auto` for a spec that splits its stages itself
# (parallelism.stage_layers, one entry per (virtual) stage): a layout of
# another stage count (pp 4, or pp 2 with 2 virtual stages, for a split
# of 2) is one llmt_job does not run with that split: the spec's rules
# refuse it. Before, the auto-planner's note named pp 2 x 2 virtual
# stages as "the best layout llmt_job runs today" for demo-cpu with
# stage_layers [1, 3] (world 2, 4 and 8): the estimate had put its own
# split of 4 chunks in place of the spec's. Each named layout is put into
# the spec and checked by `llmtrain plan` (the spec's rules and the job's
# limits), and on 2 ranks trained a step under `llmtrain launch`.
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=${LLMT_SOURCE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
fail=0
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
ok() { printf 'ok   %s\n' "$1"; }
bad() { printf 'FAIL %s\n' "$1"; fail=1; }

mkdir -p corpus && cp "$src"/test/data/corpus/checkpointing.md "$src"/test/data/corpus/comm.md corpus/ || exit 1
python3 - "$src/examples/specs/demo-cpu.json" "$tmp/corpus" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
s["parallelism"] = {"tp": 1, "pp": 2, "dp": 1, "stage_layers": [1, 3]}
s["data"] = {"tokenizer": {"kind": "byte"}, "train": sys.argv[2]}
s["model"]["vocab"] = 320
s["train"]["steps"] = 1
s["schedule"] = {"kind": "cosine", "warmup_steps": 1}
s["checkpoint"] = {"interval": 0}
s.pop("metrics", None)
for k in ("eval_interval", "sample_tokens"):
    s["train"].pop(k, None)
json.dump(s, open("sl.json", "w"))
EOF

# NAME.json: sl.json with the layout of a plan's line LINE ("tp1 cp2 pp2
# dp1 zero0 v1 micro1 accum8 ...")
apply() {
  python3 - "$1" "$2" <<'EOF'
import json, re, sys
s = json.load(open("sl.json"))
d = dict(re.findall(r"\b(tp|cp|pp|dp|zero|v|micro|accum)(\d+)\b", sys.argv[2]))
p = s["parallelism"]
for k in ("tp", "cp", "pp", "dp", "zero"):
    p[k] = int(d[k])
p["virtual_stages"] = int(d["v"])
s["batch"] = {"micro": int(d["micro"]), "grad_accum": int(d["accum"])}
json.dump(s, open(sys.argv[1] + ".json", "w"))
EOF
}

for w in 2 4 8; do
  "$exe" plan sl.json --world $w --auto > a$w.txt 2>&1 && ok "world $w: plan --auto exits 0" \
    || { bad "world $w: plan --auto exits non-zero"; cat a$w.txt; continue; }
  line=$(grep "note: the best layout llmt_job runs today: " a$w.txt)
  [ -n "$line" ] || line=$(grep "best: " a$w.txt)
  [ -n "$line" ] || { bad "world $w: no layout named"; cat a$w.txt; continue; }
  case "$line" in
    *" pp2 "*" v1 "*) ok "world $w: the named layout keeps the split's 2 stages: $line" ;;
    *) bad "world $w: the named layout has another stage count than stage_layers' 2: $line" ;;
  esac
  apply r$w "$line"
  "$exe" plan r$w.json --world $w > r$w.txt 2>&1 && ok "world $w: the spec of that layout is valid" \
    || { bad "world $w: the spec of that layout is refused"; cat r$w.txt; }
  grep -q "does not run this layout" r$w.txt && { bad "world $w: its plan says the job does not run it"; cat r$w.txt; } \
    || ok "world $w: its plan says nothing against it"
done

# the named layout of 2 ranks trains (the job's own check, whole)
"$exe" launch --nproc 2 r2.json --out run2 > l2.txt 2>&1 && ok "world 2: the named layout trains a step" \
  || { bad "world 2: the named layout does not train"; tail -20 l2.txt; }
exit $fail
