"""tk_ops.bench.core.kernel_times: per-kernel GPU time of a callable, as the profiling tools use it."""
import torch

import tk_ops
from tk_ops.bench.core import kernel_times


def test_kernel_times_counts_each_kernel_per_call():
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    calls = []

    def work(i):
        calls.append(i)
        tk_ops.matmul(a, b)
        a.add_(0)  # a second, different kernel, launched once per call as well

    times = kernel_times(work, calls=4, warmup=2)
    assert calls == list(range(6))  # warmup calls first, then the profiled ones, in order
    gemm = [name for name in times if "gemm" in name]
    assert len(gemm) == 1, list(times)
    micros, launches = times[gemm[0]]
    assert launches == 1
    assert 1.0 < micros < 10_000.0  # a 2048^3 GEMM takes tens of microseconds on a Hopper GPU
    assert all(n == 1 for _, n in times.values()), times
    assert list(times.values()) == sorted(times.values(), key=lambda v: -v[0])  # largest first
