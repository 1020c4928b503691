"""A few small attention backward calls (head dim 64 and 128, causal or not, ragged lengths, GQA, several steps per
task) for compute-sanitizer's racecheck, which is too slow for tools/sanitize_attention.py's larger cases."""
import torch

import tk_ops

torch.manual_seed(0)
for d in (64, 128):
    for causal in (False, True):
        for b, hq, hk, n in [(1, 2, 1, 200), (1, 1, 1, 700)]:
            q = torch.randn(b, hq, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn(b, hk, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            v = torch.randn(b, hk, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            out = tk_ops.attention(q, k, v, causal=causal)
            out.backward(torch.randn_like(out))
            torch.cuda.synchronize()
            print(f"d={d} causal={causal} b={b} hq={hq} hk={hk} n={n}: grad norms {q.grad.norm():.3f} {k.grad.norm():.3f} {v.grad.norm():.3f}")
