"""GPU time of one attention backward by kernel, tk_ops next to SDPA's cuDNN backend, on the bench's shapes
(bf16, 16 heads, batch 16384 / N): the main kernel and the helpers around it (tk_ops: row preparation, the
zeroed dQ accumulator, its conversion; cuDNN: dot(dO, O), its dQ conversion).

    python tools/profile/attention_bwd_profile.py [--lens 1024 4096] [--dims 64 128]
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import tk_ops
from tk_ops.attention import head_dims
from tk_ops.bench.core import kernel_times


def profile(d: int, n: int, causal: bool, calls: int = 5):
    b, h = 16384 // n, 16
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    scale = d ** -0.5
    o, lse = torch.ops.tk_ops.attention_fwd(q, k, v, causal, scale)
    dout = torch.randn_like(o)
    ours = kernel_times(lambda i: torch.ops.tk_ops.attention_bwd(q, k, v, o, dout, lse, causal, scale), calls)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
        peer = kernel_times(lambda i: torch.autograd.grad(out, leaves, dout, retain_graph=True), calls)
    return ours, peer


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lens", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--dims", type=int, nargs="+", help="head dimensions (default: every one the build has)")
    args = parser.parse_args()
    tk_ops.attention(*(torch.zeros(1, 1, 1, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3)))  # load the ops
    for d in args.dims or head_dims():
        for causal in (False, True):
            for n in args.lens:
                ours, peer = profile(d, n, causal)
                print(f"D={d} N={n}{' causal' if causal else ''}: tk_ops {sum(t for t, _ in ours.values()):.0f} us, "
                      f"cuDNN {sum(t for t, _ in peer.values()):.0f} us")
                for who, times in (("tk_ops", ours), ("cudnn ", peer)):
                    for name, (t, _) in times.items():
                        print(f"  {who} {t:8.1f} us  {name[:90]}")


if __name__ == "__main__":
    main()
