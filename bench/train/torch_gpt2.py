"""PyTorch CPU eager on the GPT-2 124M training step (B=4, T=64, fp32):
a plain GPT-2 module (LayerNorm, GELU-tanh, learned positions, tied
embeddings, padded vocab 50304 like ours and llm.c), AdamW (foreach=False,
the default eager loop), grad clipping at 1.0 as our trainer does.
Prints the median step time and the peak RSS.
usage: /usr/bin/python3 torch_gpt2.py THREADS STEPS"""
import math
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

threads, steps = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(threads)
torch.manual_seed(0)
V, Vp, maxT, L, C, NH, B, T = 50257, 50304, 1024, 12, 768, 12, 4, 64


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_fcproj = nn.Linear(4 * C, C)

    def forward(self, x):
        h = self.ln_1(x)
        q, k, v = self.c_attn(h).split(C, dim=2)
        q = q.view(B, T, NH, C // NH).transpose(1, 2)
        k = k.view(B, T, NH, C // NH).transpose(1, 2)
        v = v.view(B, T, NH, C // NH).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // NH)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        x = x + self.c_fcproj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return x


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(Vp, C)
        self.wpe = nn.Embedding(maxT, C)
        self.h = nn.ModuleList([Block() for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx, tgt):
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits[..., :V].reshape(-1, V), tgt.reshape(-1))


model = GPT()
# GPT-2's initialisation (as ours and llm.c): N(0, 0.02), residual
# projections scaled by 1/sqrt(2L), zero biases; nn.Embedding's default
# N(0, 1) would start the loss near 470 instead of ln(50257) = 10.8.
with torch.no_grad():
    for name, p in model.named_parameters():
        if p.dim() >= 2:
            std = 0.02 / math.sqrt(2 * L) if name.endswith(("c_proj.weight", "c_fcproj.weight")) else 0.02
            p.normal_(0.0, std)
        elif name.endswith("bias"):
            p.zero_()
decay = [p for p in model.parameters() if p.dim() >= 2]
nodecay = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                         {"params": nodecay, "weight_decay": 0.0}],
                        lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
g = torch.Generator().manual_seed(1)
tok = torch.randint(0, V, (B * T + 1,), generator=g)
idx, tgt = tok[:-1].view(B, T), tok[1:].view(B, T)
times = []
for s in range(steps + 1):
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = model(idx, tgt)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    dt = time.perf_counter() - t0
    print(f"torch step {s}: {dt:.4f} s loss {loss.item():.4f}", flush=True)
    if s > 0:
        times.append(dt)
times.sort()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
print(f"torch median_s {times[len(times) // 2]:.6f} min_s {times[0]:.6f} "
      f"peak_rss_mib {rss:.1f} version {torch.__version__}")
