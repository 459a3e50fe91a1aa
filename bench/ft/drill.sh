#!/bin/sh
# Goodput drill (issue 19): `llmtrain launch` trains for MINUTES while a
# failure injector SIGKILLs a random worker at exponentially distributed
# times (job-wide MTBF seconds), and the run's measured goodput is set
# beside llmt_plan_simulate_goodput's prediction for the same failure rate
# (the agent's report: the rate the run saw, and the drill's MTBF through
# --expect-mtbf), with the checkpoint interval, the stall per save and
# the restart time this run measured (doc/fault-tolerance.md, Goodput).
#
# usage: bench/ft/drill.sh path/to/llmtrain [MINUTES [MTBF_S [SEED]]] [-- launch flags]
#   MINUTES  the drill's length (30); the step count is set from a short
#            uninterrupted calibration run so that the drill takes about
#            that long with its failures
#   MTBF_S   job-wide mean time between failures, seconds (60)
#   SEED     the injector's random seed (1)
#   after --: more `llmtrain launch` flags (e.g. --in-place)
# Environment: DRILL_NPROC (4 workers), DRILL_HIDDEN (128), DRILL_LAYERS
# (2), DRILL_INTERVAL (checkpoint every 10 steps), DRILL_RESULTS (the
# markdown file to append a section to; default bench/results/ft-drill.md;
# "none" writes nothing), DRILL_CHECK (a tolerance: exit 1 unless the
# measured goodput is within DRILL_CHECK + 3 standard deviations of the
# simulator's trials of both predictions; the slow test uses it).
# Gang restarts by default: every failure restarts all the workers from
# the newest checkpoint (spares are slots, so each failure takes a new one).
set -u
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
shift
minutes=30 mtbf=60 seed=1
[ $# -gt 0 ] && [ "$1" != -- ] && { minutes=$1; shift; }
[ $# -gt 0 ] && [ "$1" != -- ] && { mtbf=$1; shift; }
[ $# -gt 0 ] && [ "$1" != -- ] && { seed=$1; shift; }
[ $# -gt 0 ] && [ "$1" = -- ] && shift
top=$(cd "$(dirname "$0")/../.." && pwd)
"$exe" features 2>/dev/null | grep -qw gloo || { echo "no gloo in this build"; exit 77; }
nproc=${DRILL_NPROC:-4}
hidden=${DRILL_HIDDEN:-128}
layers=${DRILL_LAYERS:-2}
ival=${DRILL_INTERVAL:-10}
results=${DRILL_RESULTS:-$top/bench/results/ft-drill.md}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/corpus" && cp "$top"/doc/*.md "$tmp/corpus/" || exit 1
mk() { # file steps
  cat > "$1" <<JSON
{"name": "drill",
 "model": {"arch": "gpt2", "layers": $layers, "hidden": $hidden, "heads": 2, "vocab": 320,
           "seq_len": 32},
 "batch": {"micro": 1, "global": 8},
 "optimizer": {"lr": 1e-3},
 "train": {"steps": $2, "seed": 3, "eval_interval": 0, "log_interval": 0, "threads": 1,
           "sample_tokens": 0},
 "data": {"train": "$tmp/corpus", "tokenizer": {"kind": "byte"}},
 "checkpoint": {"interval": $ival, "async": false},
 "fault_tolerance": {"collective_timeout_s": 20},
 "hardware": {"gpu": "cpu"}}
JSON
}
mk "$tmp/template.json" STEPS
python3 - "$exe" "$tmp" "$minutes" "$mtbf" "$seed" "$nproc" "$results" \
  "${DRILL_CHECK:-}" "$hidden" "$layers" "$ival" "$@" <<'PY'
import json, os, random, signal, subprocess, sys, time

exe, tmp, minutes, mtbf, seed, nproc, results, check = sys.argv[1:9]
hidden, layers, ival = sys.argv[9:12]
extra = sys.argv[12:]
minutes, mtbf, seed, nproc = float(minutes), float(mtbf), int(seed), int(nproc)
os.chdir(tmp)

def events(out):
    try:
        return [json.loads(l) for l in open(out + "/agent/events.jsonl")]
    except (OSError, ValueError):
        return []

def launch(out, steps, more):
    with open("spec-%s.json" % out, "w") as f:
        f.write(open("template.json").read().replace("STEPS", str(steps)))
    log = open(out + ".log", "w")
    cmd = [exe, "launch", "--out", out, "--nproc", str(nproc)] + more + ["spec-%s.json" % out]
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), cmd

def goodput(out):
    g = [e for e in events(out) if e.get("event") == "goodput"]
    if not g:
        sys.exit("drill: %s: no goodput event; log:\n%s" % (out, open(out + ".log").read()[-3000:]))
    return g[-1]

# 1. calibration: an uninterrupted run gives the cycle (step + overheads)
p, _ = launch("calib", 3 * int(ival), [])
if p.wait() != 0:
    sys.exit("drill: the calibration run failed:\n" + open("calib.log").read()[-3000:])
cal = goodput("calib")
cycle = cal["cycle_s"]
stall = cal["ckpt_stall_s"] / max(cal["saves"], 1)
# steps so that work + stalls + the expected failures' costs fill MINUTES
# (a failure costs roughly the restart plus half an interval)
per_step = cycle + stall / float(ival)
fail_cost = 2.0 + 0.5 * float(ival) * cycle
budget = minutes * 60.0 * (1.0 - fail_cost / mtbf)
steps = max(int(budget / per_step), 2 * int(ival))
spares = min(int(3 * minutes * 60.0 / mtbf) + 4, 250 - nproc)
print("drill: cycle %.3f s, stall %.3f s per save: %d steps for %.1f min, MTBF %.0f s, "
      "%d spare slots, seed %d" % (cycle, stall, steps, minutes, mtbf, spares, seed))
sys.stdout.flush()

# 2. the drill: SIGKILL a random live worker at exponential intervals
rng = random.Random(seed)
more = ["--spares", str(spares), "--max-restarts", "100000", "--expect-mtbf", str(mtbf)] + extra
p, cmd = launch("drill", steps, more)
t0 = time.time()
kills = []
nxt = t0 + rng.expovariate(1.0 / mtbf)
while p.poll() is None:
    time.sleep(0.02)
    if time.time() < nxt:
        continue
    nxt += rng.expovariate(1.0 / mtbf)
    live = {}
    for e in events("drill"):
        if e.get("event") == "spawn":
            live[e["rank"]] = e["pid"]
    pids = []
    for r, pid in sorted(live.items()):
        try:
            with open("/proc/%d/stat" % pid) as f:
                st = f.read().rsplit(")", 1)[1].split()
            if st[0] not in ("Z", "X") and int(st[1]) == p.pid:  # a worker of this agent
                pids.append((r, pid))
        except (OSError, IndexError, ValueError):
            pass
    if not pids:
        continue
    r, pid = rng.choice(pids)
    try:
        os.kill(pid, signal.SIGKILL)
        kills.append((round(time.time() - t0, 2), r))
    except OSError:
        pass
rc = p.wait()
wall = time.time() - t0
log = open("drill.log").read()
if rc != 0:
    sys.exit("drill: the run failed (exit %d):\n%s" % (rc, log[-4000:]))
g = goodput("drill")
ev = events("drill")
rec = [e["recovery_s"] for e in ev if e.get("event") == "recovered"]
rec.sort()
lines = [l for l in log.splitlines() if l.startswith("launch: goodput")]
print("\n".join(lines))
print("drill: %d kills injected; the agent saw %d failure(s), %d recoveries (median %.2f s)"
      % (len(kills), g["failures"], len(rec), rec[len(rec) // 2] if rec else 0))

res = {"minutes": minutes, "wall_s": round(wall, 1), "mtbf_s": mtbf, "seed": seed,
       "nproc": nproc, "hidden": int(hidden), "layers": int(layers), "interval": int(ival),
       "steps": steps, "launch": extra, "kills": kills, "recovery_s": rec, "agent": g}
if results != "none":
    stamp = time.strftime("%Y%m%d-%H%M%S")
    jpath = os.path.join(os.path.dirname(results), "ft-drill-%s.json" % stamp)
    with open(jpath, "w") as f:
        json.dump(res, f, indent=1)
    new = not os.path.exists(results)
    with open(results, "a") as f:
        if new:
            f.write("# Goodput drills (bench/ft/drill.sh)\n\n"
                    "Measured goodput of `llmtrain launch` under injected SIGKILLs at a set "
                    "job-wide MTBF, beside llmt_plan_simulate_goodput's prediction for the "
                    "same rate with this run's measured costs (the agent's goodput event). "
                    "doc/fault-tolerance.md explains the accounting.\n")
        f.write("\n## %s: %.1f-minute drill (wall %.1f min), MTBF %.0f s, seed %d\n\n"
                % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), minutes, wall / 60,
                   mtbf, seed))
        f.write("GPT-2 %s layers width %s, %d Gloo workers, checkpoint every %s steps (sync), "
                "%d steps of %.3f s; launch flags: %s; load average at the end %.1f; "
                "`sh bench/ft/drill.sh build/tools/llmtrain %g %g %d%s`\n\n"
                % (layers, hidden, nproc, ival, g["steps"], g["cycle_s"],
                   " ".join(more), os.getloadavg()[0], minutes, mtbf, seed,
                   " -- " + " ".join(extra) if extra else ""))
        f.write("| | goodput | failures | useful work | lost to failures (detection + restart"
                " + recomputed) | checkpoint stalls | other |\n|---|---|---|---|---|---|---|\n")
        f.write("| measured | %.3f | %d | %.1f s | %.1f s (%.1f + %.1f + %.1f, %d steps) | "
                "%.1f s (%d saves) | %.1f s |\n"
                % (g["goodput"], g["failures"], g["work_s"], g["failures_s"], g["detect_s"],
                   g["restart_s"], g["recomputed_s"], g["recomputed_steps"],
                   g["ckpt_stall_s"], g["saves"], g["other_s"]))
        f.write("| simulator, the rate seen (%.3g per GPU-hour) | %.3f +- %.3f | | | restart "
                "%.2f s per failure | %.3f s per save | |\n"
                % (g["failures_per_gpu_hour"], g["simulated_goodput"], g["simulated_sd"],
                   g["sim_restart_s"], g["ckpt_stall_s"] / max(g["saves"], 1)))
        f.write("| simulator, the drill's MTBF (%.3g per GPU-hour) | %.3f +- %.3f | | | | | |\n"
                % (g["expected_failures_per_gpu_hour"], g["expected_goodput"],
                   g["expected_sd"]))
        f.write("\nRecoveries (detection to the next completed step): %s s.\n"
                % ", ".join("%.2f" % x for x in rec))
    print("drill: wrote %s and %s" % (results, jpath))

if check:
    tol = float(check)
    bad = 0
    for name, key, sd in (("the rate seen", "simulated_goodput", "simulated_sd"),
                          ("the drill's MTBF", "expected_goodput", "expected_sd")):
        d = abs(g["goodput"] - g[key])
        lim = tol + 3 * g[sd]
        ok = d <= lim
        bad |= not ok
        print("%s measured %.3f vs predicted %.3f for %s: |diff| %.3f %s %.3f (%.2f + 3 x %.3f)"
              % ("ok  " if ok else "FAIL", g["goodput"], g[key], name, d, "<=" if ok else ">",
                 lim, tol, g[sd]))
    if g["failures"] < 1 or not kills:
        print("FAIL no failure was injected or seen")
        bad = 1
    sys.exit(1 if bad else 0)
PY
rc=$?
exit $rc
