#!/bin/sh
# Recovery time by checkpoint tier (issue 19): `llmtrain launch`, 4 Gloo
# workers + 1 spare on the CPU, rank 2 fails at step 7 (checkpoints every
# 2 steps, so step 6 is the newest saved):
#   local    SIGKILL: a cold gang restart reads the local root
#   peer     rank 2's parts of every step deleted (its node's disk), then
#            SIGKILL; tiers local + peer: the spare gets rank 2's part
#            back from rank 3's replica, then everyone reads the local root
#   durable  the same loss, tiers local + durable: the local steps are
#            incomplete, everyone reads the durable copy
#   inplace  SIGKILL under `launch --in-place`: ranks 0, 1, 3 stay in their
#            processes and restore in place (memory tier); only rank 2
#            starts again and reads its part from disk
#   memory   no process dies: NaN gradients on rank 2 under the rollback
#            policy, every rank restores in place from the memory tier
#            (every rank's snapshot share, gathered)
#   nodes    two agents as two nodes (2 workers each, the spare on node
#            0) sharing one root: SIGKILL of rank 2 (node 1), the gang
#            restarts from the local root (the agents' own cost of a
#            restart across nodes, beside nodelocal's)
#   nodelocal two agents as two nodes (2 workers each, the spare on node
#            0), each with its own root, tiers local + durable: the steps
#            commit in the durable tier; SIGKILL of rank 2 (node 1): the
#            gang restarts, rank 2 on node 0, every part read from the
#            nodes' own roots (rank 2's from the durable copy) and
#            exchanged (tier node-local)
# Recovery = the agent's detection of the failure to the end of the new
# gang's first step (events.jsonl "recovered"); for memory, the restore
# plus the first step after it (the NaN is detected by the step itself).
# restore_s = the job's own time to read its tier (metrics "restore" line).
# usage: bench/ft/recovery.sh path/to/llmtrain [TRIALS [HIDDEN [LAYERS]]]
# Writes bench/results/ft-recovery-STAMP.json and prints a table.
set -u
trials=${2:-3}
hidden=${3:-128}
layers=${4:-2}
. "$(dirname "$0")/setup.sh"
ft_setup "$1"
mk() { # file tiers anomaly
  cat > "$1" <<JSON
{"name": "ftbench",
 "model": {"arch": "gpt2", "layers": $layers, "hidden": $hidden, "heads": 2, "vocab": 320,
           "seq_len": 32},
 "batch": {"micro": 1, "global": 8},
 "optimizer": {"lr": 1e-3},
 "train": {"steps": 10, "seed": 3, "eval_interval": 0, "log_interval": 1, "threads": 1,
           "sample_tokens": 0},
 "data": {"train": "$tmp/corpus", "tokenizer": {"kind": "byte"}},
 "checkpoint": {"interval": 2, "async": false $2},
 "fault_tolerance": {"collective_timeout_s": 20 $3},
 "hardware": {"gpu": "cpu"}}
JSON
}
mk local.json "" ""
mk peer.json ', "tiers": [{"kind": "local"}, {"kind": "peer"}]' ""
mk durable.json ", \"tiers\": [{\"kind\": \"local\"}, {\"kind\": \"durable\", \"path\": \"$tmp/durable\"}]" ""
mk memory.json "" ', "anomaly": {"policy": "rollback"}'
mk nodelocal.json ", \"tiers\": [{\"kind\": \"local\"}, {\"kind\": \"durable\", \"path\": \"$tmp/durable\"}]" ""
res=$tmp/res.jsonl
: > "$res"
i=0
while [ "$i" -lt "$trials" ]; do
  i=$((i + 1))
  for c in local inplace peer durable memory nodes nodelocal; do
    extra=
    case $c in
    local | nodes | nodelocal) f=kill:2:7 ;;
    inplace) f=kill:2:7 extra=--in-place ;;
    peer | durable) f=losedisk:2:7 ;;
    memory) f=nan:2:7 ;;
    esac
    rm -rf "$tmp/durable"
    o=$c$i
    spec=$c.json
    [ $c = inplace ] || [ $c = nodes ] && spec=local.json
    events=$o/agent/events.jsonl
    if [ $c = nodes ] || [ $c = nodelocal ]; then
      o1=$o-1
      [ $c = nodes ] && o1=$o # one root for both
      mkdir "rdzv$c$i"
      LLMT_FAULT=$f "$exe" launch --out "$o" --nproc 2 --spares 1 --nnodes 2 --node-rank 0 \
        --rdzv "rdzv$c$i" "$spec" > "$o.log" 2>&1 &
      p0=$!
      LLMT_FAULT=$f "$exe" launch --out "$o1" --nproc 2 --nnodes 2 --node-rank 1 \
        --rdzv "rdzv$c$i" "$spec" > "$o-1.log" 2>&1 &
      p1=$!
      wait $p1
      wait $p0 || { echo "bench: $c trial $i failed:"; tail -20 "$o.log"; exit 1; }
      events=$o/agent/node-0/events.jsonl
    else
      LLMT_FAULT=$f "$exe" launch --out "$o" --nproc 4 --spares 1 $extra "$spec" > "$o.log" 2>&1 ||
        { echo "bench: $c trial $i failed:"; tail -20 "$o.log"; exit 1; }
    fi
    python3 - "$c" "$i" "$o" "$events" >> "$res" <<'PY' || exit 1
