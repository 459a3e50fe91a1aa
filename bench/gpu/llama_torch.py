#!/usr/bin/env python3
"""PyTorch peer for bench_llama: the same Llama-style model (RMSNorm, RoPE
rotating the pairs (i, i + hd/2) as llmtrain does, grouped-query attention
through SDPA, SwiGLU MLP, untied head; torchtitan's layout of separate
wq/wk/wv/wo and w1/w3/w2), fp32 weights with bf16 autocast, fused AdamW
(betas 0.9/0.95, lr 3e-4, no weight decay), grad-norm clip 1.0, one fixed
random batch, torch.compile. Prints and writes tokens/s, MFU (the planner's
model FLOPs, as bench_llama counts them; 6N beside it) and peak memory
(torch.cuda.max_memory_allocated) per batch size. A batch size that runs
out of memory is recorded as {"oom": true} and the next one runs.

    python3 bench/gpu/llama_torch.py [--model 1b|tiny] [--B 2,4,8] [--T 2048]
        [--steps 10] [--json F] [--peak-tflops 989] [--eager] [--repeat-kv]

Exits 77 without torch or without a GPU.
"""
import argparse
import gc
import json
import math
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("SKIP: no torch")
    sys.exit(77)

WARMUP = 3
H100_SXM_BF16_TFLOPS = 989.0
# bench_llama.c's shapes: "1b" is TinyLlama-1.1B's.
SHAPES = {
    "1b": dict(L=22, C=2048, nh=32, nkv=4, F=5632, V=32000),
    "tiny": dict(L=2, C=256, nh=4, nkv=2, F=704, V=32000),
}


def model_flops_per_token(s, T):
    """The planner's count (lib/plan/cost.c, llmt__plan_estimate), as in
    bench_llama.c: 3 * (2 L (P_attn + P_mlp) + 2 V h + L * 2 * 2 * S * h),
    P_attn = 2 h^2 + 2 h g d, P_mlp = 3 h f, S = T (attention core without
    the causal halving)."""
    L, h, a, g, f, V = s["L"], s["C"], s["nh"], s["nkv"], s["F"], s["V"]
    d = h / a
    p_attn = 2 * h * h + 2 * h * g * d
    p_mlp = 3 * h * f
    return 3 * (2 * L * (p_attn + p_mlp) + 2 * V * h + L * 2 * 2 * T * h)


