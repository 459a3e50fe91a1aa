#!/bin/sh
# `llmtrain plan` on the example specs: the table has every section, the
# numbers the seeds give, JSON that parses, --auto and --simulate work, and
# bad input is a clear error with the right exit code.
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=${LLMT_SOURCE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
specs=$src/examples/specs
# the interpreter meson found ($LLMT_PYTHON): a launcher on PATH (a pyenv
# shim) costs ~0.5 s of CPU each of its seven calls
py3=${LLMT_PYTHON:-python3}
fail=0
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
ok() { printf 'ok   %s\n' "$1"; }
bad() { printf 'FAIL %s\n' "$1"; fail=1; }
has() { grep -q -- "$2" "$1" && ok "$3" || { bad "$3 (no '$2' in output)"; cat "$1"; }; }
py() { "$py3" -c "$1" < "$2" && ok "$3" || bad "$3"; }

# 405B on 16,384 GPUs: the seeds' layout and every section of the table.
"$exe" plan "$specs/llama3-405b-16k.json" > t.txt 2> e.txt \
  && ok "405b exits 0" || { bad "405b exits non-zero"; cat e.txt; }
has t.txt "tp 8 x cp 1 x pp 16 x dp 128 = 16384" "405b degrees 8x16x128"
for w in "memory per GPU" "weights" "gradients" "optimizer" "activations" \
         "FLOPs per token" "FLOPs per run" "communication per GPU" \
         "pipeline bubble" "tokens/s" "MFU" "Young/Daly interval" \
         "checkpoint interval" "goodput (analytic)"; do
  has t.txt "$w" "405b shows $w"
done
has t.txt "48.4%" "405b bubble 15/31"
has t.txt "1.56e+13 tokens" "405b 15.6T tokens"
has t.txt "6ND = 3.8[0-9]*e+25" "405b 6ND = 3.8e25 FLOPs"
has t.txt "FLOPs per run         4.1[0-9]*e+25" "405b ~4.1e25 FLOPs with attention"
has t.txt "warning: pipeline bubble 48%" "405b warns about the bubble"
has t.txt ": fits" "405b fits in 80 GB"

# JSON: parses, and agrees with the table.
"$exe" plan "$specs/llama3-405b-16k.json" --json > j.json && ok "405b --json" || bad "405b --json"
py 'import json,sys; d=json.load(sys.stdin); g=d["degrees"]
assert d["world_size"]==16384 and (g["tp"],g["pp"],g["dp"])==(8,16,128), d["degrees"]
e=d["estimate"]; assert abs(e["time"]["bubble_fraction"]-15/31)<1e-9
assert abs(e["flops"]["flops_6nd_per_token"]*2048*8192*930000/3.8e25-1)<0.01
assert e["memory_per_gpu_bytes"]["fits"] is True
assert d["group_strides"]=={"tp":1,"cp":8,"pp":8,"dp":128,"ep":128}, d["group_strides"]
st=d["stages"]; assert len(st)==16 and sum(x["layers"] for x in st)==126
assert d["spec"]["parallelism"]["tp"]==8' j.json "405b JSON numbers"

# --simulate: the goodput section, and its JSON.
"$exe" plan "$specs/llama3-405b-16k.json" --simulate --hours 200 --trials 8 > s.txt \
  && ok "405b --simulate" || bad "405b --simulate"
has s.txt "goodput simulation" "simulate section"
has s.txt "best simulated" "simulate sweep"
"$exe" plan "$specs/llama3-405b-16k.json" --simulate --hours 200 --trials 8 --json > s.json \
  && ok "--simulate --json" || bad "--simulate --json"
py 'import json,sys; d=json.load(sys.stdin); g=d["goodput"]
assert 0.5<g["goodput"]<1 and g["work_hours"]==200 and g["best_goodput"]>=g["goodput"]-1e-12
assert abs(g["mtbf_hours"]-54*24/419)<1e-6' s.json "goodput JSON"
# --interval: the goodput at a given interval; 10x Young is worse.
"$exe" plan "$specs/llama3-405b-16k.json" --simulate --hours 200 --trials 8 --json --interval 2117 > i.json \
  && ok "--interval" || bad "--interval"
"$py3" -c 'import json,sys; a=json.load(open("s.json"))["goodput"]; b=json.load(open("i.json"))["goodput"]
assert b["interval_s"]==2117 and b["goodput"]<a["young_daly_goodput"]-0.02, (a, b)' \
  && ok "10x the Young interval loses goodput" || bad "--interval goodput"
"$exe" plan "$specs/llama3-405b-16k.json" --simulate --interval 0 > /dev/null 2>&1; [ $? -eq 2 ] \
  && ok "bad --interval -> 2" || bad "bad --interval"
# deterministic for a seed
"$exe" plan "$specs/llama3-405b-16k.json" --simulate --hours 200 --trials 8 --json --seed 5 > a.json
"$exe" plan "$specs/llama3-405b-16k.json" --simulate --hours 200 --trials 8 --json --seed 5 > b.json
cmp -s a.json b.json && ok "simulate deterministic per seed" || bad "simulate not deterministic"

# --auto: 70B on 1024 GPUs picks a layout that fits and explains it.
"$exe" plan "$specs/llama-70b.json" --auto --world 1024 > a.txt 2> e.txt \
  && ok "70b --auto" || { bad "70b --auto"; cat e.txt; }
has a.txt "auto: " "auto summary"
has a.txt "best: " "auto best"
has a.txt "loses on" "auto explains the runner-up"
has a.txt ": fits" "auto plan fits"
# a layout llmt_job does not run yet is said beside the plan (it was
# recommended, and refused only at llmtrain train): tp beside dp on cuda
has a.txt "note: llmt_job does not run this layout yet: parallelism.tp: beside 128 data-parallel" \
  "auto: llmt_job's refusal of the best layout said"
# (on cuda a host group beside NCCL data parallelism is the limit: dp 1)
has a.txt "note: the best layout llmt_job runs today: tp[0-9]* cp[0-9]* pp[0-9]* dp1 " \
  "auto: the best layout llmt_job runs on cuda named (dp 1)"
# on the CPU (train.device emulated keeps the planner's GPU profile) ZeRO 2
# in a pipeline is the limit: the best layout llmt_job runs is named
sed 's/"device": "cuda"/"device": "emulated"/' "$specs/llama-70b.json" > emu.json
grep -q emulated emu.json || bad "llama-70b.json has no train.device cuda to replace"
"$exe" plan emu.json --auto --world 1024 > ae.txt 2> e.txt || { bad "emulated --auto"; cat e.txt; }
has ae.txt "note: llmt_job does not run this layout yet: parallelism.zero: 2 with parallelism.pp 2" \
  "auto: zero 2 with pp 2 named"
has ae.txt "note: the best layout llmt_job runs today: tp[0-9]* cp[0-9]* pp[0-9]* dp[0-9]* zero[01] " \
  "auto: the best runnable layout named"
"$exe" plan "$specs/llama-70b.json" --auto --world 1024 --json > a.json
py 'import json,sys; d=json.load(sys.stdin); g=d["degrees"]
assert g["tp"]*g["cp"]*g["pp"]*g["dp"]==1024 and d["batch"]["global"]==512
assert d["estimate"]["memory_per_gpu_bytes"]["fits"] is True
r=d["auto"]["ranking"]; s=[x["step_s"] for x in r]; assert all(a<=b*1.0001 for a,b in zip(s,s[1:])) and len(r)>1' \
  a.json "auto JSON ranking"

# --explain: the spec's layout against the planner's top five, term by term.
cal=$src/examples/specs/calibration
"$exe" plan "$cal/megatron-18b-256gpu.json" --explain > x.txt 2> e.txt \
  && ok "--explain on a calibration file" || { bad "--explain exits non-zero"; cat e.txt; }
for w in "chosen layout" "the spec's layout" "predicted step time by term" "compute" \
         "recompute" "TP comm exposed" "DP exposed" "verdict" "layouts"; do
  has x.txt "$w" "--explain shows $w"
done
has x.txt "the planner prefers #1: predicted" "--explain gives the predicted gain"
has x.txt "mostly from " "--explain names the term of the gain"
has x.txt "is not a spec key" "--explain says a calibration file's software is not applied"
# The table adds up: every column's terms sum to its step; the verdict's
# gain is the spec's step minus #1's; the ranking is sorted; the term named
# first is the one the spec spends most on over #1.
"$py3" - x.txt <<'P' && ok "--explain table adds up" || bad "--explain table does not add up"
import re, sys
t = open(sys.argv[1]).read().split("\n")
i = next(k for k, l in enumerate(t) if l.startswith("predicted step time by term"))
head = t[i + 1].split()
assert head[1] == "spec" and head[2] == "#1", head
rows = {}
for l in t[i + 2:]:
    if not l.strip():
        break
    m = re.match(r"  (.+?)\s{2,}(.*)$", l)
    rows[m.group(1).strip()] = [float(x) for x in m.group(2).split()]
step = rows.pop("step"); rows.pop("MFU %"); rows.pop("memory GB")
for c in range(len(step)):
    s = sum(v[c] for v in rows.values())
    assert abs(s - step[c]) <= 2e-3 * step[c], (c, s, step[c])
assert all(a <= b * 1.0001 for a, b in zip(step[1:], step[2:])), step
v = next(l for l in t if "the planner prefers #1" in l)
m = re.search(r"\(([\d.e+-]+) s -> ([\d.e+-]+) s per step, ([\d.e+-]+) s less\)", v)
a, b, g = map(float, m.groups())
assert abs(a - step[0]) <= 1e-3 * a and abs(b - step[1]) <= 1e-3 * b and abs(a - b - g) <= 1e-3 * a, (a, b, g)
first = next(l for l in t if "mostly from " in l)
name = re.search(r"mostly from (.+?):", first).group(1)
d = {k: v[0] - v[1] for k, v in rows.items()}
assert max(d, key=d.get) == name, (name, d)
P
# #1 is the auto-planner's choice: the same step as --auto's.
"$exe" plan "$cal/megatron-18b-256gpu.json" --auto --json > xa.json
"$py3" - x.txt xa.json <<'P' && ok "--explain #1 = --auto's plan" || bad "--explain #1 differs from --auto"
import json, re, sys
t = open(sys.argv[1]).read(); d = json.load(open(sys.argv[2]))
m = re.search(r"chosen layout \(the planner's #1\)\s+tp(\d+) cp(\d+) pp(\d+) dp(\d+)", t)
g = d["degrees"]
assert tuple(map(int, m.groups())) == (g["tp"], g["cp"], g["pp"], g["dp"]), (m.groups(), g)
st = float(re.search(r"\n  step ([\d.]+) s, MFU", t).group(1))
assert abs(st - d["estimate"]["time"]["step_s"]) < 1e-3 * st
P
# The planner's own choice, written back as a spec, is explained as such.
"$py3" -c 'import json,sys; d=json.load(open("xa.json")); json.dump(d["spec"], open("chosen.json","w"))'
"$exe" plan chosen.json --explain > y.txt 2> e.txt && ok "--explain on the chosen layout" \
  || { bad "--explain on the chosen layout"; cat e.txt; }
has y.txt "= the planner's #1" "--explain finds the spec at #1"
has y.txt "is the planner's choice" "--explain: no gain over itself"
"$exe" plan "$cal/megatron-18b-256gpu.json" --explain --json > /dev/null 2>&1; [ $? -eq 2 ] \
  && ok "--explain --json -> 2" || bad "--explain --json"

# The other examples.
for f in llama-70b gpt2-124m-1gpu moe demo-cpu; do
  "$exe" plan "$specs/$f.json" > o.txt 2> e.txt && grep -q "^  MFU" o.txt \
    && ok "$f" || { bad "$f"; cat e.txt; }
done
"$exe" plan "$specs/gpt2-124m-1gpu.json" | grep -q "= 1 " && ok "gpt2 on 1 GPU" || bad "gpt2 on 1 GPU"
"$exe" plan "$specs/moe.json" | grep -q "ep 8 inside dp" && ok "moe ep 8" || bad "moe ep 8"

# A spec without parallelism.dp takes --world.
cat > nodp.json <<'J'
{"model": {"arch": "llama", "params": 70e9},
 "parallelism": {"tp": 8, "pp": 4},
 "batch": {"micro": 1, "global": 1024}, "hardware": {"gpu": "H100-SXM"}}
J
"$exe" plan nodp.json --world 2048 > n.txt && has n.txt "tp 8 x cp 1 x pp 4 x dp 64 = 2048" "dp from --world" \
  || bad "dp from --world"
has n.txt "grad_accum 16" "grad_accum from the global batch"

# --keys: the spec's key table (doc/job-spec.md points here).
"$exe" plan --keys > k.txt && ok "--keys" || bad "--keys"
has k.txt "parallelism.virtual_stages" "--keys lists parallelism keys"
has k.txt "gpt2|llama" "--keys shows enum values"
[ "$(wc -l < k.txt)" -gt 50 ] && ok "--keys lists every key" || bad "--keys too short"

# Errors.
# A spec with dp for another world size is reshaped (global batch kept) ...
"$exe" plan "$specs/llama3-405b-16k.json" --world 8192 > r.txt 2> e.txt \
  && ok "405b on 8192: reshaped" || { bad "405b on 8192"; cat e.txt; }
has r.txt "tp 8 x cp 1 x pp 16 x dp 64 = 8192" "reshape keeps tp, pp"
has r.txt "grad_accum 32 x dp 64 = global 2048" "reshape keeps the global batch"
has r.txt "reshaped from 16384 to 8192 ranks" "reshape is noted"
# ... or a clear error when that is impossible.
"$exe" plan "$specs/llama3-405b-16k.json" --world 16256 > /dev/null 2> e.txt; rc=$?
[ $rc -eq 1 ] && grep -q "global batch 2048" e.txt && ok "reshape impossible -> 1, explained" \
  || { bad "reshape impossible (rc $rc)"; cat e.txt; }
"$exe" plan nodp.json --world 1000 > /dev/null 2> e.txt; rc=$?
[ $rc -eq 1 ] && grep -q "multiple of" e.txt && ok "world not a multiple -> 1" \
  || { bad "world not a multiple (rc $rc)"; cat e.txt; }
"$exe" plan "$specs/llama-70b.json" --auto --world 2 > /dev/null 2> e.txt; rc=$?
[ $rc -eq 1 ] && grep -q "fits" e.txt && ok "auto nothing fits -> 1" \
  || { bad "auto nothing fits (rc $rc)"; cat e.txt; }
echo '{"model": {"layers": 4, "hidden": 250, "heads": 4}, "parallelism": {"tp": 3}}' > badspec.json
"$exe" plan badspec.json > /dev/null 2> e.txt; rc=$?
[ $rc -eq 1 ] && grep -q "model.hidden" e.txt && ok "bad spec -> 1, path named" \
  || { bad "bad spec (rc $rc)"; cat e.txt; }
"$exe" plan /nonexistent.json > /dev/null 2>&1; [ $? -eq 1 ] && ok "missing file -> 1" || bad "missing file"
"$exe" plan > /dev/null 2>&1; [ $? -eq 2 ] && ok "no spec -> 2" || bad "no spec"
"$exe" plan "$specs/gpt2-124m-1gpu.json" --world x > /dev/null 2>&1; [ $? -eq 2 ] \
  && ok "bad --world -> 2" || bad "bad --world"
"$exe" plan "$specs/gpt2-124m-1gpu.json" --frob > /dev/null 2> e.txt; [ $? -eq 2 ] \
  && grep -q frob e.txt && ok "unknown flag -> 2" || bad "unknown flag"
exit $fail
