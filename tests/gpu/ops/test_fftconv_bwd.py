"""The FFT convolution's backward (tk_ops.fftconv through autograd) against autograd through the float64 reference
on the GPU: du, dk, dpregate and dpostgate for lengths 1 .. 4096 (every built FFT size), on the block path and past
it up to the longest sequence the op takes, filters as long as and shorter than the sequence whose every block of
taps weighs in the output (test_fftconv.filter_taps), bf16 and fp16 inputs, fp32, bf16 and fp16 filters, an odd
batch, no gate, pregate, postgate and both; gradients on a subset of the inputs, the cached spectrum (u and the gates
only) on every path, strided inputs and an expanded output gradient, an empty batch, run-to-run reproducibility,
outputs poisoned before the run, torch.compile(fullgraph=True), the backward op under a Python dispatch mode and a
CUDA-graph capture of forward and backward. Every gradient is compared per row (one sequence, or one filter's taps)
and per position (one sample, or one lag, of every row). The plumbing and the cuFFT path's algorithm are also tested
without a GPU (tests/cpu/test_fftconv_bwd_api.py). Skipped unless the 'fftconv' family is in the build."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import tk_ops
from tk_ops.reference.fftconv import fftconv as conv_ref

from ...util import requires_families
from ..util import TOL as ROUNDED_ONCE, fresh_pool_with_nan, rel_err
from .test_fftconv import BLOCKS_LEN, FP32_FFT, assert_rows_close, filter_taps, max_len

# ||grad - ref|| / ||ref|| by the dtype of the computation (u's), up to BLOCKS_LEN: du, dpregate and dpostgate come out
# of the forward kernel (on the time-reversed dy * postgate, or with dy as its postgate), whose rounding reaches about
# 6e-3 (bf16) and 6e-4 (fp16) (docs/fftconv.md), plus at most one 16-bit product with a gate or u; dk comes out of the
# filter-gradient kernel, the same transforms in the same 16-bit type, summed over the batch in fp32: an fp32 dk
# carries the 16-bit computation's error, and a 16-bit k rounds it once more. Past BLOCKS_LEN every gradient is fp32
# arithmetic (cuFFT) rounded once to its own dtype (bound()).
TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3}
# The same kernels under torch.compile, where inductor may fuse the loss's elementwise work and round once where
# eager rounds after every op.
COMPILE_TOL = 5e-3
LEAVES = ("u", "k", "pregate", "postgate")
GATES = {"none": (), "pre": ("pregate",), "post": ("postgate",), "both": ("pregate", "postgate")}
DTYPES = [pytest.param(torch.bfloat16, id="bf16"), pytest.param(torch.float16, id="fp16")]


pytestmark = requires_families("fftconv")


def bound(n, dtype, compute):
    """The relative error allowed a gradient of `dtype` at length n, inputs of dtype `compute` (TOL)."""
    if n > BLOCKS_LEN:
        return FP32_FFT if dtype == torch.float32 else ROUNDED_ONCE[dtype]
    return max(TOL[compute], TOL.get(dtype, 0.0))


def problem(b, h, n, nk, gates=(), dtype=torch.bfloat16, k_dtype=torch.float32, seed=0):
    """u, k (every block of its taps weighs in y, test_fftconv.filter_taps), the named gates (around 1; the others
    None) and dy, by name."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = dict(u=torch.randn(b, h, n, device="cuda", generator=gen).to(dtype),
             k=filter_taps(h, nk, gen).to(k_dtype), pregate=None, postgate=None)
    for g in gates:
        x[g] = (1 + 0.5 * torch.randn(b, h, n, device="cuda", generator=gen)).to(dtype)
    x["dy"] = torch.randn(b, h, n, device="cuda", generator=gen).to(dtype)
    return x


def ref_grads(x, names, dy=None):
    """The gradients of `names` by autograd through the float64 reference."""
    leaves = {name: x[name].detach().double().requires_grad_() for name in names}
    y = conv_ref(*(leaves.get(name, x[name]) for name in LEAVES))
    wrt = [leaves[name] for name in names]
    return dict(zip(names, torch.autograd.grad(y, wrt, (x["dy"] if dy is None else dy).double())))


def tk_grads(x, names, k_f=None, dy=None):
    """The gradients of `names` through tk_ops.fftconv, the output's poisoned pool under them."""
    leaves = {name: x[name].detach().requires_grad_() for name in names}
    args = [leaves.get(name, x[name]) for name in LEAVES]
    if k_f is not None:
        args[1] = None
    y = tk_ops.fftconv(*args, k_f=k_f)
    fresh_pool_with_nan(8 * x["u"].numel(), x["u"].dtype)
    grads = torch.autograd.grad(y, [leaves[name] for name in names], x["dy"] if dy is None else dy)
    torch.cuda.synchronize()
    return dict(zip(names, grads))


