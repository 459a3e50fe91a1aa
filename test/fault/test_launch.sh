#!/bin/sh
# llmtrain launch (the fault-tolerance agent) on a tiny GPT-2 on the CPU,
# 4 workers + 1 spare over Gloo, against an uninterrupted run.
# usage: test_launch.sh path/to/llmtrain CASE [TRIALS]
#   sigkill   TRIALS (3) kills of a random rank at a random step: the job
#             finishes, every step's loss (after recovery too) equals the
#             uninterrupted run's, recovery time and lost steps reported
#   sigstop   a stopped rank is detected within the timeout, named, replaced
#   elastic   two kills with one spare: the second continues on dp 2 with
#             the same global batch (grad_accum 2 -> 4)
#   budget    --max-restarts 0: the agent stops with the reason
#   nan       NaN in one rank's gradients: skip (parameters unchanged:
#             the step's loss is not logged and the run goes on) and
#             rollback (restored to the last checkpoint), both logged
# Exit 77 without the gloo build feature.
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
case_=$2
trials=${3:-3}
"$exe" features 2>/dev/null | grep -qw gloo || { echo "no gloo in this build"; exit 77; }
fail=0
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
ok() { printf 'ok   %s\n' "$1"; }
bad() { printf 'FAIL %s\n' "$1"; fail=1; }
mkdir corpus && cp "${LLMT_SOURCE_ROOT:?}"/doc/*.md corpus/ || exit 1
mk() { # file extra-fault-tolerance-keys
  cat > "$1" <<JSON
{"name": "ft",
 "model": {"arch": "gpt2", "layers": 1, "hidden": 32, "heads": 2, "vocab": 320, "seq_len": 16},
 "batch": {"micro": 1, "global": 8},
 "optimizer": {"lr": 1e-2},
 "train": {"steps": 14, "seed": 3, "eval_interval": 0, "log_interval": 1, "threads": 1,
           "sample_tokens": 0},
 "data": {"train": "$tmp/corpus", "tokenizer": {"kind": "byte"}},
 "checkpoint": {"interval": 2, "async": false},
 "fault_tolerance": {"collective_timeout_s": 6 $2},
 "hardware": {"gpu": "cpu"}}
JSON
}
mk ft.json ""
# the newest loss of each step in a metrics file, "step loss" lines
losses() {
  python3 -c '
import json, sys
d = {}
for l in open(sys.argv[1]):
    j = json.loads(l)
    if "loss" in j:
        d[j["step"]] = j["loss"]
for s in sorted(d):
    print(s, "%.6f" % d[s])' "$1"
}
launch() { # out log [launch args...]
  o=$1; l=$2; shift 2
  "$exe" launch --out "$o" "$@" > "$l" 2>&1
}
ref() {
  launch ref ref.log --nproc 4 --spares 1 ft.json || { bad "uninterrupted run"; cat ref.log; exit 1; }
  losses ref/metrics.jsonl > ref.loss
  [ "$(wc -l < ref.loss)" -eq 14 ] && ok "uninterrupted run: 14 steps on 4 Gloo ranks" ||
    bad "reference losses: $(cat ref.loss)"
}

case $case_ in
sigkill)
  ref
  seed=$$
  i=0
  while [ $i -lt "$trials" ]; do
    i=$((i + 1))
    r=$(( (seed + i * 7) % 4 ))
    s=$(( 3 + (seed / 3 + i * 5) % 10 ))
    out=k$i
    LLMT_FAULT=kill:$r:$s launch $out $out.log --nproc 4 --spares 1 ft.json ||
      { bad "trial $i (kill rank $r at step $s): the job did not finish"; cat $out.log; continue; }
    grep -q "rank $r (slot $r) failed .*killed by signal 9" $out.log ||
      bad "trial $i: the failure of rank $r not named: $(grep launch: $out.log)"
    grep -q "spare slot 4 promoted to rank $r" $out.log || bad "trial $i: no spare promoted"
    losses $out/metrics.jsonl > $out.loss
    if cmp -s ref.loss $out.loss; then
      ok "trial $i: kill rank $r at step $s: all 14 losses equal the uninterrupted run's"
    else
      bad "trial $i: losses differ"; diff ref.loss $out.loss
    fi
    rec=$(grep '"recovered"' $out/agent/events.jsonl)
    [ -n "$rec" ] && ok "trial $i: $(echo "$rec" | sed 's/.*"resume_step"/resume_step/; s/}//')" ||
      bad "trial $i: no recovery event"
  done
  ;;
sigstop)
  ref
  LLMT_FAULT=hang:1:6 launch h h.log --nproc 4 --spares 1 --heartbeat-timeout 3 ft.json ||
    { bad "the job did not finish after a SIGSTOP"; cat h.log; }
  grep -q "rank 1 (slot 1) failed .*stopped" h.log && ok "stopped rank 1 named" ||
    bad "rank 1 not named: $(grep launch: h.log)"
  grep -q "spare slot 4 promoted to rank 1" h.log && ok "spare promoted to rank 1" ||
    bad "no spare for rank 1"
  # detected within the timeout: from the last heartbeat before it to detection
  python3 - h/agent/events.jsonl <<'EOF' || fail=1
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
f = [e for e in ev if e["event"] == "failure"]
g0 = [e for e in ev if e["event"] == "generation"]
if not f:
    print("FAIL no failure event"); sys.exit(1)
print("ok   detected %.2f s after the launch (timeout 6 s for collectives, 3 s heartbeat)" % f[0]["detect_s"])
EOF
  losses h/metrics.jsonl > h.loss
  cmp -s ref.loss h.loss && ok "losses equal the uninterrupted run's" || { bad "losses differ"; diff ref.loss h.loss; }
  ;;
elastic)
  ref
  LLMT_FAULT=kill:1:4,kill:2:9@1 launch e e.log --nproc 4 --spares 1 ft.json ||
    { bad "the job did not finish after two failures"; cat e.log; }
  grep -q "spare slot 4 promoted to rank 1" e.log && ok "first failure: spare promoted" ||
    bad "first failure: $(grep launch: e.log)"
  grep -q "continuing elastically on 2 data-parallel ranks (was 4)" e.log &&
    ok "second failure: elastic continue on dp 2 (3 does not divide the global batch 8)" ||
    bad "second failure: $(grep launch: e.log)"
  grep -q '"event":"resume","step":[0-9]*,"world_size":2' e/metrics.jsonl &&
    ok "resumed under world size 2" || bad "no resume at world 2: $(grep event e/metrics.jsonl)"
  [ "$(losses e/metrics.jsonl | wc -l)" -eq 14 ] && ok "all 14 steps done" || bad "steps missing"
  ;;
budget)
  LLMT_FAULT=kill:3:3 launch b b.log --nproc 4 --spares 1 --max-restarts 0 ft.json &&
    bad "the agent succeeded with no restart budget"
  grep -q "restart budget is spent" b.log && ok "stops with the reason: $(grep 'budget' b.log | head -1)" ||
    { bad "no budget message"; cat b.log; }
  mk mr.json ', "max_restarts": 0'
  LLMT_FAULT=kill:3:3 launch m m.log --nproc 4 mr.json && bad "spec max_restarts 0 ignored"
  grep -q "restart budget is spent" m.log && ok "fault_tolerance.max_restarts 0 takes effect" ||
    { bad "spec budget"; cat m.log; }
  "$exe" train mr.json --out t > t.log 2>&1 && bad "llmtrain train ran with max_restarts"
  grep -q "fault_tolerance.max_restarts: 0 is the restart budget of the agent" t.log &&
    ok "llmtrain train alone refuses fault_tolerance.max_restarts by name" || { bad "refusal"; cat t.log; }
  ;;
nan)
  mk skip.json ', "anomaly": {"policy": "skip"}'
  LLMT_FAULT=nan:1:5 launch s s.log --nproc 2 skip.json || { bad "nan/skip run"; cat s.log; }
  grep -q '"event":"anomaly","step":5,"kind":"nonfinite","action":"skip"' s/metrics.jsonl &&
    ok "NaN at step 5 on rank 1: skipped, logged" || { bad "no skip event"; grep event s/metrics.jsonl; }
  mk rb.json ', "anomaly": {"policy": "rollback"}'
  LLMT_FAULT=nan:1:7 launch r r.log --nproc 2 rb.json || { bad "nan/rollback run"; cat r.log; }
  grep -q '"event":"anomaly","step":7,"kind":"nonfinite","action":"rollback","now_at":6' r/metrics.jsonl &&
    ok "NaN at step 7 on rank 1: rolled back to step 6, logged" ||
    { bad "no rollback event"; grep event r/metrics.jsonl; }
  ;;
*) echo "unknown case $case_"; exit 2 ;;
esac
exit $fail
