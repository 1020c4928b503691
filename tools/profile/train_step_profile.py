"""Where a training step of examples/train_gpt.py spends its GPU time, tk_ops next to PyTorch.

1. Each GEMM of the step (forward, dX and dW of every Linear at the default size), tk_ops vs cuBLAS.
2. Kernel time per step of both models by kernel (torch.profiler over 5 steps), largest first.

    python tools/profile/train_step_profile.py
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import train_gpt  # noqa: E402

import tk_ops  # noqa: E402
from tk_ops.bench.core import kernel_times, rotation_count, tensor_bytes, time_calls  # noqa: E402


def gemm_shapes(args):
    tokens, dim = args.batch * args.seq, args.dim
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    width = (args.heads + 2 * args.kv_heads) * (dim // args.heads)
    for name, k_in, n_out in [("qkv", dim, width), ("proj", dim, dim), ("up", dim, 4 * dim), ("down", 4 * dim, dim),
                              ("head", dim, train_gpt.VOCAB)]:
        for kind in ("fwd", "dX", "dW"):
            def make():
                x = torch.randn(tokens, k_in, device="cuda", dtype=torch.bfloat16)
                w = torch.randn(n_out, k_in, device="cuda", dtype=torch.bfloat16)
                g = torch.randn(tokens, n_out, device="cuda", dtype=torch.bfloat16)
                return {"fwd": (x, w.t()), "dX": (g, w), "dW": (g.t(), x)}[kind]
            first = make()
            sets = [first] + [make() for _ in range(rotation_count(tensor_bytes(first), l2) - 1)]
            ours = time_calls(torch.ops.tk_ops.matmul, sets, reps=40, warmup=5)
            peer = time_calls(torch.matmul, sets, reps=40, warmup=5)
            a, b = first
            print(f"{name:5} {kind:3} {a.shape[0]}x{b.shape[1]}x{a.shape[1]:<6} tk {ours * 1e3:7.1f} us  "
                  f"cublas {peer * 1e3:7.1f} us  ratio {peer / ours:5.2f}", flush=True)


def kernel_profile(args, use_tk: bool, steps: int = 5):
    data = train_gpt.make_data(10 + steps, args.batch, args.seq, 0, "cuda")
    model = train_gpt.GPT(args.layers, args.dim, args.heads, args.kv_heads, args.seq, use_tk).cuda()
    train_gpt.init_weights(model, args.layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(i):
        logits = model(data[i, :, :-1]).float().view(-1, train_gpt.VOCAB)
        loss = F.cross_entropy(logits, data[i, :, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    per_kernel = kernel_times(step, steps, warmup=10)
    total = sum(t for t, _ in per_kernel.values())
    print(f"\n{'tk_ops' if use_tk else 'torch'}: GPU kernel time per step {total / 1e3:.2f} ms")
    for name, (t, n) in list(per_kernel.items())[:20]:
        print(f"  {t:8.1f} us/step  x{n:3d}  {name[:100]}")


def main():
    args = train_gpt.parse_args([])
    tk_ops.nn.Linear(8, 8, device="cuda")(torch.zeros(1, 8, device="cuda", dtype=torch.bfloat16))  # load the ops
    gemm_shapes(args)
    for use_tk in (True, False):
        kernel_profile(args, use_tk)


if __name__ == "__main__":
    main()
