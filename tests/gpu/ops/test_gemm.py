"""tk_ops.matmul / scaled_mm / nn.Linear against float64 references on the GPU, in the configuration each shape
picks and in every other one (named through the testing ops, tk_ops._testing.gemm)."""
import contextlib

import pytest
import torch

import tk_ops
from tk_ops import reference
from tk_ops._testing import gemm as testing
from tk_ops.errors import InputError

from ..util import TOL, assert_close, fresh_pool_with_nan, rel_err

BF16_TOL = 1e-2  # bf16 output rounding of an fp32-accumulated product lands near 3e-3

# fp8 products: each product of two e4m3 values is exact, but Hopper's fp8 tensor cores add every 32-long step into
# the accumulator at 13 mantissa bits, truncating, so the fp32 sum itself drifts from the exact one in proportion to
# the contraction's length (a model of that truncation gives 1.1e-4 at K = 128 and 1.6e-3 at K = 2048 for these
# inputs). The output's own rounding comes on top: at most 2^-8 (bf16) or 2^-11 (fp16) of each element, so at most
# that in norm too; fp32's is util.TOL's.
FP8_DRIFT_PER_K = 2.5e-6
FP8_ROUNDING = {torch.bfloat16: 4e-3, torch.float16: 5e-4, torch.float32: TOL[torch.float32]}


def fp8_tol(out_dtype, k):
    """The bound on an fp8 product's relative error in `out_dtype` over a contraction of k: its rounding plus the
    accumulator's drift (about 3x the truncation model's). An fp32 output that went through bf16 (~1.6e-3) exceeds it
    up to K = 512, one wrong in a few elements per row exceeds every bound (the per-row and per-line checks)."""
    return FP8_ROUNDING[out_dtype] + FP8_DRIFT_PER_K * k


# "auto": the public op, in the configuration the shape picks; a name: that configuration through the testing op.
BF16_CONFIGS = ["auto", *testing.CONFIGS]
FP8_CONFIGS = ["auto", *testing.FP8_CONFIGS]


# The resident B panel holds contractions up to this length; every other configuration runs every shape.
RESIDENT_MAX_K = 256


def runs(config, m, n, k):
    """Whether `config` runs an m x n x k product. The one refusal docs/gemm.md names (resident past its panel) is
    asserted here: any other refusal, or that one at K <= 256, fails the calling test."""
    why = testing.cannot_run(config, m, n, k)
    if why is None:
        return True
    assert config == "resident" and k > RESIDENT_MAX_K, f"{config} refuses {m}x{n}x{k}: {why}"
    return False


def matmul_in(config, a, b):
    return tk_ops.matmul(a, b) if config == "auto" else testing.matmul(a, b, config)


def linear_in(config, x, w, bias):
    return torch.ops.tk_ops.linear(x, w, bias) if config == "auto" else testing.linear(x, w, bias, config)


def scaled_mm_in(config, a, b, scale_a, scale_b, out_dtype):
    if config == "auto":
        return tk_ops.scaled_mm(a, b, scale_a, scale_b, out_dtype=out_dtype)
    return testing.scaled_mm(a, b, scale_a, scale_b, out_dtype, config)


@contextlib.contextmanager
def deterministic_algorithms(on=True):
    torch.use_deterministic_algorithms(on)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(False)


def make_operand(rows, cols, transposed, dtype=torch.bfloat16):
    """A (rows x cols) operand: row-major, or the transpose of a row-major (cols x rows) tensor."""
    if transposed:
        return torch.randn(cols, rows, device="cuda").to(dtype).t()
    return torch.randn(rows, cols, device="cuda").to(dtype)


# (4100, 3064, 264): short K with ragged edges on many tasks per block, the configuration whose odd blocks write their
# output half a task later than even ones. K <= 256 keeps B resident: (3000, 3000, 200) with runs of 3 tasks in columns
# of 24, (4000, 3000, 200) with runs of 3 in columns of 32, so some blocks reload their panel part-way; (2048, 8192, 256)
# with runs of 4, along which the A rows two tasks ahead are prefetched into L2.
SHAPES = [(1000, 1000, 1024), (4097, 3064, 2048), (1, 256, 512), (1, 8, 8), (129, 264, 72),
          (2048, 2048, 2048), (300, 520, 4104), (4100, 3064, 264), (3000, 3000, 200), (4000, 3000, 200),
          (2048, 8192, 256)]
