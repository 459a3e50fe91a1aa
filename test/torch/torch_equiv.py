#!/usr/bin/python3
"""PyTorch reference for the training engine (suite 'torch').

Runs test/torch/torch_driver (our engine through the public ABI) on a tiny
GPT-2 or Llama-style model, then rebuilds the same model here, written
independently with torch ops in float64, from the exported safetensors and
the same batches, and compares:
  - step-0 loss: relative difference <= 1e-5
  - every gradient: max|ours - torch| <= 1e-4 * max|torch| + 1e-7 per tensor
  - 10 AdamW steps (torch.optim.AdamW, no decay on 1-D params, global-norm
    clipping, warmup + cosine LR computed here): each loss rel <= 1e-4,
    each LR rel <= 1e-6, each pre-clip grad norm rel <= 1e-4.
Exits 77 (SKIP) when torch is absent.
usage: torch_equiv.py DRIVER gpt2|llama
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except Exception as e:  # noqa: BLE001
    print("SKIP: torch/numpy not importable:", e)
    sys.exit(77)

torch.set_default_dtype(torch.float64)


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in hdr.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32"
        a, b = t["data_offsets"]
        arr = np.frombuffer(data[a:b], dtype="<f4").reshape(t["shape"])
        out[name] = torch.tensor(arr.astype(np.float64), requires_grad=True)
    return out


def attention(q, k, v, T):
    # q: (B, nh, T, hd), k/v: (B, nh, T, hd)
    hd = q.shape[-1]
    att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    att = att.masked_fill(~mask, float("-inf"))
    return F.softmax(att, dim=-1) @ v


def gpt2_loss(P, cfg, idx, tgt):
    B, T = idx.shape
    C, nh, L = cfg["width"], cfg["heads"], cfg["layers"]
    hd = C // nh
    eps = cfg["eps"]
    x = P["wte"][idx] + P["wpe"][:T]
    for l in range(L):
        p = lambda s: P["h.%d.%s" % (l, s)]  # noqa: E731
        h = F.layer_norm(x, (C,), p("ln_1.weight"), p("ln_1.bias"), eps)
        qkv = h @ p("attn.c_attn.weight").T + p("attn.c_attn.bias")
        q, k, v = qkv.split(C, dim=-1)
        q, k, v = [t.view(B, T, nh, hd).transpose(1, 2) for t in (q, k, v)]
        y = attention(q, k, v, T).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p("attn.c_proj.weight").T + p("attn.c_proj.bias")
        h = F.layer_norm(x, (C,), p("ln_2.weight"), p("ln_2.bias"), eps)
        h = F.gelu(h @ p("mlp.c_fc.weight").T + p("mlp.c_fc.bias"),
                   approximate="tanh")
        x = x + h @ p("mlp.c_proj.weight").T + p("mlp.c_proj.bias")
    x = F.layer_norm(x, (C,), P["ln_f.weight"], P["ln_f.bias"], eps)
    logits = x @ P["wte"].T
    V = cfg["vocab"]
    return F.cross_entropy(logits[..., :V].reshape(-1, V), tgt.reshape(-1),
                           ignore_index=-1, reduction="sum")


def rms(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rope(x, theta):
    # x: (B, h, T, hd); rotate-half pairing (i, i + hd/2)
    T, hd = x.shape[2], x.shape[3]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1)
    sin = torch.cat([ang.sin(), ang.sin()], -1)
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    rot = torch.cat([-x2, x1], -1)
    return x * cos + rot * sin


def llama_loss(P, cfg, idx, tgt):
    B, T = idx.shape
    C, nh, nkv, L = cfg["width"], cfg["heads"], cfg["kv_heads"], cfg["layers"]
    hd = C // nh
    eps = cfg["eps"]
    x = P["tok_embeddings"][idx]
    for l in range(L):
        p = lambda s: P["layers.%d.%s" % (l, s)]  # noqa: E731
        h = rms(x, p("attention_norm.weight"), eps)
        qkv = h @ p("attention.wqkv.weight").T
        q, k, v = qkv.split([nh * hd, nkv * hd, nkv * hd], dim=-1)
        q = q.view(B, T, nh, hd).transpose(1, 2)
        k = k.view(B, T, nkv, hd).transpose(1, 2)
        v = v.view(B, T, nkv, hd).transpose(1, 2)
        q, k = rope(q, cfg["theta"]), rope(k, cfg["theta"])
        k = k.repeat_interleave(nh // nkv, dim=1)
        v = v.repeat_interleave(nh // nkv, dim=1)
        y = attention(q, k, v, T).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p("attention.wo.weight").T
        h = rms(x, p("ffn_norm.weight"), eps)
        g = F.silu(h @ p("feed_forward.w1.weight").T)
        u = h @ p("feed_forward.w3.weight").T
        x = x + (g * u) @ p("feed_forward.w2.weight").T
    x = rms(x, P["norm.weight"], eps)
    logits = x @ P["output.weight"].T
    V = cfg["vocab"]
    return F.cross_entropy(logits[..., :V].reshape(-1, V), tgt.reshape(-1),
                           ignore_index=-1, reduction="sum")


def lr_at(cfg, s):
    lr, mn, w, n = cfg["lr"], cfg["min_lr"], cfg["warmup"], cfg["steps"]
    if s < w:
        return lr * (s + 1) / w
    p = (s - w) / (n - w)
    return mn + 0.5 * (1 + math.cos(math.pi * p)) * (lr - mn)


def main():
    driver, arch = sys.argv[1], sys.argv[2]
    failures = []

    def check(ok, msg):
        print(("ok   " if ok else "FAIL ") + msg)
        if not ok:
            failures.append(msg)

    with tempfile.TemporaryDirectory() as d:
        subprocess.run([driver, arch, d], check=True)
        res = json.load(open(os.path.join(d, "result.json")))
        P = load_safetensors(os.path.join(d, "params.safetensors"))
        names = res["names"]
        check(sorted(P) == sorted(names), "safetensors holds every parameter")
        grads = np.fromfile(os.path.join(d, "grads.bin"), dtype="<f4")
        tok = np.fromfile(os.path.join(d, "batches.bin"), dtype="<i4")
    B, T, A = res["B"], res["T"], res["accum"]
    per = B * A * T
    lossf = gpt2_loss if arch == "gpt2" else llama_loss

    def batch(st):
        base = st * 2 * per
        idx = torch.tensor(tok[base:base + per].astype(np.int64)).view(B * A, T)
        tgt = torch.tensor(tok[base + per:base + 2 * per].astype(np.int64)).view(B * A, T)
        return idx, tgt

    # step 0: loss and gradients
    idx, tgt = batch(0)
    count = int((tgt >= 0).sum())
    loss = lossf(P, res, idx, tgt) / count
    loss.backward()
    rel = abs(res["loss0"] - loss.item()) / abs(loss.item())
    check(rel <= 1e-5, "%s loss %.8f vs torch %.8f (rel %.2e <= 1e-5)"
          % (arch, res["loss0"], loss.item(), rel))
    off = 0
    worst = 0.0
    for n in names:
        t = P[n]
        k = t.numel()
        ours = torch.tensor(grads[off:off + k].astype(np.float64)).view(t.shape)
        off += k
        ref = t.grad
        err = (ours - ref).abs().max().item()
        tol = 1e-4 * ref.abs().max().item() + 1e-7
        worst = max(worst, err / tol)
        if err > tol:
            check(False, "grad %s: max err %.3e > tol %.3e" % (n, err, tol))
    check(worst <= 1.0, "%s: all %d gradients within 1e-4*max|g|+1e-7 "
          "(worst err/tol %.3f)" % (arch, len(names), worst))

    # 10 AdamW steps
    for t in P.values():
        t.grad = None
    decay = [P[n] for n in names if P[n].dim() == 2]
    nodecay = [P[n] for n in names if P[n].dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": res["wd"]},
                             {"params": nodecay, "weight_decay": 0.0}],
                            lr=res["lr"], betas=(res["beta1"], res["beta2"]),
                            eps=res["adam_eps"])
    for st in range(res["steps"]):
        idx, tgt = batch(st)
        count = int((tgt >= 0).sum())
        opt.zero_grad()
        loss = lossf(P, res, idx, tgt) / count
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(P.values()), res["clip"])
        lr = lr_at(res, st)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        lrel = abs(res["losses"][st] - loss.item()) / abs(loss.item())
        nrel = abs(res["norms"][st] - norm.item()) / norm.item()
        rrel = abs(res["lrs"][st] - lr) / lr
        check(lrel <= 1e-4 and nrel <= 1e-4 and rrel <= 1e-6,
              "%s step %d: loss %.7f vs %.7f (rel %.1e), norm rel %.1e, "
              "lr rel %.1e" % (arch, st + 1, res["losses"][st], loss.item(),
                               lrel, nrel, rrel))
    if failures:
        print("%d check(s) failed" % len(failures))
        sys.exit(1)


main()
