"""Mamba-2 calls for compute-sanitizer (memcheck / racecheck / synccheck): the chunked scan with every option, its
backward through the final states, and decoding steps.

    compute-sanitizer --tool memcheck python tools/check/sanitize_mamba2.py
    compute-sanitizer --tool racecheck python tools/check/sanitize_mamba2.py --small

The default cases cover ragged lengths (a partial last chunk, a sequence shorter than one chunk), every (p, n) with
head pairs and head halves, several groups, packed sequences, more tasks than SMs, initial and final states; --small
runs short calls only, for racecheck, which is too slow for the default cases."""
import argparse

import torch

import tk_ops

# (batch, len, heads, groups, head dim p, state dim n)
DEFAULT_CASES = [(1, 17, 2, 1, 64, 64), (2, 300, 4, 2, 64, 128), (1, 1000, 6, 2, 64, 64), (2, 260, 2, 1, 128, 128),
                 (1, 777, 3, 3, 128, 64), (2, 130, 160, 1, 64, 64)]
SMALL_CASES = [(1, 130, 2, 1, 64, 128), (1, 100, 1, 1, 128, 64), (1, 70, 6, 2, 64, 64)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a few short calls (for racecheck)")
    parser.add_argument("--ops", default="forward,backward,step",
                        help="which of forward, backward, step to run (comma-separated; the backward needs the forward)")
    args = parser.parse_args()
    ops = set(args.ops.split(","))
    grad = "backward" in ops
    torch.manual_seed(0)
    for b, l, h, g, p, n in SMALL_CASES if args.small else DEFAULT_CASES:
        for options in (False, True):
            def leaf(*shape, dtype=torch.bfloat16, scale=1.0, shift=0.0):
                return (torch.randn(*shape, device="cuda") * scale + shift).to(dtype).requires_grad_(grad)
            x, z = leaf(b, l, h, p), leaf(b, l, h, p)
            dt = leaf(b, l, h, dtype=torch.float32, scale=0.5, shift=-2.0)
            A = (-(torch.rand(h, device="cuda") + 0.5)).requires_grad_(grad)
            B, C = leaf(b, l, g, n, scale=n ** -0.5), leaf(b, l, g, n, scale=n ** -0.5)
            kw = {}
            if options:
                seq = (torch.arange(l, device="cuda") >= l // 3).int() + (torch.arange(l, device="cuda") >= l // 2).int()
                kw = dict(D=leaf(h, p, dtype=torch.float32), z=z, dt_bias=leaf(h, dtype=torch.float32),
                          dt_softplus=True, initial_states=leaf(b, h, p, n, dtype=torch.float32),
                          seq_idx=seq.expand(b, l).contiguous())
            out, final = tk_ops.mamba2_chunk_scan(x, dt, A, B, C, 64, return_final_states=True, **kw)
            if grad:
                (out.float().square().sum() + final.sum()).backward()
            if "step" in ops:
                state = final.detach().clone()
                for t in range(2):
                    tk_ops.mamba2_step(state, x[:, t].detach(), dt[:, t].detach(), A.detach(), B[:, t].detach(),
                                       C[:, t].detach(), dt_softplus=options)
    torch.cuda.synchronize()
    print("mamba2 sanitizer calls done")


if __name__ == "__main__":
    main()