# Outputs too small to occupy the GPU over long contractions: split-K's shapes (test_matmul_split_k).
SPLIT_K_SHAPES = [(512, 512, 8192), (200, 136, 5000), (64, 256, 2056), (8, 8, 16384)]


@pytest.mark.parametrize("config", BF16_CONFIGS)
@pytest.mark.parametrize("mnk", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("a_t", [False, True], ids=["a_row", "a_t"])
@pytest.mark.parametrize("b_t", [False, True], ids=["b_row", "b_t"])
def test_matmul(mnk, a_t, b_t, config):
    m, n, k = mnk
    # a_t with M % 8 != 0 (4097, 129, 300, 4100): the transposed view's rows of M elements cannot be TMA rows, so the
    # op copies A to row-major first (gemm_operands.cpp); test_matmul_copies_what_tma_cannot_read shows the copy runs.
    if not runs(config, m, n, k):
        return
    a, b = make_operand(m, k, a_t), make_operand(k, n, b_t)
    fresh_pool_with_nan(m * n, torch.bfloat16)
    out = matmul_in(config, a, b)
    assert out.dtype == torch.bfloat16 and out.shape == (m, n)
    assert_close(out, reference.matmul(a, b), BF16_TOL, f"matmul {mnk} in {config}")


@pytest.mark.parametrize("mnk", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_testing_matmul_runs_the_public_ops_pick(mnk):
    """The testing op in the configuration gemm_config names gives the public op's result bit for bit. Split-K adds
    its ranges in an order that varies from run to run: where the shape splits, both run under
    torch.use_deterministic_algorithms, which keeps the op unsplit."""
    m, n, k = mnk
    a, b = make_operand(m, k, False), make_operand(k, n, True)
    with deterministic_algorithms(testing.gemm_config(m, n, k) == "split"):
        picked = testing.gemm_config(m, n, k)
        assert picked in testing.CONFIGS
        assert torch.equal(testing.matmul(a, b, picked), tk_ops.matmul(a, b)), picked


def cdiv(a, b):
    return -(-a // b)


def documented_pick(m, n, k, sms, fp8_out=None, bias=False, deterministic=False):
    """The configuration docs/gemm.md says an m x n x k product runs in on a GPU of `sms` SMs, from its Configurations
    table ("picked when"), in its order: split-K first (bf16, no bias, not deterministic), then tiny, small, resident,
    hinted, big. fp8_out: the output dtype of an fp8 product (tk_ops.scaled_mm), None for bf16 inputs."""
    def tasks(block_m, block_n):
        return cdiv(m, block_m) * cdiv(n, block_n)

    if fp8_out is not None:  # the bf16 occupancy rule with fp8's blocks: 128 x 128 big blocks for an fp32 output
        if 2 * tasks(128, 128) <= sms:
            return "tiny"
        if 2 * tasks(128, 128 if fp8_out == torch.float32 else 256) <= sms:
            return "small"
        return "big"
    if not (bias or deterministic) and 2 * tasks(64, 128) <= sms and cdiv(k, 64) >= 32:
        return "split"  # min(SMs / tiles, slices / 16) ranges, at least 2 whenever both conditions hold
    if 2 * tasks(128, 128) <= sms:
        return "tiny"
    if 2 * tasks(128, 256) <= sms:
        return "small"
    if k <= RESIDENT_MAX_K:
        tiles_m, tiles = cdiv(m, 128), tasks(128, 256)
        run = cdiv(tiles, min(tiles, sms))  # each of min(tiles, SMs) blocks takes a run of tasks down the columns
        if tiles_m % run == 0 or 4 * run <= tiles_m:
            return "resident"
    return "hinted" if k <= 512 else "big"


# The picks docs/gemm.md states or implies for a GPU of 132 SMs (H100 SXM, H200), pairs on each side of a rule's edge.
PICKS_ON_132_SMS = [
    ((1024, 1024, 1024), "tiny"),  # 64 tasks of 128 x 128: at most half the SMs busy
    ((1024, 1152, 1024), "small"),  # 72 of 128 x 128, 40 of 128 x 256
    ((2048, 1024, 512), "small"),  # 64 tasks of 128 x 256, 128 of 128 x 128
    ((2176, 1024, 1024), "big"),  # 68 of 128 x 256
    ((1, 256, 512), "tiny"),
    ((4096, 4096, 256), "resident"),  # K <= 256, runs of 1 task in columns of 32
    ((4000, 3000, 200), "resident"),  # runs of 3 tasks in columns of 32: 4 runs <= 32
    ((3000, 3000, 200), "resident"),  # runs of 3 in columns of 24, which 3 divides
    ((640, 16384, 256), "hinted"),  # K <= 256, but runs of 3 tasks cross columns of 5
    ((4096, 4096, 264), "hinted"),  # past the resident panel
    ((4096, 4096, 512), "hinted"),
    ((4096, 4096, 520), "big"),
    ((4096, 4096, 4096), "big"),
    ((512, 512, 8192), "split"),  # 32 tiny tasks over 128 K-slices: 4 ranges
    ((512, 512, 2048), "split"),  # 32 K-slices: 2 ranges
    ((512, 512, 1984), "tiny"),  # 31 K-slices: too short to split
    ((1024, 1024, 4096), "tiny"),  # 128 tiny tasks: split-K would not leave half the SMs idle
]
FP8_PICKS_ON_132_SMS = [((1024, 1024), torch.bfloat16, "tiny"),
                        ((2000, 1024), torch.bfloat16, "small"),
                        ((2000, 1024), torch.float32, "big"),  # 128 x 128 blocks with an fp32 output
                        ((4097, 2056), torch.float16, "big")]


def test_documented_picks_on_132_sms():
    """The rules above, read from docs/gemm.md, give the picks the document names for the H100 / H200."""
    for mnk, picked in PICKS_ON_132_SMS:
        assert documented_pick(*mnk, 132) == picked, mnk
        unsplit = "tiny" if picked == "split" else picked
        assert documented_pick(*mnk, 132, bias=True) == documented_pick(*mnk, 132, deterministic=True) == unsplit, mnk
    for mn, out_dtype, picked in FP8_PICKS_ON_132_SMS:
        assert documented_pick(*mn, 512, 132, fp8_out=out_dtype) == picked, (mn, out_dtype)


def sm_count():
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


@pytest.mark.parametrize("mnk", list(dict.fromkeys([mnk for mnk, _ in PICKS_ON_132_SMS] + SHAPES + SPLIT_K_SHAPES)),
                         ids=lambda s: "x".join(map(str, s)))
def test_gemm_config_is_the_documented_pick(mnk):
    """The selection on this GPU (whatever its SM count) is the one docs/gemm.md describes: a changed threshold, order
    or block count in gemm_configs.cuh fails here. A bias and torch.use_deterministic_algorithms rule split-K out."""
    sms = sm_count()
    assert testing.gemm_config(*mnk) == documented_pick(*mnk, sms), f"{mnk} on {sms} SMs"
    assert testing.gemm_config(*mnk, bias=True) == documented_pick(*mnk, sms, bias=True), f"{mnk} with a bias"
    with deterministic_algorithms():
        assert testing.gemm_config(*mnk) == documented_pick(*mnk, sms, deterministic=True), f"{mnk} deterministic"


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("mn", [mn for mn, _, _ in FP8_PICKS_ON_132_SMS] + [(1, 64), (1000, 520), (4096, 4096)],
                         ids=lambda s: "x".join(map(str, s)))
def test_gemm_config_is_the_documented_fp8_pick(mn, out_dtype):
    sms = sm_count()
    assert testing.gemm_config(*mn, 512, torch.float8_e4m3fn, out_dtype) == \
        documented_pick(*mn, 512, sms, fp8_out=out_dtype), f"{mn} -> {out_dtype} on {sms} SMs"


@pytest.mark.parametrize("b_t", [False, True], ids=["b_row", "b_t"])
def test_matmul_output_larger_than_l2(b_t):
    """Short K with an output bigger than L2 (the resident-B configuration, with L2 eviction hints, ragged N)."""
    m, n, k = 8192, 8200, 256
    a, b = make_operand(m, k, False), make_operand(k, n, b_t)
    fresh_pool_with_nan(m * n, torch.bfloat16)
    out = tk_ops.matmul(a, b)
    assert_close(out, reference.matmul(a, b), BF16_TOL, "large output")


def test_matmul_matches_cublas_closely():
    a, b = make_operand(2048, 1024, False), make_operand(1024, 4096, True)
    ours, theirs, ref = tk_ops.matmul(a, b), a @ b, reference.matmul(a, b)
    assert rel_err(ours, ref) <= 1.5 * rel_err(theirs, ref) + 1e-4


def test_matmul_rejects_bad_n():
    a, b = make_operand(4097, 2048, False), make_operand(2048, 3071, False)
    with pytest.raises(InputError, match="multiple of 8"):
        tk_ops.matmul(a, b)


def test_matmul_batched_leading_dims():
    a, b = torch.randn(3, 5, 77, 64, device="cuda").bfloat16(), make_operand(64, 40, False)
    out = tk_ops.matmul(a, b)
    assert out.shape == (3, 5, 77, 40)
    assert_close(out, (a.double() @ b.double()), BF16_TOL)


def test_matmul_autograd():
    a = make_operand(300, 256, False).requires_grad_()
    b = make_operand(256, 200, True).detach().requires_grad_()
    g = torch.randn(300, 200, device="cuda").bfloat16()
    tk_ops.matmul(a, b).backward(g)
    assert_close(a.grad, g.double() @ b.detach().double().t(), BF16_TOL, "dA")
    assert_close(b.grad, a.detach().double().t() @ g.double(), BF16_TOL, "dB")


def test_raw_op_rejects_an_operand_tma_cannot_hold():
    """a is 60 x 300: neither its rows nor its columns can be stored with a 16-byte stride."""
    a, b = make_operand(60, 300, False), make_operand(300, 64, False)
    # std::invalid_argument from the binding arrives as ValueError; the point is that it arrives at all
    with pytest.raises((RuntimeError, ValueError), match="multiple of 8"):
        torch.ops.tk_ops.matmul(a, b)


@pytest.mark.parametrize("a_t", [False, True], ids=["a_row", "a_t"])
def test_raw_op_contracts_over_any_length_when_rows_allow(a_t):
    """K = 300 breaks the rule only for K-major storage: the op stores such an A transposed (M = 64 is fine)
    and reads the row-major B (K rows of N) in place. This is how dW = dY^T X runs over any token count."""
    a, b = make_operand(64, 300, a_t), make_operand(300, 72, False)
    fresh_pool_with_nan(64 * 72, torch.bfloat16)
    assert_close(torch.ops.tk_ops.matmul(a, b), a.double() @ b.double(), BF16_TOL, "K = 300")


def offset_by_one(rows, cols):
    """A dense row-major (rows x cols) bf16 matrix whose first element is 2 bytes past a 16-byte boundary."""
    return torch.randn(rows * cols + 1, device="cuda").bfloat16()[1:].view(rows, cols)


# Operands TMA cannot read where they lie, by the rule of gemm_operands.cpp (dense, rows of a multiple of 8 elements,
# a 16-byte aligned start; or the same for the transpose), each with the copy the op makes, and layouts it reads in
# place. (M, K, N) are ragged against the 64 x 128 and 128 x 256 blocks.
OPERAND_LAYOUTS = {
    # A (129 x 64) as the transpose of a (64 x 129) tensor: rows of 129 elements; copied to row-major.
    "a_t_ragged_m": (lambda: (make_operand(129, 64, True), make_operand(64, 72, False)), True),
    # A (200 x 64) taking every other column of a (200 x 128) tensor: not dense; copied.
    "a_strided_columns": (lambda: (torch.randn(200, 128, device="cuda").bfloat16()[:, ::2], make_operand(64, 72, True)),
                          True),
    # A dense but 2 bytes off alignment; copied.
    "a_unaligned": (lambda: (offset_by_one(200, 64), make_operand(64, 72, False)), True),
    # A (64 x 300) row-major: rows of 300 elements; copied transposed (M = 64 allows it).
    "a_row_ragged_k": (lambda: (make_operand(64, 300, False), make_operand(300, 72, False)), True),
    # A (2, 3, 77, 64) permuted from (77, 2, 3, 64): its leading dimensions do not fold into rows; made contiguous.
    "a_batched_permuted": (lambda: (torch.randn(77, 2, 3, 64, device="cuda").bfloat16().permute(1, 2, 0, 3),
                                    make_operand(64, 72, False)), True),
    # B (300 x 72) as the transpose of a (72 x 300) tensor: rows of 300 elements; copied to row-major.
    "b_t_ragged_k": (lambda: (make_operand(64, 300, True), make_operand(300, 72, True)), True),
    # B dense but 2 bytes off alignment; copied.
    "b_unaligned": (lambda: (make_operand(136, 64, False), offset_by_one(64, 72)), True),
    # Read in place: transposed A with M % 8 == 0, transposed A over K = 300, transposed B with K % 8 == 0.
    "a_t_in_place": (lambda: (make_operand(136, 64, True), make_operand(64, 72, False)), False),
    "a_t_ragged_k_in_place": (lambda: (make_operand(64, 300, True), make_operand(300, 72, False)), False),
    "b_t_in_place": (lambda: (make_operand(129, 64, False), make_operand(64, 72, True)), False),
}


@pytest.mark.parametrize("layout", OPERAND_LAYOUTS)
def test_matmul_copies_what_tma_cannot_read(layout):
    """An operand the rule says must be copied is copied (a copy kernel or a device-to-device memcpy runs with the
    GEMM), the product of the copy is right, and the layouts TMA reads in place run with no copy at all."""
    make, copied = OPERAND_LAYOUTS[layout]
    a, b = make()
    m, n = a.numel() // a.shape[-1], b.shape[1]
    assert testing.gemm_config(m, n, a.shape[-1]) != "split"  # split-K's own fp32 -> bf16 copy would read as one
    fresh_pool_with_nan(m * n, torch.bfloat16)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        out = tk_ops.matmul(a, b)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    copies = [name for name in names if "copy" in name.lower() or "memcpy" in name.lower()]
    assert bool(copies) == copied, f"{layout}: copies {copies} among {names}"
    assert out.shape == (*a.shape[:-1], n)
    assert_close(out, a.double() @ b.double(), BF16_TOL, layout)


@pytest.mark.parametrize("m", [300, 1, 64])
def test_matmul_autograd_ragged_m(m):
    a = make_operand(m, 64, False).requires_grad_()
    b = make_operand(64, 72, False).requires_grad_()
    g = torch.randn(m, 72, device="cuda").bfloat16()
    tk_ops.matmul(a, b).backward(g)
    assert_close(b.grad, a.detach().double().t() @ g.double(), BF16_TOL, "dB over ragged M")


def test_matmul_grad_only_where_required():
    a = make_operand(64, 64, False).requires_grad_()
    b = make_operand(64, 64, False)
    tk_ops.matmul(a, b).sum().backward()
    assert a.grad is not None and b.grad is None


@pytest.mark.parametrize("config", FP8_CONFIGS)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
# By block size picked: 64 x 128 blocks for (1024, 1024, 1024), (1000, 520, 272) and (1, 64, 128); 128 x 128 for
# (2000, 1024, 512) (128 x 256 with an fp32 output); 128 x 256 (128 x 128 with an fp32 output) for (4097, 2056, 2048).
@pytest.mark.parametrize("mnk", [(1024, 1024, 1024), (1000, 520, 272), (1, 64, 128), (2000, 1024, 512), (4097, 2056, 2048)],
                         ids=lambda s: "x".join(map(str, s)))
def test_scaled_mm(mnk, out_dtype, config):
    m, n, k = mnk
    a = (torch.randn(m, k, device="cuda") * 2).to(torch.float8_e4m3fn)
    w = (torch.randn(n, k, device="cuda") * 2).to(torch.float8_e4m3fn)
    sa = torch.tensor([0.7], device="cuda")
    sb = torch.tensor([1.3], device="cuda")
    fresh_pool_with_nan(m * n * 2, torch.bfloat16)
    out = scaled_mm_in(config, a, w.t(), sa, sb, out_dtype)
    assert out.dtype == out_dtype and out.shape == (m, n)
    tol = fp8_tol(out_dtype, k)
    assert_close(out, reference.scaled_mm(a, w.t(), sa, sb), tol, f"scaled_mm to {out_dtype}")
    if n % 16 == 0 and k % 16 == 0:  # torch._scaled_mm itself wants both multiples of 16
        # cuBLAS's own error (promoted accumulation, one rounding) is at most ours: twice our bound covers both.
        peer = torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=out_dtype)
        assert_close(out, peer.double(), 2 * tol, f"scaled_mm to {out_dtype} vs torch._scaled_mm")


def spread_scales(*shape):
    """fp32 scales over 2^-3 .. 2^1, so that a row or column given another's scale is far off (and the products of
    the largest stay within float16's range: sums of 2048 products of randn * 2 reach ~1e3 before scaling)."""
    return torch.exp2(torch.randint(-3, 2, shape, device="cuda").float()) * (0.75 + 0.5 * torch.rand(*shape, device="cuda"))


def assert_close_per_line(out, ref, tol, what, magnitude=None):
    """Relative error of every row and every column on its own (a norm over the whole matrix would let rows with
    small scales hide behind those with large ones). `magnitude` (the size each element would have without
    cancellation, same shape) floors a line's norm: a line of one or a few elements that cancel to near zero is
    measured against the scale its accumulation error comes from, not against its own near-zero value."""
    diff, ref = out.double() - ref, ref.double()
    for dim, name in ((1, "row"), (0, "column")):
        scale = ref.norm(dim=dim)
        if magnitude is not None:
            scale = torch.maximum(scale, magnitude.double().norm(dim=dim))
        err = diff.norm(dim=dim) / scale.clamp_min(1e-30)
        worst = int(err.argmax())
        assert err[worst] <= tol, f"{what}: {name} {worst} has relative error {float(err[worst]):.3e} > {tol:.1e}"


# Row-wise scaling as torch._scaled_mm takes it (scale_a (M, 1), scale_b (1, N)), and each side on its own with the
# other per tensor. Shapes by block size as in test_scaled_mm, with ragged M and N edges.
@pytest.mark.parametrize("config", FP8_CONFIGS)
@pytest.mark.parametrize("kind", ["rows_and_columns", "columns", "rows"])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("mnk", [(1000, 520, 272), (2000, 1024, 512), (4097, 2056, 2048), (1, 64, 128)],
                         ids=lambda s: "x".join(map(str, s)))
def test_scaled_mm_rowwise(mnk, out_dtype, kind, config):
    m, n, k = mnk
    torch.manual_seed(1)
    a = (torch.randn(m, k, device="cuda") * 2).to(torch.float8_e4m3fn)
    w = (torch.randn(n, k, device="cuda") * 2).to(torch.float8_e4m3fn)
    sa = spread_scales(m, 1) if kind != "columns" else torch.tensor([0.7], device="cuda")
    sb = spread_scales(1, n) if kind != "rows" else torch.tensor(1.3, device="cuda")
    fresh_pool_with_nan(m * n * 2, torch.bfloat16)
    out = scaled_mm_in(config, a, w.t(), sa, sb, out_dtype)
    assert out.dtype == out_dtype and out.shape == (m, n)
    expect = reference.scaled_mm(a, w.t(), sa, sb)
    # sqrt(sum_k (a_ik b_kj)^2) times the scales: an element's size before cancellation.
    magnitude = ((a.double() * sa.double()).square() @ (w.t().double() * sb.double()).square()).sqrt()
    tol = fp8_tol(out_dtype, k)
    assert_close_per_line(out, expect, 2 * tol, f"scaled_mm row-wise to {out_dtype}", magnitude)
    # The form torch._scaled_mm supports (bf16 out, both vectors), where it takes the shape (N, K multiples of 16).
    if kind == "rows_and_columns" and out_dtype == torch.bfloat16 and n % 16 == 0 and k % 16 == 0:
        peer = torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=out_dtype)
        assert_close(out, peer.double(), 2 * tol, "scaled_mm row-wise vs torch._scaled_mm")


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("rowwise", [False, True], ids=["per_tensor", "rowwise"])
@pytest.mark.parametrize("mnk", [(1024, 1024, 1024), (2000, 1024, 512), (4097, 2056, 2048)],
                         ids=lambda s: "x".join(map(str, s)))
def test_testing_scaled_mm_runs_the_public_ops_pick(mnk, rowwise, out_dtype):
    m, n, k = mnk
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
    sa = spread_scales(m, 1) if rowwise else torch.tensor(0.7, device="cuda")
    sb = spread_scales(1, n) if rowwise else torch.tensor(1.3, device="cuda")
    picked = testing.gemm_config(m, n, k, torch.float8_e4m3fn, out_dtype)
    assert picked in testing.FP8_CONFIGS
    assert torch.equal(testing.scaled_mm(a, w.t(), sa, sb, out_dtype, picked),
                       tk_ops.scaled_mm(a, w.t(), sa, sb, out_dtype=out_dtype)), picked


def test_scaled_mm_rejects_scale_shapes():
    a = torch.randn(64, 32, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(48, 32, device="cuda").to(torch.float8_e4m3fn)
    one = torch.ones(1, device="cuda")
    with pytest.raises(InputError, match=r"\(64, 1\)"):
        tk_ops.scaled_mm(a, w.t(), torch.ones(64, device="cuda"), one)
    with pytest.raises(InputError, match=r"\(1, 48\)"):
        tk_ops.scaled_mm(a, w.t(), one, torch.ones(48, 1, device="cuda"))
    with pytest.raises((RuntimeError, ValueError), match="scale_b must have one element"):  # the op checks as well
        torch.ops.tk_ops.scaled_mm(a, w.t(), one, torch.ones(2, 24, device="cuda"), torch.bfloat16)


@pytest.mark.parametrize("bias", [True, False])
def test_linear_forward_backward(bias):
    torch.manual_seed(0)
    ref = torch.nn.Linear(256, 136, bias=bias, device="cuda", dtype=torch.bfloat16)
    mod = tk_ops.nn.Linear.from_linear(ref)
    x = torch.randn(4, 33, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    y = mod(x)
    expect = reference.linear(x.detach(), ref.weight.detach(), ref.bias.detach() if bias else None)
    assert y.shape == (4, 33, 136)
    assert_close(y, expect, BF16_TOL, "Linear forward")
    g = torch.randn_like(y)
    y.backward(g)
    g64, x64 = g.double().reshape(-1, 136), x.detach().double().reshape(-1, 256)
    assert_close(x.grad.reshape(-1, 256), g64 @ ref.weight.detach().double(), BF16_TOL, "dX")
    assert_close(mod.weight.grad, g64.t() @ x64, BF16_TOL, "dW")
    if bias:
        assert_close(mod.bias.grad, g64.sum(0), BF16_TOL, "db")


@pytest.mark.parametrize("mnk", SPLIT_K_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("a_t", [False, True], ids=["a_row", "a_t"])
def test_matmul_split_k(mnk, a_t):
    """Outputs too small to occupy the GPU over long contractions (a weight gradient over many tokens) take
    the split-K kernel: fp32 partial sums of K ranges (ragged last range included) added into the output."""
    m, n, k = mnk
    a, b = make_operand(m, k, a_t), make_operand(k, n, False)
    fresh_pool_with_nan(m * n * 2, torch.float32)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        out = tk_ops.matmul(a, b)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert any("gemm<__nv_bfloat16, float" in name for name in names), names  # the split-K kernel ran
    assert_close(out, a.double() @ b.double(), BF16_TOL, "split-K")


def test_matmul_split_k_steps_aside_for_deterministic_algorithms():
    """Split-K adds its partial sums in a varying order; under torch.use_deterministic_algorithms the plain
    kernel runs instead, and repeated calls agree bit for bit."""
    a, b = make_operand(512, 8192, True), make_operand(8192, 512, False)
    with deterministic_algorithms():
        first, second = tk_ops.matmul(a, b), tk_ops.matmul(a, b)
    assert torch.equal(first, second)
    assert_close(first, a.double() @ b.double(), BF16_TOL, "deterministic")


@pytest.mark.parametrize("shape", [(3, 333, 64), (64,), (1, 64), (1000, 64)], ids=str)
@pytest.mark.parametrize("wrt", ["x", "w", "xw"])
def test_linear_ragged_tokens_and_partial_grads(shape, wrt):
    """Any token count (dW contracts over tokens: no multiple-of-8 rule there), a 1-D input, gradients only
    where required, and dW in the weight's own layout (no transposing copy on the way to the optimizer)."""
    torch.manual_seed(1)
    mod = tk_ops.nn.Linear(64, 40, device="cuda")
    mod.weight.requires_grad_("w" in wrt)
    mod.bias.requires_grad_("w" in wrt)
    x = torch.randn(*shape, device="cuda", dtype=torch.bfloat16, requires_grad="x" in wrt)
    y = mod(x)
    assert y.shape == (*shape[:-1], 40)
    assert_close(y, reference.linear(x.detach(), mod.weight.detach(), mod.bias.detach()), BF16_TOL, "forward")
    g = torch.randn_like(y)
    y.backward(g)
    g64, x64 = g.double().reshape(-1, 40), x.detach().double().reshape(-1, 64)
    if "x" in wrt:
        assert_close(x.grad.reshape(-1, 64), g64 @ mod.weight.detach().double(), BF16_TOL, "dX")
    else:
        assert x.grad is None
    if "w" in wrt:
        assert mod.weight.grad.is_contiguous() and mod.weight.grad.shape == (40, 64)
        assert_close(mod.weight.grad, g64.t() @ x64, BF16_TOL, "dW")
        assert_close(mod.bias.grad, g64.sum(0), BF16_TOL, "db")
    else:
        assert mod.weight.grad is None and mod.bias.grad is None


LINEAR_SHAPES = [(4096, 512, 1024), (1000, 264, 520), (3, 64, 8), (8192, 64, 2056)]


@pytest.mark.parametrize("config", BF16_CONFIGS)
@pytest.mark.parametrize("mkn", LINEAR_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "odd_offset"])
def test_linear_bias_in_the_epilogue(mkn, offset, config):
    """The bias is added in the GEMM's epilogue (fp32, before the rounding) in every configuration (by their own
    pick, the sizes run small, tiny and resident blocks) and ragged last column blocks; a bias view at an odd element
    offset is copied first."""
    m, k, n = mkn
    if not runs(config, m, n, k):
        return
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    bias = (torch.randn(n + offset, device="cuda") * 4).bfloat16()[offset:]
    fresh_pool_with_nan(m * n, torch.bfloat16)
    y = linear_in(config, x, w, bias)
    expect = reference.linear(x, w, bias)
    assert_close(y, expect, BF16_TOL, "x W^T + b")
    # One rounding: as close to the float64 result as torch's cuBLAS epilogue is.
    peer = torch.nn.functional.linear(x, w, bias)
    assert rel_err(y, expect) <= 1.5 * rel_err(peer, expect) + 1e-4


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("mkn", LINEAR_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_testing_linear_runs_the_public_ops_pick(mkn, bias):
    m, k, n = mkn
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16) if bias else None
    with deterministic_algorithms(testing.gemm_config(m, n, k, bias=bias) == "split"):
        picked = testing.gemm_config(m, n, k, bias=bias)
        assert picked in testing.CONFIGS
        assert torch.equal(testing.linear(x, w, b, picked), torch.ops.tk_ops.linear(x, w, b)), picked


def test_linear_double_backward():
    """backward(create_graph=True) goes through the products' own autograd: dX = dY W is differentiable in W.
    With y = x W^T and L = sum(dL/dx) for dY = 1, dL/dW[n, k] = number of tokens."""
    mod = tk_ops.nn.Linear(64, 32, bias=False, device="cuda")
    x = torch.randn(48, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    (gx,) = torch.autograd.grad(mod(x).sum(), x, create_graph=True)
    gx.sum().backward()
    assert torch.equal(mod.weight.grad, torch.full_like(mod.weight, 48.0))


def test_linear_opcheck():
    """Schema, fake-vs-kernel metadata, the C++ autograd registration and the dynamic-shape path that
    torch.compile takes."""
    x = torch.randn(3, 37, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(48, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(48, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    tk_ops.nn.Linear(64, 48, device="cuda")(x)  # loads the extension (and with it the autograd kernel)
    for args in ((x, w, b), (x, w, None)):
        torch.library.opcheck(torch.ops.tk_ops.linear, args, rtol=2e-2, atol=2e-2)


def test_linear_compiles_fullgraph():
    mod = torch.nn.Sequential(tk_ops.nn.Linear(128, 256, device="cuda"), torch.nn.GELU(),
                              tk_ops.nn.Linear(256, 64, device="cuda"))
    x = torch.randn(50, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    eager = mod(x)
    compiled = torch.compile(mod, fullgraph=True)
    out = compiled(x)
    # Inductor fuses the GELU in fp32, eager rounds between ops: the two agree to bf16 precision
    assert_close(out, eager.double(), BF16_TOL, "compiled vs eager")
    out.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_matmul_cuda_graph_capture():
    a, b = make_operand(512, 256, False), make_operand(256, 384, True)
    tk_ops.matmul(a, b)  # warm up (descriptor cache, attributes) outside capture
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        out = tk_ops.matmul(a, b)
    a.copy_(make_operand(512, 256, False))
    graph.replay()
    torch.cuda.synchronize()
    assert_close(out, reference.matmul(a, b), BF16_TOL, "graph replay")
