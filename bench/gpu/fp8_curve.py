#!/usr/bin/env python3
"""fp8 against bf16 over a whole training run: the same job twice through
`llmtrain train` (llmt_job), once with precision.gemm bf16 and once with
fp8 (delayed scaling; the blocks' Linear GEMMs in fp8, forward and
backward, E5M2 gradients: doc/fp8.md), on the repository's docs as the
corpus (tokenized once by `llmtrain data prepare` with a BPE of --vocab
tokens: both runs read the same tokens). Records both loss
curves step by step, both validation losses, the median tokens/s of each
(steps after the first --skip) and how far the fp8 curve is from bf16's.

    fp8_curve.py --llmtrain build/tools/llmtrain [--device cuda|emulated]
                 [--model 1b|small|tiny] [--steps 200] [--B 4] [--T 2048]
                 [--model-vocab N] [--gemms bf16,fp8] [--out DIR] [--json FILE]

--model 1b is TinyLlama-1.1B's shape (22 layers, width 2048, 32 heads, 4 kv
heads, SwiGLU 5632: bench_llama's), small a 12-layer 768-wide Llama, tiny
a 2-layer one for a check on the host emulation (--device emulated, no
GPU: the engine's arithmetic, not its speed). Both runs start from the
same seed and read the same tokens, so the curves differ only by fp8's
rounding. The summary: the mean and largest |fp8 - bf16| over the last
quarter of the steps, and the validation losses' relative difference.
Exit 0 when both runs finished with finite losses, 1 otherwise; the size
of the gap is reported, not judged (a benchmark, not a test).

--gemms bf16 runs one of the two (then nothing is compared): with
--model-vocab 32000 (the model's vocabulary, above the BPE's ids; default
--vocab) and --B 8 it is bench_llama's TinyLlama step through llmt_job,
whose median MFU (metrics.jsonl's, over the planner's model FLOPs) and
tokens/s it records beside the trainer's.
"""
import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time

SHAPES = {
    "1b": dict(layers=22, hidden=2048, heads=32, kv_heads=4, ffn=5632),
    "small": dict(layers=12, hidden=768, heads=12, kv_heads=4, ffn=2048),
    "tiny": dict(layers=2, hidden=128, heads=2, kv_heads=1, ffn=352),
}


EVAL_BATCHES = 2


def prepare(a):
    """Tokenizes the corpus once (`llmtrain data prepare`, a BPE of --vocab
    tokens) into OUT/data, which both runs read: the same tokenizer and
    tokens, whatever happens to the corpus between the runs. The share of
    validation documents grows until they hold the validation batches."""
    d = os.path.join(a.out, "data")
    need = EVAL_BATCHES * a.B * a.T
    for frac in (0.05, 0.1, 0.2, 0.3, 0.4, 0.5):
        shutil.rmtree(d, ignore_errors=True)
        subprocess.check_call([a.llmtrain, "data", "prepare", a.corpus, "--out", d,
                               "--tokenizer", "bpe:%d" % a.vocab, "--val-frac", str(frac),
                               "--quiet"])
        rep = json.load(open(os.path.join(d, "report.json")))
        if rep["val_tokens"] >= need and rep["train_tokens"] >= 4 * need:
            print("data: %d train and %d validation tokens (validation share %.2f)" % (
                rep["train_tokens"], rep["val_tokens"], frac))
            return d
    sys.exit("fp8_curve: %s is too small for %d validation batches of %d x %d tokens" % (
        a.corpus, EVAL_BATCHES, a.B, a.T))


