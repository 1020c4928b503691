"""Attention backward on the GPU, quickly: gradients of torch.ops.tk_ops.attention_bwd against float64
autograd over a grid of configurations, then backward timings next to SDPA's cuDNN and flash backends.
Usage: python tools/attn_bwd_check.py [--no-time] [--time-only]"""
import argparse
import math
import sys

import torch

import tk_ops  # noqa: F401  (registers the ops)
from tk_ops import _ext, reference

_ext.require("attention")  # loads the compiled kernels

if not hasattr(torch.ops.tk_ops, "attention_bwd"):  # schema not in the package yet: define it here
    _lib = torch.library.Library("tk_ops", "FRAGMENT")
    _lib.define("attention_bwd(Tensor q, Tensor k, Tensor v, Tensor o, Tensor dout, Tensor lse, bool causal, "
                "float scale) -> (Tensor, Tensor, Tensor)")


def ref_grads(q, k, v, dout, causal, scale):
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    o, _ = reference.attention(q64, k64, v64, causal, scale)
    return torch.autograd.grad(o, (q64, k64, v64), dout.double())


def rel(a, b):
    """||a - b|| / ||b||, with ||b|| floored at 1e-3 per element: a gradient that is zero in exact arithmetic
    (one key: dS = P (dP - delta) = 0) is compared in absolute terms."""
    floor = 1e-3 * math.sqrt(b.numel())
    return ((a.double() - b).norm() / b.norm().clamp_min(floor)).item()


def check(b, hq, hk, nq, nk, d, causal, dtype=torch.bfloat16):
    q = torch.randn(b, hq, nq, d, device="cuda", dtype=dtype)
    k = torch.randn(b, hk, nk, d, device="cuda", dtype=dtype)
    v = torch.randn(b, hk, nk, d, device="cuda", dtype=dtype)
    dout = torch.randn(b, hq, nq, d, device="cuda", dtype=dtype)
    scale = d ** -0.5
    o, lse = torch.ops.tk_ops.attention_fwd(q, k, v, causal, scale)
    dq, dk, dv = torch.ops.tk_ops.attention_bwd(q, k, v, o, dout, lse, causal, scale)
    rq, rk, rv = ref_grads(q, k, v, dout, causal, scale)
    errs = [rel(dq, rq), rel(dk, rk), rel(dv, rv)]
    finite = all(torch.isfinite(t).all().item() for t in (dq, dk, dv))
    ok = finite and max(errs) < 2e-2
    print(f"{'ok ' if ok else 'BAD'} b={b} hq={hq} hk={hk} nq={nq} nk={nk} d={d} causal={int(causal)} {str(dtype)[6:]}: "
          f"dq {errs[0]:.2e} dk {errs[1]:.2e} dv {errs[2]:.2e}{'' if finite else ' NONFINITE'}", flush=True)
    return ok


def correctness():
    cases = []
    for d in (64, 128):
        for causal in (False, True):
            cases += [(1, 2, 2, 256, 256, d, causal), (2, 4, 4, 1000, 1000, d, causal), (1, 4, 1, 17, 17, d, causal),
                      (1, 8, 2, 777, 1234, d, causal), (1, 2, 1, 1300, 500, d, causal), (1, 2, 2, 1, 1, d, causal),
                      (1, 3, 3, 4097, 4097, d, causal)]
    cases.append((2, 4, 2, 600, 600, 64, True, torch.float16))
    cases.append((2, 4, 2, 600, 900, 128, False, torch.float16))
    bad = sum(not check(*c) for c in cases)
    print(f"correctness: {len(cases) - bad}/{len(cases)} ok")
    return bad == 0


def bench_ms(fn, reps=20):
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def timing(lens):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    rows = []
    for d in (64, 128):
        for causal in (False, True):
            for n in lens:
                b, h = max(1, 16384 // n), 16
                q, k, v, dout = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
                scale = d ** -0.5
                o, lse = torch.ops.tk_ops.attention_fwd(q, k, v, causal, scale)
                flops = 2.5 * 4 * b * h * n * n * d / (2 if causal else 1)
                res = {"tk": bench_ms(lambda: torch.ops.tk_ops.attention_bwd(q, k, v, o, dout, lse, causal, scale))}
                for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
                    qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
                    with sdpa_kernel([be]):
                        out = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, is_causal=causal)
                    res[name] = bench_ms(lambda: torch.autograd.grad(out, (qq, kk, vv), dout, retain_graph=True))
                tf = {kk_: flops / ms / 1e9 for kk_, ms in res.items()}
                best = max(tf["cudnn"], tf["flash"])
                rows.append((d, causal, n, tf["tk"], tf["cudnn"], tf["flash"], tf["tk"] / best))
                print(f"D={d} causal={int(causal)} N={n}: tk {tf['tk']:.0f}  cudnn {tf['cudnn']:.0f}  flash {tf['flash']:.0f}"
                      f"  ratio {tf['tk'] / best:.2f}", flush=True)
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-time", action="store_true")
    ap.add_argument("--time-only", action="store_true")
    ap.add_argument("--lens", default="1024,4096,16384")
    a = ap.parse_args()
    ok = True if a.time_only else correctness()
    if not a.no_time:
        timing([int(x) for x in a.lens.split(",")])
    sys.exit(0 if ok else 1)
