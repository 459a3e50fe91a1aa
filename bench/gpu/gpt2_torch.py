#!/usr/bin/env python3
"""PyTorch peer for bench_gpt2: GPT-2 124M (nanoGPT layout: tied embeddings,
tanh GELU, causal SDPA), bf16 autocast with fp32 weights, fused AdamW
(betas 0.9/0.95, lr 3e-4, no weight decay), grad-norm clip 1.0, one fixed
random batch, torch.compile. Prints and writes tokens/s per batch size.

    python3 bench/gpu/gpt2_torch.py [--B 16,64] [--T 1024] [--steps 20] [--json F] [--eager]
"""
import argparse
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


class Block(nn.Module):
    def __init__(self, C, nh):
        super().__init__()
        self.nh = nh
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_fc_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, self.nh, C // self.nh).transpose(1, 2)
        k = k.view(B, T, self.nh, C // self.nh).transpose(1, 2)
        v = v.view(B, T, self.nh, C // self.nh).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        x = x + self.c_fc_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return x


class GPT(nn.Module):
    def __init__(self, L=12, C=768, nh=12, V=50304, maxT=1024):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(maxT, C)
        self.h = nn.ModuleList([Block(C, nh) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        for n, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if n.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif n.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--B", default="16,64")
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--json")
    ap.add_argument("--eager", action="store_true")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIP: no GPU")
        return 77
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    res = []
    for B in [int(x) for x in a.B.split(",")]:
        torch.manual_seed(0)
        torch.cuda.reset_peak_memory_stats()
        model = GPT().cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                                weight_decay=0.0, fused=True)
        fwd = model if a.eager else torch.compile(model)
        idx = torch.randint(0, 50257, (B, a.T + 1), device="cuda")
        x, y = idx[:, :-1].contiguous(), idx[:, 1:].contiguous()

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = fwd(x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss

        t0 = time.time()
        loss0 = step().item()
        for _ in range(2):
            step()
        torch.cuda.synchronize()
        compile_s = time.time() - t0
        dts = []
        for _ in range(a.steps):
            t = time.time()
            loss = step().item()
            dts.append(time.time() - t)
        dts.sort()
        med = dts[len(dts) // 2]
        peak = torch.cuda.max_memory_allocated()
        name = f"gpt2_124M_B{B}_T{a.T}"
        print(f"torch{' eager' if a.eager else '.compile'} {name}: step median {med * 1e3:.2f} ms "
              f"{B * a.T / med:9.0f} tok/s loss {loss0:.3f} -> {loss:.3f} peak {peak / 2**30:.2f} GiB "
              f"(warm-up incl. compile {compile_s:.0f} s)", flush=True)
        res.append({"name": name, "B": B, "T": a.T, "median_step_ms": med * 1e3,
                    "tokens_per_s": B * a.T / med, "loss_first": loss0, "loss_last": loss,
                    "peak_device_bytes": peak, "compiled": not a.eager})
        del model, opt, fwd
        torch.cuda.empty_cache()
    if a.json:
        json.dump({"suite": "gpu-gpt2-torch", "torch": torch.__version__, "results": res},
                  open(a.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