def spec(a, gemm):
    m = dict(SHAPES[a.model], arch="llama", vocab=a.model_vocab or a.vocab, seq_len=a.T)
    warm = max(1, a.steps // 10)
    return {
        "name": "fp8-curve-" + gemm,
        "model": m,
        "precision": {"param": "bf16", "master": "fp32", "gemm": gemm},
        "batch": {"micro": a.B, "grad_accum": 1},
        "optimizer": {"type": "adamw", "lr": a.lr, "weight_decay": 0.1, "grad_clip": 1.0},
        "schedule": {"kind": "cosine", "warmup_steps": warm, "min_lr_ratio": 0.1},
        "train": {"steps": a.steps, "seed": 1337, "device": a.device,
                  "eval_interval": a.steps, "eval_batches": EVAL_BATCHES,
                  "log_interval": max(1, a.steps // 10), "sample_tokens": 0},
        "data": {"train": os.path.join(a.data, "train"), "val": os.path.join(a.data, "val"),
                 "tokenizer": {"kind": "bpe", "path": os.path.join(a.data, "tokenizer.bin")},
                 "seed": 1234},
        "checkpoint": {"dir": "ckpt", "interval": a.steps},
        "hardware": {"gpu": "H100-SXM" if a.device == "cuda" else "cpu"},
        "metrics": {"jsonl": "metrics.jsonl"},
    }


def run(a, gemm):
    d = os.path.join(a.out, gemm)
    shutil.rmtree(d, ignore_errors=True)  # a fresh run, not an earlier one's
    os.makedirs(d)
    path = os.path.join(d, "spec.json")
    with open(path, "w") as f:
        json.dump(spec(a, gemm), f, indent=1)
    t0 = time.time()
    with open(os.path.join(d, "train.log"), "w") as log:
        rc = subprocess.call([a.llmtrain, "train", path, "--out", os.path.join(d, "run")],
                             stdout=log, stderr=subprocess.STDOUT)
    wall = time.time() - t0
    # the run's end checkpoint is not needed (at 1B: 13 GB of disk)
    shutil.rmtree(os.path.join(d, "run", "ckpt"), ignore_errors=True)
    loss, tps, mfu, val = {}, [], [], None
    mpath = os.path.join(d, "run", "metrics.jsonl")
    if os.path.exists(mpath):
        for line in open(mpath):
            r = json.loads(line)
            if "event" in r:
                continue
            if "loss" in r:
                loss[r["step"]] = r["loss"]
                if r["step"] > a.skip and "tokens_per_s" in r:
                    tps.append(r["tokens_per_s"])
                if r["step"] > a.skip and "mfu" in r:
                    mfu.append(r["mfu"])
            if "val_loss" in r and r["step"] > 0:
                val = r["val_loss"]
    ok = rc == 0 and len(loss) == a.steps and all(math.isfinite(v) for v in loss.values())
    print("%-5s rc %d, %d steps in %.1f s, loss %s -> %s, validation %s, %s tok/s, MFU %s" % (
        gemm, rc, len(loss), wall, "%.4f" % loss[1] if 1 in loss else "-",
        "%.4f" % loss[a.steps] if a.steps in loss else "-",
        "%.4f" % val if val is not None else "-",
        "%.0f" % statistics.median(tps) if tps else "-",
        "%.1f%%" % (100 * statistics.median(mfu)) if mfu else "-"))
    return dict(ok=ok, rc=rc, wall_s=round(wall, 2), loss=[loss.get(k) for k in
                                                            range(1, a.steps + 1)],
                val_loss=val, tokens_per_s=statistics.median(tps) if tps else None,
                mfu=statistics.median(mfu) if mfu else None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llmtrain", required=True)
    ap.add_argument("--device", default="cuda", choices=["cuda", "emulated"])
    ap.add_argument("--model", default="1b", choices=sorted(SHAPES))
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--B", type=int, default=4)
    ap.add_argument("--T", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=4096, help="the BPE's tokens")
    ap.add_argument("--model-vocab", type=int, default=0,
                    help="model.vocab (default: --vocab; larger pads the embedding and head)")
    ap.add_argument("--gemms", default="bf16,fp8", help="which runs: bf16, fp8 or both")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--skip", type=int, default=5, help="steps left out of tokens/s")
    ap.add_argument("--corpus", default="doc")
    ap.add_argument("--out", default="/tmp/llmt-fp8-curve")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.steps < 4:
        ap.error("--steps must be >= 4")
    gemms = a.gemms.split(",")
    if not gemms or any(g not in ("bf16", "fp8") for g in gemms):
        ap.error("--gemms takes bf16, fp8 or bf16,fp8")
    if a.model_vocab and a.model_vocab < a.vocab:
        ap.error("--model-vocab must be >= --vocab")
    a.data = prepare(a)
    r = {g: run(a, g) for g in gemms}
    out = dict(case="fp8_curve_llama_%s_B%d_T%d" % (a.model, a.B, a.T), device=a.device,
               steps=a.steps, model=SHAPES[a.model], vocab=a.vocab,
               model_vocab=a.model_vocab or a.vocab, runs=r)
    if len(r) == 1:
        if a.json:
            with open(a.json, "w") as fh:
                json.dump(out, fh, indent=1)
        return 0 if all(x["ok"] for x in r.values()) else 1
    b, f = r["bf16"]["loss"], r["fp8"]["loss"]
    tail = [abs(x - y) for x, y in zip(b[-(a.steps // 4):], f[-(a.steps // 4):])
            if x is not None and y is not None]
    if tail:
        out["last_quarter_mean_abs_diff"] = sum(tail) / len(tail)
        out["last_quarter_max_abs_diff"] = max(tail)
    vb, vf = r["bf16"]["val_loss"], r["fp8"]["val_loss"]
    if vb and vf:
        out["val_loss_rel_diff"] = (vf - vb) / vb
    tb, tf = r["bf16"]["tokens_per_s"], r["fp8"]["tokens_per_s"]
    if tb and tf:
        out["fp8_speedup"] = tf / tb
    print("last quarter |fp8 - bf16|: mean %s, max %s; validation %s relative; fp8/bf16 "
          "tokens/s %s" % tuple("%.4g" % out[k] if k in out else "-" for k in (
              "last_quarter_mean_abs_diff", "last_quarter_max_abs_diff",
              "val_loss_rel_diff", "fp8_speedup")))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0 if r["bf16"]["ok"] and r["fp8"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
