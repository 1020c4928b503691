"""Based calls for compute-sanitizer (memcheck / racecheck / synccheck): the forward with and without the recurrent
state, the backward through it, and decoding steps; each case also without any state, on the quadratic kernels
(forced per call through the testing ops, tk_ops._testing.based).

    compute-sanitizer --tool memcheck python tools/check/sanitize_based.py
    compute-sanitizer --tool racecheck python tools/check/sanitize_based.py --small

The default cases cover ragged lengths (a partial last chunk, a sequence shorter than one chunk), value dimensions
that take one task and two (with a partly empty second value block), more tasks than SMs, initial and final states;
--small runs short calls only, for racecheck, which is too slow for the default cases."""
import argparse

import torch

import tk_ops
from tk_ops._testing.based import based_bwd, based_fwd
from tk_ops.reference.based import based as reference

DEFAULT_CASES = [(1, 2, 17, 64), (2, 3, 300, 48), (1, 2, 1000, 112), (2, 80, 260, 64), (1, 1, 4200, 128)]
SMALL_CASES = [(1, 2, 200, 64), (1, 1, 300, 80)]  # (batch, heads, len, value dim)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a few short calls (for racecheck)")
    parser.add_argument("--ops", default="forward,backward,step",
                        help="which of forward, backward, step to run (comma-separated; the backward needs the forward)")
    args = parser.parse_args()
    ops = set(args.ops.split(","))
    torch.manual_seed(0)
    for b, h, n, dv in SMALL_CASES if args.small else DEFAULT_CASES:
        # No state in or out: the quadratic kernels (at every length here), forward and backward (the gradient of
        # o.float().square().sum(), as the cases below take).
        q, k = (torch.randn(b, h, n, 16, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        v = torch.randn(b, h, n, dv, device="cuda", dtype=torch.bfloat16)
        o, _, _, den = based_fwd(q, k, v, save_den=True, algorithm="quadratic")
        if not args.small:
            ref = reference(q, k, v)
            err = ((o.double() - ref).norm() / ref.norm()).item()
            assert err < 2e-2, (b, h, n, dv, "quadratic", err)
        if "backward" in ops:
            based_bwd(q, k, v, o, 2 * o, den, algorithm="quadratic")
        for with_state in (False, True):
            grad = "backward" in ops
            q = torch.randn(b, h, n, 16, device="cuda", dtype=torch.bfloat16, requires_grad=grad)
            k = torch.randn(b, h, n, 16, device="cuda", dtype=torch.bfloat16, requires_grad=grad)
            v = torch.randn(b, h, n, dv, device="cuda", dtype=torch.bfloat16, requires_grad=grad)
            state = None
            if with_state:
                state = (torch.randn(b, h, dv, 273, device="cuda", requires_grad=grad),
                         (torch.rand(b, h, 273, device="cuda") + n).requires_grad_(grad))
            o, (kv, k_sum) = tk_ops.based(q, k, v, initial_state=state, output_final_state=True)
            if not args.small:
                ref = reference(q, k, v, initial_state=state)
                err = ((o.double() - ref).norm() / ref.norm()).item()
                assert err < 2e-2, (b, h, n, dv, with_state, err)
            if grad:
                (o.float().square().sum() + kv.sum() + k_sum.sum()).backward()
            if "step" in ops:
                step_state = (kv.detach().clone(), k_sum.detach().clone())
                for _ in range(2):
                    tk_ops.based_step(q[:, :, -1].detach(), k[:, :, -1].detach(), v[:, :, -1].detach(), step_state)
    torch.cuda.synchronize()
    print("based sanitizer calls done")


if __name__ == "__main__":
    main()
