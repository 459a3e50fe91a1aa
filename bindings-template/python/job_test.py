"""A real job from Python (issue 21): build a spec, train a tiny GPT for 20
steps on a corpus prepared from the repo's doc/*.md, save at 10, resume in
a new Job and finish; the per-step losses equal `llmtrain train` on the same
spec. Then a resume under 2 processes (mpirun, when present) equals the
CLI's 2-process resume from the same checkpoint. Errors carry the library's
message; misuse raises, never crashes.

usage: job_test.py LIBLLMTRAIN LLMTRAIN_EXE   (run by meson: test python-job)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
if len(sys.argv) > 1:
    os.environ["LLMT_LIB"] = sys.argv[1]
import llmtrain  # noqa: E402

fails = 0


def check(cond, what):
    global fails
    print(("ok   " if cond else "FAIL ") + what)
    fails += 0 if cond else 1


def losses(path):
    out = {}
    for line in open(path):
        d = json.loads(line)
        if "loss" in d and "event" not in d:
            out[d["step"]] = line.split('"loss":')[1].split(",")[0]
    return out


def spec_for(corpus):
    return {"name": "bind",
            "model": {"arch": "gpt2", "layers": 1, "hidden": 32, "heads": 2,
                      "vocab": 320, "seq_len": 16},
            "batch": {"micro": 2, "grad_accum": 1},
            "optimizer": {"lr": 1e-2},
            "train": {"steps": 20, "seed": 3, "eval_interval": 0, "log_interval": 0,
                      "threads": 1, "sample_tokens": 0},
            "data": {"train": corpus, "tokenizer": {"kind": "byte"}},
            "checkpoint": {"interval": 10},
            "hardware": {"gpu": "cpu"}}


def mpi_part():
    """Run by each rank under mpirun: resume from run_dir, run to the end."""
    spec, run_dir = sys.argv[3], sys.argv[4]
    with llmtrain.Job(spec, run_dir=run_dir, resume=True) as job:
        info = job.info()
        job.run()
        print("rank %d of %d resumed at %d" % (info["rank"], info["world_size"],
                                               info["start_step"]))


def numpy_part():
    """numpy views of the model (zero-copy) and evaluate's NaN error."""
    try:
        import numpy as np
    except ImportError:
        print("SKIP part: no numpy for this python (model views not checked)")
        return
    m = llmtrain.Model(vocab_size=64, max_seq_len=16, layers=1, width=16, heads=2)
    w = m.param(0)
    w[0, 0] = float("nan")
    check(m.param(0)[0, 0] != m.param(0)[0, 0], "param views are zero-copy")
    tr = llmtrain.Trainer(m, micro_batch=2, seq_len=8, threads=1)
    x = np.zeros((2, 8), np.int32)
    try:
        tr.evaluate(x, x)
        check(False, "NaN evaluate raises")
    except llmtrain.Error as e:
        check(e.status == 19, "evaluate NaN: %s" % str(e)[:90])
    tr.close()
    m.close()


