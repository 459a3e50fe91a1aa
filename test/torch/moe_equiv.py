#!/usr/bin/python3
"""PyTorch reference for the MoE layer (lib/train/moe.c), suite 'torch'.

For each case of test/torch/moe_driver.c (capacity with drops, dropless,
top-1, top-3 under a tight capacity; then through the engine's MoE layer,
lib/train/moe_net.c: one shared expert with top-2 under drops, two shared
experts with top-1 raw gates, top-2 raw gates under drops) the driver runs
our layer forward and backward on random weights, tokens and output
gradients; this script
rebuilds the layer independently in float64 torch from the same inputs:
router linear, softmax, top-k renormalised (or the raw probabilities),
slot-major token-choice dispatch under ceil(capacity_factor * N * K / E) per
expert, SwiGLU experts, weighted combine, plus the shared experts (S SwiGLU
experts of F on every token, added with weight 1; written as S separate
experts here, the engine holds them as one of S*F), the Switch/GShard aux loss E * sum_e f_e P_e and the z-loss
mean(logsumexp^2); autograd on sum(y * dy) + aux_coef * aux + z_coef * z.
Checks (fp32 engine against float64 torch):
  - y, dx and every weight gradient: max|ours - torch| <= 1e-5 * max(1, max|torch|)
  - aux and z: |ours - torch| <= 1e-5 * max(1, |torch|)
  - dropped (token, choice) pairs and rows kept per expert: equal
  - the capacity cases drop something and the dropless one nothing
Exits 77 (SKIP) when torch is absent.
usage: moe_equiv.py DRIVER
"""
import json
import math
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except Exception as e:  # noqa: BLE001
    print("SKIP: torch/numpy not importable:", e)
    sys.exit(77)

torch.set_default_dtype(torch.float64)
TOL = 1e-5


def load(d, name, shape):
    a = np.fromfile(os.path.join(d, name + ".f32"), dtype="<f4")
    return torch.tensor(a.astype(np.float64)).reshape(shape)


def reference(c, x, dy, wr, w1, w3, w2, sw1, sw3, sw2):
    N, E, K, C, F = c["N"], c["E"], c["K"], c["C"], c["F"]
    logits = x @ wr.T
    p = torch.softmax(logits, dim=-1)
    topv, topi = torch.topk(p, K, dim=-1)
    gate = topv if c["raw"] else topv / topv.sum(dim=-1, keepdim=True)
    if c["dropless"]:
        cap = N
    else:
        cap = min(N, max(1, math.ceil(c["capacity_factor"] * N * K / E)))
    # slot-major positions: a token's k-th choice queues behind every
    # token's earlier choices
    used = torch.zeros(E, dtype=torch.long)
    keep = torch.zeros(N, K, dtype=torch.bool)
    for k in range(K):
        onehot = torch.nn.functional.one_hot(topi[:, k], E)
        pos = torch.cumsum(onehot, dim=0) - 1 + used
        mypos = (pos * onehot).sum(dim=1)
        keep[:, k] = mypos < cap
        used = used + onehot.sum(dim=0)
    dropped = int((~keep).sum())
    y = torch.zeros(N, C)
    kept = []
    for e in range(E):
        sel = (topi == e) & keep
        kept.append(int(sel.sum()))
        tok, slot = sel.nonzero(as_tuple=True)
        if len(tok) == 0:
            continue
        xe = x[tok]
        a = torch.nn.functional.silu(xe @ w1[e].T) * (xe @ w3[e].T)
        ye = a @ w2[e].T
        y = y.index_add(0, tok, ye * gate[tok, slot].unsqueeze(1))
    for j in range(c["S"]):  # shared expert j: hidden units [j F, (j+1) F)
        h = slice(j * F, (j + 1) * F)
        a = torch.nn.functional.silu(x @ sw1[h].T) * (x @ sw3[h].T)
        y = y + a @ sw2[:, h].T
    f = torch.nn.functional.one_hot(topi, E).sum(dim=(0, 1)).double() / (N * K)
    P = p.mean(dim=0)
    aux = E * (f * P).sum()
    z = (torch.logsumexp(logits, dim=-1) ** 2).mean()
    total = (y * dy).sum() + c["aux_coef"] * aux + c["z_coef"] * z
    return y, aux, z, total, dropped, kept, cap


def close(name, ours, ref, errors):
    scale = max(1.0, float(ref.abs().max()))
    d = float((ours - ref).abs().max())
    ok = d <= TOL * scale
    print(f"  {name:8s} max|diff| {d:.3e} (bound {TOL * scale:.3e}) {'ok' if ok else 'FAIL'}")
    if not ok:
        errors.append(name)


def run_case(driver, i, tmp):
    d = os.path.join(tmp, f"case{i}")
    os.makedirs(d)
    subprocess.run([driver, d, str(i)], check=True)
    with open(os.path.join(d, "case.json")) as f:
        c = json.load(f)
    N, E, C, F = c["N"], c["E"], c["C"], c["F"]
    x = load(d, "x", (N, C)).requires_grad_()
    wr = load(d, "router", (E, C)).requires_grad_()
    w1 = load(d, "w1", (E, F, C)).requires_grad_()
    w3 = load(d, "w3", (E, F, C)).requires_grad_()
    w2 = load(d, "w2", (E, C, F)).requires_grad_()
    S = c["S"]
    sw1 = load(d, "sw1", (S * F, C)).requires_grad_()
    sw3 = load(d, "sw3", (S * F, C)).requires_grad_()
    sw2 = load(d, "sw2", (C, S * F)).requires_grad_()
    dy = load(d, "dy", (N, C))
    y, aux, z, total, dropped, kept, cap = reference(c, x, dy, wr, w1, w3, w2, sw1, sw3, sw2)
    total.backward()
    print(f"case {i}: N {N} E {E} K {c['K']} C {C} F {F} capacity {cap} "
          f"dropless {c['dropless']} shared {S} raw gates {c['raw']}: "
          f"dropped ours {c['dropped']} torch {dropped}")
    errors = []
    close("y", load(d, "y", (N, C)), y.detach(), errors)
    close("dx", load(d, "dx", (N, C)), x.grad, errors)
    close("drouter", load(d, "drouter", (E, C)), wr.grad, errors)
    close("dw1", load(d, "dw1", (E, F, C)), w1.grad, errors)
    close("dw3", load(d, "dw3", (E, F, C)), w3.grad, errors)
    close("dw2", load(d, "dw2", (E, C, F)), w2.grad, errors)
    if S:
        close("dsw1", load(d, "dsw1", (S * F, C)), sw1.grad, errors)
        close("dsw3", load(d, "dsw3", (S * F, C)), sw3.grad, errors)
        close("dsw2", load(d, "dsw2", (C, S * F)), sw2.grad, errors)
    close("aux", torch.tensor(c["aux"]), aux.detach(), errors)
    close("z", torch.tensor(c["z"]), z.detach(), errors)
    if c["capacity"] != cap:
        errors.append(f"capacity {c['capacity']} != {cap}")
    if c["dropped"] != dropped or c["kept"] != kept:
        errors.append(f"dropped {c['dropped']} kept {c['kept']} != {dropped} {kept}")
    if c["dropless"] and dropped:
        errors.append("dropless case dropped tokens")
    if not c["dropless"] and not dropped:
        errors.append("capacity case dropped nothing (it should exercise drops)")
    return errors


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(7):
            bad += [f"case {i}: {e}" for e in run_case(sys.argv[1], i, tmp)]
    for b in bad:
        print("FAIL:", b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
