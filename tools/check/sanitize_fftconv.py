"""FFT convolution calls for compute-sanitizer (memcheck / racecheck / synccheck): the forward at every built FFT size
and on the block path (N > 4096), with and without gates, the backward through every input (the filter gradient's
kernels included), and the filter's spectrum from strided and transposed 16-bit filters (the spectrum kernel).

    compute-sanitizer --tool memcheck python tools/check/sanitize_fftconv.py
    compute-sanitizer --tool racecheck python tools/check/sanitize_fftconv.py --small

The default cases cover lengths that end inside a tile, odd lengths (element-wise accesses) and even ones (paired
accesses), an odd batch (the last pair's second row absent), a filter shorter than the sequence, a misaligned view of u,
every FFT size from 256 to 8192 and long sequences with a partial last block; --small runs short calls only (one of
them long), for racecheck, which is too slow for the default cases."""
import argparse

import torch

import tk_ops

# (batch, heads, length N, filter taps Nk)
DEFAULT_CASES = [(1, 2, 1, 1), (3, 2, 7, 7), (2, 3, 100, 33), (3, 2, 257, 257), (2, 2, 1000, 1000), (1, 2, 2048, 700),
                 (3, 1, 4095, 4095), (2, 1, 4096, 4096), (3, 1, 4097, 4097), (2, 2, 10001, 5000), (1, 1, 70000, 70000)]
SMALL_CASES = [(3, 1, 100, 100), (2, 1, 1000, 300), (1, 1, 5000, 5000)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a few short calls (for racecheck)")
    args = parser.parse_args()
    torch.manual_seed(0)
    for b, h, n, nk in SMALL_CASES if args.small else DEFAULT_CASES:
        for gated in (False, True):
            def leaf(*shape, dtype=torch.bfloat16):
                return torch.randn(*shape, device="cuda").to(dtype).requires_grad_(True)
            u = leaf(b, h, n)
            k = (torch.randn(h, nk, device="cuda") / nk ** 0.5).requires_grad_(True)
            gates = dict(pregate=leaf(b, h, n), postgate=leaf(b, h, n)) if gated else {}
            y = tk_ops.fftconv(u, k, **gates)
            torch.autograd.grad(y, [u, k, *gates.values()], torch.randn_like(y))
        # A view one element into its storage: u's rows are no longer 4-byte aligned.
        base = torch.randn(b * h * n + 1, device="cuda", dtype=torch.bfloat16)
        u = base[1:].view(b, h, n)
        tk_ops.fftconv(u, torch.randn(h, nk, device="cuda"))
        tk_ops.fftconv_spectrum(torch.randn(h, 2 * nk, device="cuda", dtype=torch.bfloat16)[:, ::2], n)
        tk_ops.fftconv_spectrum(torch.randn(nk, h, device="cuda", dtype=torch.float16).t(), n)
    torch.cuda.synchronize()
    print("fftconv sanitizer cases done")


if __name__ == "__main__":
    main()
