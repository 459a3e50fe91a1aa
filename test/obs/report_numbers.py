#!/usr/bin/env python3
"""The numbers a run reports, recomputed here from raw facts
(doc/observability.md), through `llmtrain train`, `llmtrain report` and
the files they write:

- every perf line of metrics.jsonl: tokens_per_s = tokens per step /
  wall_s, mfu (hfu) = model (hw) FLOPs / wall_s / (the calibration line's
  peak x world), model FLOPs = a count made here from the shape (6 N
  tokens + 12 L S h tokens, the vocabulary padded to 64), the parts and
  unaccounted add up to wall_s;
- checkpoint stalls: the perf lines' ckpt_s summed over a process's steps
  equal the goodput line's ckpt_stall_s at each save;
- a run resumed from an older checkpoint (steps 8 and 9 removed, resumed
  at 4, stopped at 7): the report's series and medians, and the loss plot,
  hold each step once, from the history that was kept (no step 8 or 9 of
  the abandoned one); the Prometheus textfile's llmtrain_step is 7,
  llmtrain_steps_total 3 (the steps this process ran), its loss and step
  seconds those of the last step, the text follows the exposition format;
- a MoE run: its per-step "moe" lines are not drawn as events.

  report_numbers.py LLMTRAIN CORPUS_DIR
"""
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

L, H, FF, V, S, MICRO, ACCUM = 2, 64, 256, 320, 64, 2, 2
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL: " + what)


def close(a, b, rel, what, abs_tol=0.0):
    check(a is not None and b is not None and
          abs(a - b) <= rel * abs(b) + abs_tol, "%s: %r vs %r" % (what, a, b))


def spec(steps, moe=False):
    model = {"arch": "gpt2", "layers": L, "hidden": H, "heads": 4, "ffn": FF, "vocab": V,
             "seq_len": S}
    if moe:
        model = {"arch": "llama", "layers": 2, "hidden": H, "heads": 4, "kv_heads": 2,
                 "ffn": FF, "vocab": V, "seq_len": S,
                 "moe": {"experts": 4, "top_k": 2, "expert_ffn": 64}}
    return {"name": "numbers", "model": model,
            "batch": {"micro": MICRO, "grad_accum": ACCUM}, "optimizer": {"lr": 1e-3},
            "train": {"steps": steps, "seed": 3, "eval_interval": 3, "eval_batches": 1,
                      "log_interval": 1, "threads": 1},
            "data": {"train": CORPUS, "tokenizer": {"kind": "byte"}},
            "checkpoint": {"interval": 4}, "hardware": {"gpu": "cpu"}}


def run(*args):
    r = subprocess.run([LLMTRAIN] + list(args), capture_output=True, text=True,
                       errors="replace", timeout=240)
    if r.returncode != 0:
        print(r.stdout[-2000:], r.stderr[-2000:])
    check(r.returncode == 0, "llmtrain %s: exit %d" % (" ".join(args), r.returncode))
    return r