import json, sys, glob
case, trial, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ev = [json.loads(l) for l in open(sys.argv[4])]
met = [json.loads(l) for l in open(out + "/metrics.jsonl")]
r = {"case": case, "trial": trial}
rest = [m for m in met if m.get("event") == "restore"]
if not rest:
    sys.exit("bench: %s: no restore line in rank 0's metrics" % case)
r["tier"] = rest[-1]["tier"]
r["restore_s"] = rest[-1]["restore_s"]
r["restored_step"] = rest[-1]["step"]
if case == "memory":
    # no agent event: the rollback happens inside the job. Recovery is
    # the restore plus the first step after it (rank 0's step_s), the
    # detection being the failed step's own result
    rb = [m for m in met if m.get("event") == "anomaly" and m.get("action") == "rollback"]
    if not rb:
        sys.exit("bench: memory: no rollback logged")
    i = met.index(rb[0])
    nxt = [m for m in met[i:] if "loss" in m and "step_s" in m]
    if not nxt:
        sys.exit("bench: memory: no step after the rollback")
    r["recovery_s"] = r["restore_s"] + nxt[0]["step_s"]
    r["resume_step"] = rb[0]["now_at"]
    r["lost_steps"] = rb[0]["lost_steps"]
else:
    rec = [e for e in ev if e["event"] == "recovered"]
    fail = [e for e in ev if e["event"] == "failure"]
    if not rec or not fail:
        sys.exit("bench: %s: no failure/recovered event" % case)
    r["recovery_s"] = rec[0]["recovery_s"]
    r["resume_step"] = rec[0]["resume_step"]
    r["lost_steps"] = rec[0]["lost_steps"]
    r["mode"] = rec[0].get("mode", "gang")
print(json.dumps(r))
PY
    tail -1 "$res"
  done
done
stamp=$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$top/bench/results"
python3 - "$res" "$top/bench/results/ft-recovery-$stamp.json" "$hidden" "$layers" "$trials" <<'PY'
import json, sys, statistics, platform, os
rows = [json.loads(l) for l in open(sys.argv[1])]
out = {"bench": "ft-recovery", "hidden": int(sys.argv[3]), "layers": int(sys.argv[4]),
       "trials": int(sys.argv[5]), "machine": platform.node(), "cpus": os.cpu_count(),
       "load": os.getloadavg()[0], "rows": rows, "summary": {}}
print("%-9s %-10s %12s %12s" % ("case", "tier", "recovery_s", "restore_s"))
for c in ["local", "inplace", "peer", "durable", "memory", "nodes", "nodelocal"]:
    rs = [r for r in rows if r["case"] == c]
    if not rs:
        continue
    med = lambda k: statistics.median(r[k] for r in rs)
    out["summary"][c] = {"tier": rs[0]["tier"], "recovery_s_median": med("recovery_s"),
                         "restore_s_median": med("restore_s"),
                         "recovery_s_min": min(r["recovery_s"] for r in rs),
                         "recovery_s_max": max(r["recovery_s"] for r in rs)}
    print("%-9s %-10s %12.3f %12.4f" % (c, rs[0]["tier"], med("recovery_s"), med("restore_s")))
json.dump(out, open(sys.argv[2], "w"), indent=1)
print("results in", sys.argv[2])
PY