def compare(got, want, x, what):
    """Each gradient within its bound as a whole, per row (a sequence of du and the gates, a filter's taps of dk) and
    per position (a sample of every sequence, a lag of every filter)."""
    n, compute = x["u"].shape[-1], x["u"].dtype
    for name, ref in want.items():
        grad = got[name]
        like = x[name]
        assert grad.shape == like.shape and grad.dtype == like.dtype, f"{what} d{name}: {grad.shape} {grad.dtype}"
        assert_rows_close(grad, ref, bound(n, grad.dtype, compute), f"{what} d{name}")


@pytest.mark.parametrize("k_dtype", [torch.float32, torch.bfloat16], ids=["k_fp32", "k_bf16"])
@pytest.mark.parametrize("gates", GATES, ids=GATES)
@pytest.mark.parametrize("n", [1, 7, 256, 1000, 4096])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gradients(dtype, n, gates, k_dtype):
    for nk in sorted({n, max(1, n // 3)}):
        x = problem(3, 4, n, nk, GATES[gates], dtype, k_dtype, seed=n + nk)
        names = ("u", "k") + GATES[gates]
        compare(tk_grads(x, names), ref_grads(x, names), x, f"N={n} Nk={nk} {gates}")


@pytest.mark.parametrize("n", [100, 1000, 4096])
def test_fp16_filter(n):
    x = problem(3, 4, n, n // 2, ("pregate", "postgate"), torch.bfloat16, torch.float16)
    compare(tk_grads(x, LEAVES), ref_grads(x, LEAVES), x, f"k fp16 N={n}")


@pytest.mark.parametrize("n", [65, 129, 257, 2049, 4095])
def test_lengths_between_fft_sizes(n):
    x = problem(3, 4, n, n, ("pregate", "postgate"))
    compare(tk_grads(x, LEAVES), ref_grads(x, LEAVES), x, f"N={n}")


@pytest.mark.parametrize("n", [4097, 10000, 2 ** 16, 2 ** 16 + 1, 100000, "max"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_long_sequences(n, dtype):
    """The block path (4096 < N <= 65536) and cuFFT past it up to the longest sequence: the forward twice and the
    filter gradient, whose last lag block (a single lag at Nk = N / 2 + 1) matters as much as any."""
    n = max_len() if n == "max" else n
    b, h = (3, 4) if n <= 100000 else (1, 2)
    x = problem(b, h, n, n // 2 + 1, ("pregate", "postgate"), dtype)
    compare(tk_grads(x, LEAVES), ref_grads(x, LEAVES), x, f"N={n}")


@pytest.mark.parametrize("n", [1000, 70000], ids=["kernels", "cufft"])
@pytest.mark.parametrize("names", [("u",), ("k",), ("pregate",), ("postgate",), ("u", "postgate"), ("k", "pregate")],
                         ids=lambda n: "+".join(n))
def test_gradients_of_a_subset(names, n):
    """Only some inputs require a gradient: each gets the right one (the mask by autograd edge)."""
    x = problem(3, 4, n, n // 2, ("pregate", "postgate"))
    compare(tk_grads(x, names), ref_grads(x, names), x, "+".join(names))


def test_batches_and_channels():
    h = 2 * torch.cuda.get_device_properties(0).multi_processor_count  # blocks that run several pairs
    for b in (1, 5):
        x = problem(b, h, 1000, 300, ("pregate", "postgate"), seed=b)
        compare(tk_grads(x, LEAVES), ref_grads(x, LEAVES), x, f"B={b} H={h}")


@pytest.mark.parametrize("n", [7, 1000, 4096, 4097, 10000, 65536, 65537, 100000, "max"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_cached_spectrum(n, dtype):
    """With k_f (which gets no gradient), u and the gates get the same gradients as with k: on chip, on the block
    path (k_f per block of taps, the backward's reversed convolutions reading it) and past it (cuFFT's layout), up to
    the longest sequence the op takes."""
    n = max_len() if n == "max" else n
    b, h = (3, 4) if n <= 100000 else (1, 2)
    for nk in sorted({n, n // 2 + 1}):
        x = problem(b, h, n, nk, ("pregate", "postgate"), dtype, seed=nk)
        names = ("u", "pregate", "postgate")
        with torch.no_grad():
            k_f = tk_ops.fftconv_spectrum(x["k"], n)
        got = tk_grads(x, names, k_f=k_f)
        compare(got, ref_grads(x, names), x, f"k_f N={n} Nk={nk}")
        with_k = tk_grads(x, names)
        for name in names:
            assert torch.equal(got[name], with_k[name]), f"N={n} Nk={nk} d{name}: k_f and k differ"


def test_strided_inputs_and_expanded_output_gradient():
    x = problem(4, 6, 500, 500, ("pregate", "postgate"))
    x["u"] = x["u"].transpose(0, 1).contiguous().transpose(0, 1)        # (B, H, N) view of an (H, B, N) tensor
    x["k"] = torch.cat([x["k"], x["k"]], 1)[:, ::2]                      # a non-contiguous filter
    x["pregate"] = torch.cat([x["pregate"], x["pregate"]], -1)[..., ::2]  # a sample stride of 2
    dy = torch.ones(1, 1, 1, device="cuda", dtype=torch.bfloat16).expand(4, 6, 500)  # what y.sum() hands back
    compare(tk_grads(x, LEAVES, dy=dy), ref_grads(x, LEAVES, dy=dy), x, "strided")


def test_empty_batch():
    x = problem(0, 4, 100, 100, ("pregate",))
    got = tk_grads(x, ("u", "k", "pregate"))
    assert got["u"].shape == (0, 4, 100) and got["pregate"].shape == (0, 4, 100)
    assert torch.equal(got["k"], torch.zeros_like(x["k"]))


def test_reproducible():
    """Each element of du, dpregate and dpostgate is written once by the forward kernel; dk is a sum of fp32 atomic
    additions (their order may vary)."""
    x = problem(3, 4, 1000, 1000, ("pregate", "postgate"))
    first, second = tk_grads(x, LEAVES), tk_grads(x, LEAVES)
    for name in ("u", "pregate", "postgate"):
        assert torch.equal(first[name], second[name]), f"d{name}"
    assert rel_err(second["k"], first["k"]) <= 1e-6


class PassThrough(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("n", [1000, 20000, 70000], ids=["on_chip", "blocks", "cufft"])
def test_backward_op_gives_the_same_under_a_dispatch_mode(n):
    """torch.compile's AOT path calls the op from a Python dispatch mode's handler, where a lazily conjugated
    spectrum once lost its conjugation; on every path the op gives its eager result there (dk up to the order of its
    fp32 atomic additions)."""
    x = problem(3, 2, n, n // 2, ("pregate", "postgate"))
    k_f = tk_ops.fftconv_spectrum(x["k"], n).conj_physical().conj()  # the spectrum as a lazily conjugated view
    assert k_f.is_conj()
    args = (*(x[name] for name in LEAVES), k_f, x["dy"], [True, True, True, True])
    eager = torch.ops.tk_ops.fftconv_bwd(*args)
    with PassThrough():
        moded = torch.ops.tk_ops.fftconv_bwd(*args)
    for name, e, m in zip(LEAVES, eager, moded):
        assert rel_err(m, e) <= (1e-6 if name == "k" else 0.0), f"d{name}"


# -- torch.compile and CUDA graphs ---------------------------------------------------------------------------------

def test_compiles_fullgraph_forward_and_backward():
    x = problem(3, 4, 1000, 400, ("pregate", "postgate"))
    w = x["dy"].float()

    def loss(u, k, pregate, postgate):
        return (tk_ops.fftconv(u * 2, k, pregate, postgate).float() * w).sum()

    def grads_of(fn):
        leaves = [x[name].detach().clone().requires_grad_() for name in LEAVES]
        return dict(zip(LEAVES, torch.autograd.grad(fn(*leaves), leaves)))

    eager = grads_of(loss)
    compiled = grads_of(torch.compile(loss, fullgraph=True))
    x2 = dict(x, u=x["u"] * 2)
    ref = ref_grads(x2, LEAVES)
    ref["u"] = ref["u"] * 2
    compare(compiled, ref, x, "compiled")
    for name in LEAVES:
        e = rel_err(compiled[name], eager[name])
        assert e <= COMPILE_TOL, f"d{name}: compiled differs from eager by {e:.2e}"


@pytest.mark.parametrize("shape", [(3, 4, 1000, 600), (1, 2, 70000, 70000)], ids=["kernels", "cufft"])
def test_cuda_graph_capture_of_forward_and_backward(shape):
    """Forward and backward captured once, replayed on new inputs written into the captured ones."""
    x = problem(*shape, ("pregate", "postgate"), torch.float16)
    leaves = {name: x[name].detach().clone().requires_grad_() for name in LEAVES}
    dy = x["dy"].clone()

    def step():
        y = tk_ops.fftconv(*(leaves[name] for name in LEAVES))
        return torch.autograd.grad(y, [leaves[name] for name in LEAVES], dy)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm-up outside capture: loads the extension, makes cuFFT's plans, settles the allocator
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()

    new = problem(*shape, ("pregate", "postgate"), torch.float16, seed=7)
    with torch.no_grad():
        for name in LEAVES:
            leaves[name].copy_(new[name])
        dy.copy_(new["dy"])
    graph.replay()
    torch.cuda.synchronize()
    replayed = {name: t.clone() for name, t in zip(LEAVES, captured)}
    compare(replayed, ref_grads(new, LEAVES), new, "graph replay")
    eager = tk_grads(new, LEAVES)
    for name in LEAVES:
        assert rel_err(replayed[name], eager[name]) <= 1e-6, f"d{name}: replay differs from eager"
