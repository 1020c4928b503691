"""Small GEMM calls for compute-sanitizer (memcheck / racecheck / synccheck): every kernel variant once,
ragged shapes included, so the tools see edge tiles, the block configurations, every operand order, the
bias epilogue and split-K. The shapes below reach each configuration where it is picked; the loop at the end names
every one on a ragged shape through the testing ops."""
import torch

import tk_ops
from tk_ops._testing import gemm as testing

torch.manual_seed(0)
for m, n, k in [(200, 264, 72), (129, 136, 4104), (1, 8, 8)]:
    for a_t in (False, True):
        for b_t in (False, True):
            if a_t and m % 8:
                continue
            a = torch.randn(k, m, device="cuda").bfloat16().t() if a_t else torch.randn(m, k, device="cuda").bfloat16()
            b = torch.randn(n, k, device="cuda").bfloat16().t() if b_t else torch.randn(k, n, device="cuda").bfloat16()
            out = tk_ops.matmul(a, b)
            err = ((out.double() - a.double() @ b.double()).norm() / (a.double() @ b.double()).norm()).item()
            assert err < 1e-2, (m, n, k, a_t, b_t, err)
# fp8 in each block size the shape picks: 64 x 128 (200 x 72), 128 x 128 (2000 x 1024), 128 x 256 (ragged 4100 x 2056),
# every output type.
one = torch.ones((), device="cuda")
for m, n, k in [(200, 72, 64), (2000, 1024, 272), (4100, 2056, 144)]:
    a8 = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    w8 = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
    ref = a8.double() @ w8.double().t()
    for dt in (torch.bfloat16, torch.float16, torch.float32):
        out = tk_ops.scaled_mm(a8, w8.t(), one, one, out_dtype=dt)
        assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2, (m, n, k, dt)
    # Row-wise scales (their column slice staged in shared memory per task), and b's alone with a per tensor.
    sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
    for scale_a in (sa, one):
        out = tk_ops.scaled_mm(a8, w8.t(), scale_a, sb)
        ref_s = (a8.double() * scale_a.double()) @ (w8.double().t() * sb.double())
        assert ((out.double() - ref_s).norm() / ref_s.norm()).item() < 1e-2, (m, n, k, "row-wise")
# 256 tasks on 132 blocks: the persistent loop, the ring across tasks and the deferred store, with B resident
# (K <= 256: runs of 2 tasks down each column); at K = 264 the hinted blocks, whose odd blocks write half a task later.
for k in (64, 256, 264):
    tk_ops.matmul(torch.randn(2048, k, device="cuda").bfloat16(), torch.randn(4096, k, device="cuda").bfloat16().t())
# Runs of 4 tasks with B resident: the A rows two tasks ahead are prefetched into L2 on the way.
tk_ops.matmul(torch.randn(2048, 256, device="cuda").bfloat16(), torch.randn(256, 8192, device="cuda").bfloat16())
# B resident with runs of 3 tasks in columns of 32: some blocks reload their panel part-way, ragged edges, K = 200.
a, b = torch.randn(4000, 200, device="cuda").bfloat16(), torch.randn(200, 3000, device="cuda").bfloat16()
out = tk_ops.matmul(a, b)
assert ((out.double() - a.double() @ b.double()).norm() / (a.double() @ b.double()).norm()).item() < 1e-2
# Split-K: a small output over a long, ragged contraction (fp32 partial sums added by TMA).
a, b = torch.randn(5000, 200, device="cuda").bfloat16().t(), torch.randn(5000, 136, device="cuda").bfloat16()
out = tk_ops.matmul(a, b)
assert ((out.double() - a.double() @ b.double()).norm() / (a.double() @ b.double()).norm()).item() < 1e-2
# The bias epilogue (its per-task cp.async into shared memory) in the big and tiny configurations, ragged N; and
# the Linear backward, whose dW contracts over a token count that is not a multiple of 8.
for m, n in [(2048, 4104), (200, 136)]:
    lin = tk_ops.nn.Linear(64, n, device="cuda")
    x = torch.randn(m - 3, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    y = lin(x)
    ref = torch.nn.functional.linear(x.double(), lin.weight.double(), lin.bias.double())
    assert ((y.double() - ref).norm() / ref.norm()).item() < 1e-2, (m, n)
    y.sum().backward()
# Every configuration on one ragged shape (K = 72: the resident panel holds it), in every operand order and with the
# bias epilogue; the fp8 ones per tensor.
m, n, k = 200, 264, 72
for config in testing.CONFIGS:
    for a_t in (False, True):
        for b_t in (False, True):
            a = torch.randn(k, m, device="cuda").bfloat16().t() if a_t else torch.randn(m, k, device="cuda").bfloat16()
            b = torch.randn(n, k, device="cuda").bfloat16().t() if b_t else torch.randn(k, n, device="cuda").bfloat16()
            out = testing.matmul(a, b, config)
            ref = a.double() @ b.double()
            assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2, (config, a_t, b_t)
    x, w = torch.randn(m, k, device="cuda").bfloat16(), torch.randn(n, k, device="cuda").bfloat16()
    bias = torch.randn(n, device="cuda").bfloat16()
    ref = torch.nn.functional.linear(x.double(), w.double(), bias.double())
    y = testing.linear(x, w, bias, config)
    assert ((y.double() - ref).norm() / ref.norm()).item() < 1e-2, (config, "bias")
a8, w8 = torch.randn(m, 64, device="cuda").to(torch.float8_e4m3fn), torch.randn(n, 64, device="cuda").to(torch.float8_e4m3fn)
for config in testing.FP8_CONFIGS:
    out = testing.scaled_mm(a8, w8.t(), one, one, torch.bfloat16, config)
    ref = a8.double() @ w8.double().t()
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2, (config, "fp8")
torch.cuda.synchronize()
print("sanitize_gemm: done")