def lines(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def kept_history(ls, pred):
    """The lines pred picks, one per step: a step seen again drops the
    earlier run of it and of the steps after it."""
    out = []
    for l in ls:
        if pred(l):
            while out and out[-1]["step"] >= l["step"]:
                out.pop()
            out.append(l)
    return out


def check_perf_lines(ls):
    """Each perf line against the calibration line of its process."""
    N = L * (4.0 * H * H + 2.0 * H * FF) + V * H
    tokens = MICRO * ACCUM * S
    want_flops = tokens * (6 * N + 12.0 * L * S * H)
    cal, n, saves, saved = None, 0, 0, None
    stall = 0.0
    for l in ls:
        ev = l.get("event")
        if ev in ("start", "resume"):
            cal, stall = None, 0.0
        elif ev == "calibration":
            cal = l
            close(l["tokens_per_step"], tokens, 0, "calibration tokens_per_step")
        elif ev == "perf":
            n += 1
            check(cal is not None, "perf line of step %d before a calibration line" % l["step"])
            if cal is None:
                continue
            w = l["wall_s"]
            peak = cal["peak_flops"] * cal["world"]
            close(l["model_flops"], want_flops, 0.01, "step %d model_flops" % l["step"])
            close(l["tokens_per_s"], cal["tokens_per_step"] / w, 2e-3,
                  "step %d tokens_per_s" % l["step"], 0.1)
            close(l["mfu"], l["model_flops"] / w / peak, 2e-3, "step %d mfu" % l["step"])
            close(l["hfu"], l["hw_flops"] / w / peak, 2e-3, "step %d hfu" % l["step"])
            close(l["peak_flops"], cal["peak_flops"], 1e-5, "step %d peak_flops" % l["step"])
            parts = (l["compute_s"] + l["optimizer_s"] + sum(l["comm_s"].values()) +
                     l["bubble_s"] + l["data_s"] + l["ckpt_s"] + l["other_s"] +
                     l["unaccounted_s"])
            close(parts, w, 0, "step %d parts + unaccounted vs wall_s" % l["step"], 1.5e-5)
            check(l["mem_in_use"] > 0 and l["mem_peak"] >= l["mem_in_use"],
                  "step %d memory %d, peak %d" % (l["step"], l["mem_in_use"], l["mem_peak"]))
            stall += l["ckpt_s"]
            if saved is not None:  # the save's line comes before its step's perf line
                close(stall, saved["ckpt_stall_s"], 0, "ckpt_s summed to step %d vs goodput "
                      "ckpt_stall_s" % saved["step"], 1e-3)
                check(saved["step"] == l["step"], "goodput save at %d, perf of step %d" %
                      (saved["step"], l["step"]))
                saves += 1
            saved = None
        elif ev == "goodput" and l.get("when") == "save":
            saved = l
    check(n > 0 and saves >= 3, "%d perf lines, %d saves checked" % (n, saves))


def prom(path):
    """{name: value} of the samples (labels dropped); checks the format."""
    types, vals = {}, {}
    with open(path) as f:
        for ln in f.read().splitlines():
            m = re.match(r"# TYPE (\S+) (\S+)$", ln)
            if m:
                check(m.group(1) not in types, "prom: TYPE %s twice" % m.group(1))
                types[m.group(1)] = m.group(2)
                continue
            if ln.startswith("#"):
                continue
            m = re.match(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$', ln)
            check(m is not None, "prom: sample line %r" % ln)
            if not m:
                continue
            name, v = m.group(1), m.group(3)
            check(name in types, "prom: %s without a TYPE line before it" % name)
            check(re.match(r"^([-+]?[0-9.]+([eE][-+]?[0-9]+)?|NaN|[+-]Inf)$", v) is not None,
                  "prom: %s value %r" % (name, v))
            check(types.get(name) != "counter" or name.endswith("_total"),
                  "prom: counter %s without _total" % name)
            vals[name] = float(v)
    return vals


def svg_points(text, attr):
    m = re.search(r'<polyline[^>]*%s[^>]*points="([^"]*)"' % attr, text)
    if not m:
        return []
    return [tuple(map(float, p.split(","))) for p in m.group(1).split()]


def main():
    tmp = tempfile.mkdtemp(prefix="llmt-numbers-")
    d = os.path.join(tmp, "run")
    sp = os.path.join(tmp, "spec.json")
    with open(sp, "w") as f:
        json.dump(spec(10), f)
    run("train", sp, "--out", d, "--steps", "9")
    ck = os.path.join(d, "ckpt")
    steps = sorted(x for x in os.listdir(ck) if x.startswith("step-"))
    check(len(steps) == 3, "checkpoints %s (want steps 4, 8, 9)" % steps)
    for x in steps[1:]:  # back to step 4: steps 5..9 of this history are abandoned
        shutil.rmtree(os.path.join(ck, x))
    run("train", sp, "--out", d, "--resume", "--steps", "7")
    run("report", d)

    ls = lines(os.path.join(d, "metrics.jsonl"))
    check_perf_lines(ls)
    perf = kept_history(ls, lambda l: l.get("event") == "perf")
    loss = kept_history(ls, lambda l: "event" not in l and "loss" in l)
    val = kept_history(ls, lambda l: "event" not in l and "val_loss" in l)
    check([l["step"] for l in perf] == list(range(1, 8)),
          "kept perf steps %s" % [l["step"] for l in perf])

    # Prometheus: the last step of the resumed process
    pv = prom(os.path.join(d, "metrics.prom"))
    check(pv.get("llmtrain_step") == 7, "llmtrain_step %s" % pv.get("llmtrain_step"))
    check(pv.get("llmtrain_steps_total") == 3,
          "llmtrain_steps_total %s (steps 5-7 of this process)" % pv.get("llmtrain_steps_total"))
    close(pv.get("llmtrain_loss"), loss[-1]["loss"], 0, "prom loss", 1e-6)
    close(pv.get("llmtrain_step_seconds"), perf[-1]["wall_s"], 0, "prom step seconds", 1e-6)
    close(pv.get("llmtrain_mfu_ratio"), perf[-1]["mfu"], 1e-5, "prom mfu")

    # the report: one point per kept step, medians of the kept steps
    with open(os.path.join(d, "report.html")) as f:
        html = f.read()
    pts = svg_points(html, 'data-name="loss"')
    xs = [p[0] for p in pts]
    check(len(pts) == len(loss) == 7, "report loss points %d, kept steps %d" % (len(pts), len(loss)))
    check(xs == sorted(set(xs)), "report loss x not increasing: %s" % xs)
    check(html.count("<title>rank 0 step ") == 7,
          "report heatmap cells %d" % html.count("<title>rank 0 step "))
    m = re.search(r"<tr><td>step time \(s\)</td><td>[^<]*</td><td>([^<]*)</td>", html)
    want = statistics.median(l["wall_s"] for l in perf)
    check(m is not None and m.group(1) == "%.4g" % want,
          "report median step time %s, want %.4g" % (m and m.group(1), want))
    m = re.search(r"<tr><td>MFU</td><td>[^<]*</td><td>([^<]*)</td>", html)
    want = statistics.median(l["mfu"] for l in perf)
    check(m is not None and m.group(1) == "%.4g" % want,
          "report median MFU %s, want %.4g" % (m and m.group(1), want))

    # the peak each MFU divides by: the planner's hardware.peak_tflops
    # (0.5 TFLOP/s in the "cpu" row of the hardware table), the measured
    # one's the calibration
    cal = [l for l in ls if l.get("event") == "calibration"][-1]
    m = re.search(r"<tr><td>peak FLOP/s per device</td><td>([^<]*)</td><td>([^<]*)</td>", html)
    check(m is not None and m.groups() == ("%.4g" % 5e11, "%.4g" % cal["peak_flops"]),
          "report peaks %s, want planner %.4g, measured %.4g" %
          (m and m.groups(), 5e11, cal["peak_flops"]))

    # the loss plot: the kept history only (no step 8 or 9)
    with open(os.path.join(d, "loss.svg")) as f:
        svg = f.read()
    tr = svg_points(svg, 'stroke="#1f77b4"')
    check(len(tr) == 7, "loss.svg train points %d, want 7" % len(tr))
    check(svg.count("<circle") == len(val),
          "loss.svg validation points %d, kept %d" % (svg.count("<circle"), len(val)))

    # a MoE run: its per-step lines are statistics, not events
    dm = os.path.join(tmp, "moe")
    with open(sp, "w") as f:
        json.dump(spec(3, moe=True), f)
    run("train", sp, "--out", dm)
    run("report", dm)
    nmoe = sum(1 for l in lines(os.path.join(dm, "metrics.jsonl")) if l.get("event") == "moe")
    with open(os.path.join(dm, "report.html")) as f:
        html = f.read()
    check(nmoe == 3, "moe lines %d" % nmoe)
    check(": moe</li>" not in html and "moe at step" not in html,
          "the report lists the moe lines as events")

    if failures:
        print("%d failure(s); files kept in %s" % (len(failures), tmp))
        return 1
    shutil.rmtree(tmp)
    print("report-numbers: ok")
    return 0


if __name__ == "__main__":
    LLMTRAIN, CORPUS = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    sys.exit(main())