def main():
    exe = sys.argv[2]
    src = os.path.dirname(os.path.dirname(HERE))
    tmp = tempfile.mkdtemp(prefix="llmt-pyjob-")
    try:
        corpus = os.path.join(tmp, "corpus")
        os.makedirs(corpus)
        for f in os.listdir(os.path.join(src, "doc")):
            if f.endswith(".md"):
                shutil.copy(os.path.join(src, "doc", f), corpus)
        spec = spec_for(corpus)
        spec_path = os.path.join(tmp, "spec.json")
        json.dump(spec, open(spec_path, "w"))

        # the reference: the CLI on the same spec
        ref = os.path.join(tmp, "ref")
        r = subprocess.run([exe, "train", spec_path, "--out", ref],
                           capture_output=True, text=True)
        check(r.returncode == 0, "llmtrain train (reference) ran")

        run = os.path.join(tmp, "py")
        with llmtrain.Job(spec, run_dir=run, stop_at=10) as job:
            info = job.info()
            check(info["world_size"] == 1 and info["steps"] == 20, "job info: world 1, 20 steps")
            check(job.plan().degrees()["dp"] == 1, "the job's plan: dp 1")
            seen = [m for m in job.steps()]
            check([m["step"] for m in seen] == list(range(1, 11)), "steps 1..10 iterated")
            job.finish()
        check(os.path.isdir(os.path.join(run, "ckpt", "step-000000000010")), "checkpoint of step 10")
        with llmtrain.Job(spec, run_dir=run, resume=True) as job:
            check(job.info()["start_step"] == 10, "resumed at step 10")
            last = job.run()
            check(last["step"] == 20, "ran to step 20")
            mine_last = "%.6f" % last["loss"]
        a, b = losses(os.path.join(ref, "metrics.jsonl")), losses(os.path.join(run, "metrics.jsonl"))
        check(sorted(a) == list(range(1, 21)) and a == b,
              "per-step losses equal llmtrain train's (20 steps, save + resume)")
        check(mine_last == a.get(20), "last metrics from Python equal the CLI's (%s)" % mine_last)

        # errors: the library's message, the bad key named
        try:
            llmtrain.Spec(dict(spec, model=dict(spec["model"], no_such_key=1)))
            check(False, "bad spec key raises")
        except llmtrain.Error as e:
            check("no_such_key" in str(e) and e.status == 10, "bad key named: %s" % str(e).splitlines()[-1])
        try:
            llmtrain.Job(dict(spec, parallelism={"tp": 2}), run_dir=os.path.join(tmp, "tp"))
            check(False, "a refused key raises")
        except llmtrain.Error as e:
            check("parallelism.tp" in str(e), "refused key named: %s" % str(e)[:100])

        # misuse: use after close, double close, None for a handle
        job = llmtrain.Job(spec, run_dir=os.path.join(tmp, "m"), stop_at=1)
        p = job.plan()
        job.close()
        job.close()
        for what, fn in (("step", job.step), ("plan after job close", p.degrees)):
            try:
                fn()
                check(False, "use after close raises (%s)" % what)
            except llmtrain.Error as e:
                check("closed" in str(e), "use after close raises Error (%s)" % what)
        try:
            llmtrain.Trainer(None)
            check(False, "None model raises")
        except llmtrain.Error as e:
            check(e.status == 2, "None where a Model is required: Error")

        numpy_part()

        # resume under another process count: 2 ranks (mpirun)
        mpirun = shutil.which("mpirun")
        if not mpirun or "mpi" not in llmtrain.features():
            print("SKIP part: no mpirun or no MPI in this build (2-process resume not run)")
        else:
            for d in ("cli2", "py2"):
                shutil.copytree(os.path.join(ref, "ckpt"), os.path.join(tmp, d, "ckpt"))
                shutil.rmtree(os.path.join(tmp, d, "ckpt", "step-000000000020"))
                open(os.path.join(tmp, d, "ckpt", "latest"), "w").write("step-000000000010\n")
                shutil.copytree(os.path.join(ref, "data"), os.path.join(tmp, d, "data"))
            mp = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2"]
            env = dict(os.environ, OMPI_MCA_rmaps_base_oversubscribe="1")
            r1 = subprocess.run(mp + [exe, "train", spec_path, "--out", os.path.join(tmp, "cli2"),
                                      "--resume"], capture_output=True, text=True, env=env, timeout=120)
            r2 = subprocess.run(mp + [sys.executable, os.path.abspath(__file__), sys.argv[1], exe,
                                      spec_path, os.path.join(tmp, "py2"), "--mpi-part"],
                                capture_output=True, text=True, env=env, timeout=120)
            check(r1.returncode == 0 and r2.returncode == 0,
                  "2-process resumes ran (CLI rc %d, Python rc %d)" % (r1.returncode, r2.returncode))
            if r2.returncode:
                print(r2.stdout[-2000:], r2.stderr[-2000:])
            c2 = losses(os.path.join(tmp, "cli2", "metrics.jsonl"))
            p2 = losses(os.path.join(tmp, "py2", "metrics.jsonl"))
            check(sorted(p2) == list(range(11, 21)) and p2 == c2,
                  "resume under 2 processes: losses 11..20 equal the CLI's")
            check("rank 1 of 2 resumed at 10" in r2.stdout, "Python rank 1 of 2 resumed at 10")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("python-job: %d failure(s)" % fails)
    return 1 if fails else 0


if __name__ == "__main__":
    if sys.argv[-1] == "--mpi-part":
        mpi_part()
        sys.exit(0)
    sys.exit(main())
