"""GEMM benchmark: tk_ops.matmul against torch.matmul (cuBLAS) in bf16, and tk_ops.scaled_mm
against torch._scaled_mm in fp8 e4m3 (bf16 output; per-tensor scales, and row-wise: one per row of a and one per
column of b). FLOPs = 2*M*N*K.

fp8 has two peers: torch._scaled_mm as called by default (use_fast_accum=False: cuBLAS promotes the tensor cores'
partial sums to fp32 as it goes) and with use_fast_accum=True, which accumulates as ours does. The first is the
reference every fp8 output is checked against.

Outputs are checked against the peer's within BF16_TOL (ours and cuBLAS round the same fp32 sums once to bf16) and,
for fp8, FP8_TOL (fast accumulation loses low bits of the partial sums: 1.5e-3 at K = 1024 to 3.9e-3 at K = 16384
against precise accumulation on an H100).

--backward times the gradients of a bf16 matmul (dA = dC @ B^T and dB = A^T @ dC, 4*M*N*K
FLOPs) through autograd; fp8 has no backward op, so it is left out then.

--config NAME times our forward products in that kernel configuration (kernels/gemm/gemm_configs.cuh) instead of the
one each shape picks, through the testing ops (tk_ops._testing.gemm); sizes the configuration cannot run are left out.
"""
from __future__ import annotations

import torch

from .core import Case, Impl, backward_of

TITLE = "GEMM C = A @ B"
SIZES = [(n, n, n) for n in (1024, 2048, 4096, 8192, 16384)] + [
    (4096, 4096, 256), (4096, 4096, 1024), (8192, 8192, 1024)]
QUICK_SIZES = [(1024, 1024, 1024), (4096, 4096, 4096), (4096, 4096, 256)]
BF16_TOL = {torch.bfloat16: 1e-2}
FP8_TOL = {torch.bfloat16: 2e-2}


def _label(m: int, n: int, k: int) -> str:
    return f"{m}x{n}x{k}"


def _ours_name(config: str) -> str:
    return "tk_ops" if config == "auto" else f"tk_ops ({config})"


def bf16_case(m: int, n: int, k: int, backward: bool, weight_layout: bool = False, config: str = "auto") -> Case:
    """bf16 a @ b with b (K, N) row-major, or with weight_layout b = w.t() for a (N, K) row-major w: the
    nn.Linear case, which reads B K-major. Ours in `config` ("auto": the public op)."""
    import tk_ops
    from tk_ops._testing import gemm as testing

    def make_inputs():
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, requires_grad=backward)
        if weight_layout:
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, requires_grad=backward)
            return a, w.t()
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, requires_grad=backward)
        return a, b

    def in_config(a, b):
        return testing.matmul(a, b, config)

    ours = tk_ops.matmul if config == "auto" else in_config
    impls = [(_ours_name(config), ours, True), ("torch", torch.matmul, False)]
    group = "bf16, b = w.t()" if weight_layout else "bf16"
    if backward:
        timed = [(name, *backward_of(f), ours) for name, f, ours in impls]
        return Case(group + " backward", _label(m, n, k), (m, n, k), 4.0 * m * n * k, make_inputs,
                    [Impl(name, fn, ours, setup=setup) for name, setup, fn, ours in timed],
                    tol=dict(BF16_TOL), outputs=("dA", "dB"))
    return Case(group, _label(m, n, k), (m, n, k), 2.0 * m * n * k, make_inputs,
                [Impl(name, f, ours) for name, f, ours in impls], tol=dict(BF16_TOL), outputs=("C",))


def fp8_case(m: int, n: int, k: int, rowwise: bool = False, config: str = "auto") -> Case:
    import tk_ops
    from tk_ops._testing import gemm as testing

    def make_inputs():
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b_t = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)  # (N, K) row-major: b is b_t.t()
        scale_a = torch.rand((m, 1) if rowwise else (), device="cuda") + 0.5
        scale_b = torch.rand((1, n) if rowwise else (), device="cuda") + 0.5
        return a, b_t, scale_a, scale_b

    def ours(a, b_t, scale_a, scale_b):
        if config == "auto":
            return tk_ops.scaled_mm(a, b_t.t(), scale_a, scale_b, out_dtype=torch.bfloat16)
        return testing.scaled_mm(a, b_t.t(), scale_a, scale_b, torch.bfloat16, config)

    def peer(fast_accum: bool):
        def fn(a, b_t, scale_a, scale_b):
            return torch._scaled_mm(a, b_t.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16,
                                    use_fast_accum=fast_accum)
        return fn

    return Case("fp8 e4m3, row-wise scales" if rowwise else "fp8 e4m3", _label(m, n, k), (m, n, k), 2.0 * m * n * k,
                make_inputs, [Impl(_ours_name(config), ours, ours=True), Impl("torch._scaled_mm", peer(False)),
                              Impl("torch._scaled_mm fast accum", peer(True))], tol=dict(FP8_TOL), outputs=("C",))


def cases(quick: bool = False, backward: bool = False, config: str = "auto") -> list[Case]:
    sizes = QUICK_SIZES if quick else SIZES
    if config == "auto":
        bf16_sizes = fp8_sizes = sizes
    else:
        if backward:
            raise ValueError("a named configuration times the forward products only (the testing ops have no backward)")
        from tk_ops._testing import gemm as testing
        bf16_sizes = [s for s in sizes if testing.cannot_run(config, *s) is None]
        fp8_sizes = [s for s in sizes if testing.cannot_run(config, *s, fp8=True) is None]
    out = [bf16_case(*s, backward, config=config) for s in bf16_sizes]
    out += [bf16_case(*s, backward, weight_layout=True, config=config) for s in bf16_sizes]
    if not backward:
        out += [fp8_case(*s, config=config) for s in fp8_sizes]
        out += [fp8_case(*s, rowwise=True, config=config) for s in fp8_sizes]
    return out
