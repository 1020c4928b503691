"""Small attention calls for compute-sanitizer (memcheck / racecheck / synccheck): forward and backward for both
head dimensions, causal or not, ragged and cross-attention lengths, GQA, and a problem with several tasks per
block, so the tools see the dynamic task queue, the Q double buffer and the masked edges; causal D = 64 runs the
narrow-tail kernel up to 4096 keys and the plain one past that."""
import torch

import tk_ops

torch.manual_seed(0)


def reference(q, k, v, causal):
    g = q.shape[1] // k.shape[1]
    k, v = k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    s = q.double() @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        nq, nk = s.shape[-2:]
        visible = torch.ones(nq, nk, dtype=torch.bool, device=q.device).tril(nk - nq)
        s = s.masked_fill(~visible, float("-inf"))
    return torch.softmax(s, -1).nan_to_num() @ v


for d in (64, 128):
    for causal in (False, True):
        for b, hq, hk, nq, nk in [(1, 2, 1, 17, 17), (2, 4, 2, 200, 333), (1, 2, 2, 1000, 1000), (8, 8, 8, 400, 400),
                                   (1, 1, 1, 4200, 4200)]:
            if causal and nq > nk:
                continue
            q = torch.randn(b, hq, nq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn(b, hk, nk, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            v = torch.randn(b, hk, nk, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            o = tk_ops.attention(q, k, v, causal=causal)
            ref = reference(q, k, v, causal)
            err = ((o.double() - ref).norm() / ref.norm()).item()
            assert err < 2e-2, (d, causal, b, hq, hk, nq, nk, err)
            o.sum().backward()
torch.cuda.synchronize()
print("sanitize_attention: done")
