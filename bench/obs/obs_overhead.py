#!/usr/bin/env python3
"""What observability costs a step (issue 20): the same CPU run with the
engine's ops untimed (llmtrain train --no-op-timing --prom ""), with the
default metrics (every op timed, the Prometheus textfile rewritten each
step), and with a trace of every step (--trace). Runs are interleaved
(off, on, trace, off, ...) so drift hits every mode alike; per run the
median step time over the plain steps (no validation, no checkpoint, not
the first), per mode the median over the runs. Target: on vs off < 1%.

  obs_overhead.py LLMTRAIN CORPUS_DIR [--quick] [--rounds N] [--steps N]
                  [--json FILE]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

MODES = {
    "off": ["--no-op-timing", "--prom", ""],
    "on": [],
    "trace": ["--trace", "1-100000"],
}


def spec(corpus, steps):
    return {"name": "obs-bench",
            "model": {"arch": "gpt2", "layers": 4, "hidden": 128, "heads": 4, "ffn": 512,
                      "vocab": 320, "seq_len": 128},
            "batch": {"micro": 4, "grad_accum": 1}, "optimizer": {"lr": 1e-3},
            "train": {"steps": steps, "seed": 3, "eval_interval": 100000, "eval_batches": 1,
                      "threads": 1},
            "data": {"train": corpus, "tokenizer": {"kind": "byte"}},
            "checkpoint": {"interval": 100000}, "hardware": {"gpu": "cpu"}}


def one_run(cli, spec_path, out, mode):
    r = subprocess.run([cli, "train", spec_path, "--out", out] + MODES[mode],
                       capture_output=True, text=True, errors="replace")
    if r.returncode:
        sys.exit("llmtrain train (%s) failed:\n%s" % (mode, r.stderr[-2000:]))
    walls, ops = [], None
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            d = json.loads(line)
            if d.get("event") == "calibration":
                ops = d.get("timed_ops")
            if d.get("event") == "perf" and d["step"] > 1 and d["ckpt_s"] == 0 \
                    and d["other_s"] < 0.05 * d["wall_s"]:
                walls.append(d["wall_s"])
    if not walls:
        sys.exit("no perf lines in %s/metrics.jsonl" % out)
    nev = 0
    if mode == "trace":
        with open(os.path.join(out, "trace-rank0.json")) as f:
            nev = sum(1 for e in json.load(f) if e.get("ph") == "X")
    return statistics.median(walls), ops, nev


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("llmtrain")
    ap.add_argument("corpus")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=0)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--json")
    a = ap.parse_args()
    rounds = a.rounds or (2 if a.quick else 7)
    steps = a.steps or (8 if a.quick else 40)
    tmp = tempfile.mkdtemp(prefix="llmt-obs-bench-")
    sp = os.path.join(tmp, "spec.json")
    with open(sp, "w") as f:
        json.dump(spec(a.corpus, steps), f)
    res = {m: [] for m in MODES}
    timed, trace_events = {}, 0
    t0 = time.time()
    for r in range(rounds):
        for m in MODES:
            out = os.path.join(tmp, "%s-%d" % (m, r))
            w, ops, nev = one_run(a.llmtrain, sp, out, m)
            res[m].append(w)
            timed[m] = ops
            trace_events = max(trace_events, nev)
            subprocess.run(["rm", "-rf", out])
    med = {m: statistics.median(v) for m, v in res.items()}
    best = {m: min(v) for m, v in res.items()}
    over = {m: (med[m] - med["off"]) / med["off"] * 100 for m in ("on", "trace")}
    over_best = {m: (best[m] - best["off"]) / best["off"] * 100 for m in ("on", "trace")}
    print("obs overhead: %d rounds x %d steps, model 4x128 seq 128 micro 4, 1 thread"
          % (rounds, steps))
    for m in MODES:
        print("  %-5s median step %.3f ms  (runs: %s)%s" % (
            m, med[m] * 1e3, " ".join("%.3f" % (x * 1e3) for x in res[m]),
            "" if m == "off" else "  %+.2f%% vs off" % over[m]))
    # the least disturbed run of each mode (other work on the machine only
    # ever adds time)
    print("  fastest run: " + ", ".join("%s %.3f ms" % (m, best[m] * 1e3) for m in MODES) +
          "; on %+.2f%%, trace %+.2f%% vs off" % (over_best["on"], over_best["trace"]))
    per_step = trace_events / steps if steps else 0
    print("  trace: %d events (%.0f per step); timed_ops reported: %s"
          % (trace_events, per_step, timed))
    doc = {"bench": "obs_overhead", "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
           "host": platform.node(), "cpu": platform.processor() or platform.machine(),
           "nproc": os.cpu_count(), "rounds": rounds, "steps": steps,
           "median_step_s": med, "runs_step_s": res, "overhead_pct": over,
           "fastest_run_step_s": best, "overhead_pct_fastest": over_best,
           "trace_events_per_step": per_step, "timed_ops": timed,
           "seconds": round(time.time() - t0, 1),
           "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:])}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
        print("wrote", a.json)
    subprocess.run(["rm", "-rf", tmp])
    return 0


if __name__ == "__main__":
    sys.exit(main())
