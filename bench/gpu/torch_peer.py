#!/usr/bin/env python3
"""PyTorch peer for bench_gpu: the same cases, same shapes and dtypes, timed
the same way (CUDA events, warm-up, median). Names match bench_gpu's so
bench/gpu/compare.py can pair them.

    python3 bench/gpu/torch_peer.py [--json FILE] [--repeats N] [--quick] [--only WORD]

--only WORD runs only the groups whose name holds WORD, as bench_gpu's.
Attention is F.scaled_dot_product_attention held to its flash backend.
"""
import argparse
import contextlib
import json
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("SKIP: no torch")
    sys.exit(77)


def timeit(name, fn, repeats, warmup, flops=0.0, nbytes=0.0, results=None):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ms = []
    for _ in range(repeats):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b))
    ms.sort()
    med = ms[len(ms) // 2]
    line = f"{name:34s} median {med:9.4f} ms (min {ms[0]:.4f} max {ms[-1]:.4f})"
    if flops:
        line += f"  {flops / (med * 1e-3) / 1e12:7.1f} TFLOP/s"
    if nbytes:
        line += f"  {nbytes / (med * 1e-3) / 1e9:7.1f} GB/s"
    print(line, flush=True)
    results.append({"name": name, "median_ms": med, "min_ms": ms[0], "max_ms": ms[-1],
                    "repeats": repeats, "flops": flops, "bytes": nbytes})
    return med


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only")
    args = ap.parse_args()

    def want(group):  # --only: one word or several (spaces or commas)
        return not args.only or any(w in group for w in args.only.replace(",", " ").split())

    if not torch.cuda.is_available():
        print("SKIP: torch sees no GPU")
        return 77
    rep, wu = (5, 2) if args.quick else (args.repeats, 5)
    R = []
    dev = "cuda"
    bf = torch.bfloat16
    torch.manual_seed(0)
    BT = 4096 if args.quick else 16384

    def T(*shape, a=1.0, dtype=bf):
        return ((torch.rand(*shape, device=dev) * 2 - 1) * a).to(dtype)

    if want("copy"):
        nbytes = (256 << 20) if args.quick else (1 << 30)
        src = T(nbytes // 2)
        dst = torch.empty_like(src)
        timeit("copy_d2d", lambda: dst.copy_(src), rep, wu, 0, 2.0 * nbytes, R)
        del src, dst

    gemms = [(768, 2304), (768, 768), (768, 3072), (3072, 768), (768, 50304)]
    for C, OC in gemms if want("gemm") else []:
        x = T(BT, C)
        w = T(OC, C, a=0.05)
        dout = T(BT, OC)
        fl = 2.0 * BT * C * OC
        timeit(f"gemm_fwd_{C}x{OC}", lambda: torch.matmul(x, w.t()), rep, wu, fl, 0, R)
        timeit(f"gemm_bwd_dinp_{C}x{OC}", lambda: torch.matmul(dout, w), rep, wu, fl, 0, R)
        timeit(f"gemm_bwd_dw_{C}x{OC}", lambda: torch.matmul(dout.t(), x), rep, wu, fl, 0, R)
        if OC == 3072 and C == 768:
            bias = T(OC, a=0.1)
            timeit("gemm_fwd_768x3072_bias_gelu",
                   lambda: F.gelu(F.linear(x, w, bias), approximate="tanh"), rep, wu, fl, 0, R)
        if OC == 2304 and torch.cuda.get_device_capability() >= (8, 9):
            try:
                x8 = x.to(torch.float8_e4m3fn)
                w8 = w.to(torch.float8_e4m3fn)
                one = torch.ones((), device=dev)
                timeit("gemm_fwd_768x2304_fp8_e4m3",
                       lambda: torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one,
                                                out_dtype=bf), rep, wu, fl, 0, R)
            except Exception as e:  # noqa: BLE001
                print("fp8 scaled_mm not run:", e)
        del x, w, dout

    C = 768
    for big in (0, 1) if want("layernorm") else ():
        N = (8192 if args.quick else 65536) if big else BT
        sfx = "_n65536" if big else ""
        x = T(N, C, a=2.0)
        w = T(C)
        b = T(C)
        dout = T(N, C)
        n = N * C
        timeit("layernorm_fwd_768" + sfx, lambda: F.layer_norm(x, (C,), w, b, 1e-5), rep, wu, 0,
               2.0 * n * 2 + 8.0 * N, R)
        _, mean, rstd = torch.ops.aten.native_layer_norm(x, [C], w, b, 1e-5)
        timeit("layernorm_bwd_768" + sfx,
               lambda: torch.ops.aten.native_layer_norm_backward(dout, x, [C], mean, rstd, w, b,
                                                                 [True, True, True]),
               rep, wu, 0, 4.0 * n * 2 + 8.0 * N, R)
        del x, dout

    # RMSNorm (bench_gpu's rmsnorm_* cases): GPT-2's width and Llama 1B's,
    # BT rows; F.rms_norm and autograd for the backward (dinp and dw)
    for C2 in (768, 2048) if want("rmsnorm") else ():
        x = T(BT, C2, a=2.0).requires_grad_(True)
        w = T(C2).requires_grad_(True)
        dout = T(BT, C2)
        n = BT * C2
        timeit(f"rmsnorm_fwd_{C2}", lambda: F.rms_norm(x, (C2,), w, 1e-5), rep, wu, 0,
               2.0 * n * 2 + 4.0 * BT, R)
        y = F.rms_norm(x, (C2,), w, 1e-5)
        timeit(f"rmsnorm_bwd_{C2}",
               lambda: torch.autograd.grad(y, (x, w), dout, retain_graph=True), rep, wu, 0,
               4.0 * n * 2 + 4.0 * BT, R)
        del x, dout, y

    if want("gelu residual"):
        n = BT * 3072
        x = T(n, a=3.0)
        d = T(n)
        o = torch.empty_like(x)
        timeit("gelu_fwd_3072", lambda: F.gelu(x, approximate="tanh"), rep, wu, 0, 2.0 * n * 2, R)
        timeit("gelu_bwd_3072", lambda: torch.ops.aten.gelu_backward(d, x, approximate="tanh"),
               rep, wu, 0, 4.0 * n * 2, R)
        timeit("residual_3072", lambda: torch.add(x, d, out=o), rep, wu, 0, 3.0 * n * 2, R)
        del x, d, o

    if want("adamw"):
        n = 124475904 // (8 if args.quick else 1)
        p = torch.nn.Parameter(T(n, dtype=torch.float32))
        p.grad = T(n, dtype=torch.float32)
        opt = torch.optim.AdamW([p], lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0,
                                fused=True)
        # torch's fused AdamW: read p, g, m, v; write p, m, v (no bf16 copy)
        timeit("adamw_124M", opt.step, rep, wu, 0, (4.0 * 4 + 3.0 * 4 + 2.0) * n, R)
        del p, opt

    if want("softmax_xent"):
        N, V = (1024 if args.quick else 8192), 50257
        logits = T(N, V, a=4.0)
        tg = torch.randint(0, V, (N,), device=dev)
        timeit("softmax_xent_fwd_50304", lambda: F.cross_entropy(logits, tg), rep, wu, 0,
               float(N) * 50304 * 2, R)
        del logits

    # attention: bench_gpu's shapes and names (16384 tokens per call; --quick
    # 4096 and T 1024 only), SDPA held to the flash backend. GQA heads are
    # expanded to nh before timing (FA2 does the same work either way).
    if want("attention"):
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            flash = lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)  # noqa: E731
        except ImportError:  # torch < 2.3
            flash = contextlib.nullcontext
        for nh, nkv, hd in [(12, 12, 64), (32, 4, 64), (16, 4, 128)]:
            for Tn in [1024] if args.quick else [1024, 2048, 4096, 8192]:
                B = (4096 if args.quick else 16384) // Tn
                shape = (f"b{B}_t{Tn}_h{nh}_d{hd}" if nkv == nh
                         else f"b{B}_t{Tn}_h{nh}_kv{nkv}_d{hd}")
                q = T(B, nh, Tn, hd).requires_grad_()
                k = T(B, nkv, Tn, hd).repeat_interleave(nh // nkv, dim=1).requires_grad_()
                v = T(B, nkv, Tn, hd).repeat_interleave(nh // nkv, dim=1).requires_grad_()
                do = T(B, nh, Tn, hd)
                fl = 2.0 * B * nh * Tn * Tn * hd

                def fb():
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    torch.autograd.grad(out, (q, k, v), do)

                with flash():
                    with torch.no_grad():
                        fwd = timeit(f"attention_fwd_{shape}",
                                     lambda: F.scaled_dot_product_attention(q, k, v,
                                                                            is_causal=True),
                                     rep, wu, fl, 0, R)
                    both = timeit(f"attention_fwdbwd_{shape}", fb, rep, wu, 3.5 * fl, 0, R)
                bwd = both - fwd
                R.append({"name": f"attention_bwd_{shape}", "median_ms": bwd, "min_ms": bwd,
                          "max_ms": bwd, "repeats": rep, "flops": 2.5 * fl, "bytes": 0,
                          "note": "fwd+bwd median minus fwd median"})
                print(f"{'attention_bwd_' + shape:34s} median {bwd:9.4f} ms (fwd+bwd - fwd)")
                del q, k, v, do

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"suite": "gpu-torch", "torch": torch.__version__,
                       "device": torch.cuda.get_device_name(), "results": R}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
