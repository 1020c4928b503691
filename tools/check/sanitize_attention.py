"""Attention calls for compute-sanitizer (memcheck / racecheck / synccheck), forward and backward for every head
dimension: full, causal, a causal sliding window, and a two-sided window with softcap; packed documents
(attention_varlen, forward) with the same options.

    compute-sanitizer --tool memcheck python tools/check/sanitize_attention.py
    compute-sanitizer --tool racecheck python tools/check/sanitize_attention.py --small

The default cases cover ragged and cross-attention lengths, GQA, and problems with several tasks per block, so the
tools see the dynamic task queue, the Q double buffer, the masked edges and the backward's in-kernel dQ conversion;
causal D = 64 runs the narrow-tail forward up to 4096 keys and the plain one past that. --small runs a few short
backward calls with several steps per task instead, for racecheck, which is too slow for the default cases."""
import argparse

import torch

import tk_ops
from tk_ops import reference
from tk_ops.attention import head_dims

DEFAULT_CASES = [(1, 2, 1, 17, 17), (2, 4, 2, 200, 333), (1, 2, 2, 1000, 1000), (8, 8, 8, 400, 400), (1, 1, 1, 4200, 4200)]
SMALL_CASES = [(1, 2, 1, 200, 200), (1, 1, 1, 700, 700)]  # (batch, q heads, kv heads, q_len, kv_len)


# (causal, window, softcap)
MASKS = [(False, (-1, -1), 0.0), (True, (-1, -1), 0.0), (True, (100, -1), 0.0), (False, (64, 32), 20.0)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a few short backward calls (for racecheck)")
    args = parser.parse_args()
    torch.manual_seed(0)
    for d in head_dims():
        for causal, window, softcap in MASKS:
            for b, hq, hk, nq, nk in SMALL_CASES if args.small else DEFAULT_CASES:
                if causal and nq > nk:
                    continue
                q = torch.randn(b, hq, nq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                k = torch.randn(b, hk, nk, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                v = torch.randn(b, hk, nk, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                o = tk_ops.attention(q, k, v, causal=causal, window=window, softcap=softcap)
                if not args.small:
                    ref, _ = reference.attention(q, k, v, causal=causal, window=window, softcap=softcap)
                    err = ((o.double() - ref).norm() / ref.norm()).item()
                    assert err < 2e-2, (d, causal, window, softcap, b, hq, hk, nq, nk, err)
                o.backward(torch.randn_like(o))
                torch.cuda.synchronize()
    # Packed documents (forward): ragged, empty and one-token documents, rows past the last offset, a window.
    lengths = [300, 0, 1, 777, 64, 193]
    offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    for d in head_dims():
        q, k, v = (torch.randn(sum(lengths) + 5, h, d, device="cuda", dtype=torch.bfloat16) for h in (4, 2, 2))
        for causal, window, softcap in MASKS:
            tk_ops.attention_varlen(q, k, v, offsets, offsets, 777, 777, causal=causal, window=window, softcap=softcap)
    torch.cuda.synchronize()
    print("sanitize_attention: done")


if __name__ == "__main__":
    main()