class RMSNorm(nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.type_as(x) * self.weight


def rope(x, cos, sin):
    """x [B, T, heads, hd]; rotates (x[i], x[i + hd/2]) by pos * theta^(-2i/hd)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[: x.shape[1], None, :], sin[: x.shape[1], None, :]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).type_as(x)


class Attention(nn.Module):
    def __init__(self, C, nh, nkv, gqa):
        super().__init__()
        self.nh, self.nkv, self.hd, self.gqa = nh, nkv, C // nh, gqa
        self.wq = nn.Linear(C, C, bias=False)
        self.wk = nn.Linear(C, nkv * self.hd, bias=False)
        self.wv = nn.Linear(C, nkv * self.hd, bias=False)
        self.wo = nn.Linear(C, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        q = rope(self.wq(x).view(B, T, self.nh, self.hd), cos, sin).transpose(1, 2)
        k = rope(self.wk(x).view(B, T, self.nkv, self.hd), cos, sin).transpose(1, 2)
        v = self.wv(x).view(B, T, self.nkv, self.hd).transpose(1, 2)
        if self.gqa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            # query head j reads kv head j // (nh / nkv), as llmtrain's kernels do
            r = self.nh // self.nkv
            y = F.scaled_dot_product_attention(q, k.repeat_interleave(r, dim=1),
                                               v.repeat_interleave(r, dim=1), is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(B, T, C))


class FeedForward(nn.Module):
    def __init__(self, C, hidden):
        super().__init__()
        self.w1 = nn.Linear(C, hidden, bias=False)
        self.w3 = nn.Linear(C, hidden, bias=False)
        self.w2 = nn.Linear(hidden, C, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, s, gqa):
        super().__init__()
        self.attention_norm = RMSNorm(s["C"])
        self.attention = Attention(s["C"], s["nh"], s["nkv"], gqa)
        self.ffn_norm = RMSNorm(s["C"])
        self.feed_forward = FeedForward(s["C"], s["F"])

    def forward(self, x, cos, sin):
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self, s, T, gqa, theta=10000.0):
        super().__init__()
        self.V = s["V"]
        self.tok_embeddings = nn.Embedding(s["V"], s["C"])
        self.layers = nn.ModuleList([Block(s, gqa) for _ in range(s["L"])])
        self.norm = RMSNorm(s["C"])
        self.output = nn.Linear(s["C"], s["V"], bias=False)
        hd = s["C"] // s["nh"]
        inv_freq = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
        ang = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)
        # llmtrain's initialisation: N(0, 0.02), residual projections
        # N(0, 0.02 / sqrt(2 L)), norm weights 1
        for n, p in self.named_parameters():
            if p.dim() == 2:
                resid = n.endswith(("wo.weight", "w2.weight"))
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * s["L"]) if resid else 0.02)

    def forward(self, idx, targets):
        x = self.tok_embeddings(idx)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin)
        logits = self.output(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, self.V), targets.view(-1))


def flash_gqa_available():
    """True when SDPA's flash backend takes enable_gqa (torch >= 2.5, bf16):
    without it enable_gqa would fall back to the unfused math backend."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        q = torch.randn(1, 4, 128, 64, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, 2, 128, 64, device="cuda", dtype=torch.bfloat16)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=True)
        torch.cuda.synchronize()
        return True
    except Exception:  # TypeError (no enable_gqa), RuntimeError (no kernel)
        return False


def run(a, s, B, gqa, peak):
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Llama(s, a.T, gqa)
    nparams = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.0, fused=True)
    fwd = model if a.eager else torch.compile(model, dynamic=False)
    idx = torch.randint(0, s["V"], (B, a.T + 1), device="cuda")
    x, y = idx[:, :-1].contiguous(), idx[:, 1:].contiguous()

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    t0 = time.perf_counter()
    loss0 = step()
    for _ in range(WARMUP - 1):
        step()
    compile_s = time.perf_counter() - t0
    dts = []
    for _ in range(a.steps):
        t = time.perf_counter()
        loss = step()
        dts.append(time.perf_counter() - t)
    dts.sort()
    med = dts[len(dts) // 2]
    tps = B * a.T / med
    mf, f6 = model_flops_per_token(s, a.T), 6.0 * nparams
    peak_mem = torch.cuda.max_memory_allocated()
    name = f"llama_{a.model}_B{B}_T{a.T}"
    lnv = math.log(s["V"])
    trains = lnv - 0.8 < loss0 < lnv + 1.2 and loss < loss0 - 0.1
    print(f"torch{' eager' if a.eager else '.compile'} {name}: step median {med * 1e3:.2f} ms "
          f"{tps:8.0f} tok/s  MFU {100 * mf * tps / peak:.1f}% (6N: {100 * f6 * tps / peak:.1f}%)"
          f"  loss {loss0:.3f} -> {loss:.3f}  peak {peak_mem / 2**30:.2f} GiB "
          f"(warm-up incl. compile {compile_s:.0f} s)", flush=True)
    return {"name": name, "B": B, "T": a.T, "median_step_ms": med * 1e3,
            "min_step_ms": dts[0] * 1e3, "tokens_per_s": tps, "steps": a.steps,
            "mfu": mf * tps / peak, "mfu_6n": f6 * tps / peak, "model_flops_per_token": mf,
            "flops_6n_per_token": f6, "tflops": mf * tps / 1e12, "peak_tflops": a.peak_tflops,
            "loss_first": loss0, "loss_last": loss, "trains": trains,
            "peak_device_bytes": peak_mem, "params": nparams, "compiled": not a.eager}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="1b", choices=sorted(SHAPES))
    ap.add_argument("--B", default="2,4,8")
    ap.add_argument("--T", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--json")
    ap.add_argument("--peak-tflops", type=float, default=None)
    ap.add_argument("--eager", action="store_true")
    ap.add_argument("--repeat-kv", action="store_true",
                    help="repeat k/v per query head instead of SDPA's enable_gqa")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIP: no GPU")
        return 77
    peak_src = "--peak-tflops" if a.peak_tflops else "default: H100 SXM dense bf16"
    a.peak_tflops = a.peak_tflops or H100_SXM_BF16_TFLOPS
    peak = a.peak_tflops * 1e12
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    s = SHAPES[a.model]
    gqa = not a.repeat_kv and flash_gqa_available()
    print(f"llama-{a.model} {s}, T {a.T}; model FLOPs/token {model_flops_per_token(s, a.T):.4g};"
          f" peak {a.peak_tflops:.0f} TFLOP/s ({peak_src}); GQA via "
          f"{'SDPA enable_gqa' if gqa else 'repeat_interleave'}", flush=True)
    res = []
    for B in [int(b) for b in a.B.split(",")]:
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        try:
            res.append(run(a, s, B, gqa, peak))
        except Exception as e:  # compile may wrap the OOM in its own exception
            if not isinstance(e, torch.cuda.OutOfMemoryError) and "out of memory" not in str(e):
                raise
            name = f"llama_{a.model}_B{B}_T{a.T}"
            print(f"torch {name}: out of memory", flush=True)
            res.append({"name": name, "B": B, "T": a.T, "oom": True})
        torch._dynamo.reset()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"suite": "gpu-llama-torch", "model": f"llama-{a.model}",
                       "torch": torch.__version__, "config": s, "T": a.T,
                       "peak_tflops": a.peak_tflops, "peak_tflops_source": peak_src,
                       "gqa": "sdpa enable_gqa" if gqa else "repeat_interleave",
                       "compiled": not a.eager, "results": res}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
