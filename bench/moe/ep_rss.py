#!/usr/bin/env python3
"""Resident memory of `mpirun -np 4 llmtrain train` on the MoE demo spec
(examples/specs/moe-demo-cpu.json: 128 experts of 64, 4 layers) under dp 4
with ep 1, 2 and 4 (ZeRO 0, micro 2, byte tokenizer, one thread a rank):
each rank's VmRSS sampled every 0.2 s from /proc; "steady" is the median
of a rank's samples over the last half of its life (the steps); "peak" is
the kernel's maxrss over the whole run (set by the final checkpoint's
save, which gathers every expert into the model's tensors); "setup peak"
is a rank's VmHWM when the first step's line reaches metrics.jsonl (the
trainer, its engine and data parallelism made, one step run), all
averaged over the 4 ranks.

    python3 bench/moe/ep_rss.py BUILD/tools/llmtrain [STEPS] > out.json

Issue 18: expert parallelism holds only E/ep experts per rank
(doc/moe.md, Memory). Not a test: the numbers depend on the machine's
allocator and load; it prints them for the doc."""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def spec(ep, steps, path):
    with open(os.path.join(ROOT, "examples/specs/moe-demo-cpu.json")) as f:
        s = json.load(f)
    s["name"] = "moe-ep%d" % ep
    s["parallelism"] = {"tp": 1, "pp": 1, "dp": 4, "ep": ep, "zero": 0}
    s["batch"] = {"micro": 2, "grad_accum": 1}
    s["schedule"]["warmup_steps"] = 1
    s["train"].update({"steps": steps, "eval_interval": 0, "eval_batches": 1,
                       "log_interval": 1, "sample_tokens": 0})
    s["checkpoint"] = {"dir": "ckpt", "interval": 100000, "async": False,
                       "tiers": [{"kind": "local", "path": "ckpt", "keep_last": 1}]}
    s["data"] = {"tokenizer": {"kind": "byte"}, "seed": 1234}
    s["model"]["vocab"] = 320
    with open(path, "w") as f:
        json.dump(s, f)


def rss_kb(pid, key="VmRSS:"):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def first_step(run_dir):
    try:
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            return any(line.startswith('{"step":') for line in f)
    except OSError:
        return False


def ranks(tag):
    out = subprocess.run(["pgrep", "-f", "llmtrain train %s" % tag], capture_output=True,
                         text=True).stdout.split()
    pids = []
    for p in out:  # the ranks, not mpirun nor the time wrappers
        try:
            with open("/proc/%s/comm" % p) as f:
                if f.read().strip() == "llmtrain":
                    pids.append(int(p))
        except OSError:
            pass
    return pids


def run(exe, ep, steps, work):
    js = os.path.join(work, "ep%d.json" % ep)
    spec(ep, steps, js)
    env = dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none",
               LLMT_COMM_TIMEOUT_MS="300000")
    cmd = ["mpirun", "-np", "4", "--oversubscribe", "--allow-run-as-root", "-x",
           "LLMT_COMM_TIMEOUT_MS", "/usr/bin/time", "-f", "maxrss_kb %M", exe, "train", js,
           "--out", os.path.join(work, "run%d" % ep), "--threads", "1"]
    t0 = time.time()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    samples = {}
    setup = None
    while p.poll() is None:
        pids = ranks(js)
        for pid in pids:
            r = rss_kb(pid)
            if r:
                samples.setdefault(pid, []).append((time.time(), r))
        if setup is None and pids and first_step(os.path.join(work, "run%d" % ep)):
            hwm = [h for h in (rss_kb(pid, "VmHWM:") for pid in pids) if h]
            setup = statistics.mean(hwm) if len(hwm) == len(pids) else None
        time.sleep(0.2)
    log = p.stdout.read()
    if p.returncode != 0:
        sys.exit("ep %d failed:\n%s" % (ep, log))
    peak = [int(l.split()[1]) for l in log.splitlines() if l.startswith("maxrss_kb")]
    steady = []
    for pid, s in samples.items():
        if len(s) < 4:
            continue
        a, b = s[0][0], s[-1][0]
        late = [r for t, r in s if t >= (a + b) / 2]
        steady.append(statistics.median(late))
    return {"ep": ep, "ranks_sampled": len(steady),
            "steady_rss_mb": round(statistics.mean(steady) / 1024, 1) if steady else None,
            "peak_rss_mb": round(statistics.mean(peak) / 1024, 1) if peak else None,
            "setup_peak_mb": round(setup / 1024, 1) if setup else None,
            "wall_s": round(time.time() - t0, 1)}


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    exe = os.path.abspath(sys.argv[1])
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    with tempfile.TemporaryDirectory() as work:
        rows = [run(exe, ep, steps, work) for ep in (1, 2, 4)]
    json.dump({"exe": exe, "steps": steps, "load": os.getloadavg(), "runs": rows},
              sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
