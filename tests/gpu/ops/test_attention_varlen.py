"""tk_ops.attention_varlen (packed documents, like flash_attn_varlen_func) against the float64 reference, document by
document, forward (O, LSE) and backward (dQ, dK, dV, and through the LSE): ragged lengths with empty documents and
documents of one token, cross lengths per document, causal, windows, softcap, explicit scales, GQA, head dims 64 to
256, bf16 and fp16, rows past the last offset, NaN and inf outside the documents (past the last offsets, or in the
next document), offsets that are not monotonic (clamped, never out of bounds), torch.compile and CUDA graphs."""
import pytest
import torch

import tk_ops
from tk_ops import reference

from ..util import assert_close, fresh_pool_with_nan, rel_err
from .test_attention import LSE_ATOL, TOL
from .test_attention_bwd import assert_grads
from .test_attention_masks import CAP, CAP_INPUT_SCALE, lse_tol, tolerances


def cu(lengths):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")


def packed(total, heads, d, dtype, scale=1.0):
    return (torch.randn(total, heads, d, device="cuda") * scale).to(dtype)


def check(q, k, v, cu_q, cu_k, what, **options):
    fresh_pool_with_nan(2 * q.numel() + q.shape[0] * q.shape[1])
    lq, lk = (cu_q[1:] - cu_q[:-1]), (cu_k[1:] - cu_k[:-1])
    out, lse = tk_ops.attention_varlen_with_lse(q, k, v, cu_q, cu_k, int(lq.max()), int(lk.max()), **options)
    ref, ref_lse = reference.attention_varlen(q, k, v, cu_q, cu_k, **options)
    assert out.shape == q.shape and out.dtype == q.dtype, what
    assert lse.shape == (q.shape[1], q.shape[0]) and lse.dtype == torch.float32, what
    assert_close(out, ref, TOL[q.dtype], f"{what}: O")  # rows: one (token, head) each
    empty = torch.isneginf(ref_lse)
    assert torch.equal(torch.isneginf(lse), empty), f"{what}: -inf LSE rows differ"
    if empty.any():
        assert (out.transpose(0, 1)[empty] == 0).all(), f"{what}: rows that see no key must be 0"
    if (~empty).any():
        lse_err = (lse.double()[~empty] - ref_lse[~empty]).abs().max().item()  # per element
        assert lse_err <= lse_tol(options.get("softcap", 0.0)), f"{what}: LSE max error {lse_err:.3e}"


DOCS = {
    "ragged": [300, 1, 0, 777, 64, 193, 2000, 5],
    "one": [4097],
    "many_short": [1, 2, 3, 17, 63, 64, 65, 127, 128, 129, 191, 192, 193] * 3,
    "empty_ends": [0, 0, 500, 0, 250, 0],
}


# (options, the scale of q and k). The softcaps bind, computed in float64 on these documents: a kernel ignoring CAP on
# scores of standard deviation 4 would miss O by 1.6 to 2 (relative) and the gradients by 3 to 4; one ignoring the
# cap of 2 on unit scores would miss O by 0.3 to 0.4 and the gradients by 0.75 to 1.1.
OPTIONS = {
    "full": ({}, 1.0),
    "causal": ({"causal": True}, 1.0),
    "causal_w100": ({"causal": True, "window": (100, -1)}, 1.0),
    f"w50_20_cap{CAP:g}": ({"window": (50, 20), "softcap": CAP}, CAP_INPUT_SCALE),
    "causal_cap2": ({"causal": True, "softcap": 2.0}, 1.0),
}


@pytest.mark.parametrize("options", list(OPTIONS))
@pytest.mark.parametrize("docs", list(DOCS), ids=list(DOCS))
@pytest.mark.parametrize("d", [64, 96, 128, 256])
def test_packed_documents(d, docs, options):
    lengths = DOCS[docs]
    total = sum(lengths)
    kw, scale = OPTIONS[options]
    q = packed(total, 4, d, torch.bfloat16, scale)
    k, v = packed(total, 2, d, torch.bfloat16, scale), packed(total, 2, d, torch.bfloat16)
    check(q, k, v, cu(lengths), cu(lengths), f"d={d} {docs} {options}", **kw)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal_bottom_right"])
def test_cross_lengths_per_document(causal):
    """Queries and keys of different lengths per document (decoding a packed batch against longer contexts, and
    the other way round): causal rows align bottom-right inside each document."""
    lq, lk = [17, 300, 0, 1, 900], [1000, 100, 50, 1, 899]
    q = packed(sum(lq), 8, 128, torch.float16)
    k, v = packed(sum(lk), 2, 128, torch.float16), packed(sum(lk), 2, 128, torch.float16)
    check(q, k, v, cu(lq), cu(lk), f"cross causal={causal}", causal=causal)


def test_rows_past_the_last_offset_are_zero():
    """Tensors longer than the offsets say: the trailing query rows see no key (O = 0, LSE = -inf) and the trailing
    keys are seen by no query."""
    q, k, v = packed(700, 2, 64, torch.bfloat16), packed(900, 2, 64, torch.bfloat16), packed(900, 2, 64, torch.bfloat16)
    check(q, k, v, cu([300, 200]), cu([400, 100]), "trailing rows", causal=True)


def test_gpu_offsets_not_starting_at_zero():
    """GPU offsets are not read on the host: a first offset above 0 is clamped to 0 (the first document starts at
    row 0), so no output row is left unwritten."""
    q, k, v = packed(600, 2, 64, torch.bfloat16), packed(600, 2, 64, torch.bfloat16), packed(600, 2, 64, torch.bfloat16)
    bad = torch.tensor([100, 400, 600], dtype=torch.int32, device="cuda")
    out = tk_ops.attention_varlen(q, k, v, bad, bad, 600, 600, causal=True)
    good = torch.tensor([0, 400, 600], dtype=torch.int32, device="cuda")
    ref, _ = reference.attention_varlen(q, k, v, good, good, causal=True)
    assert_close(out, ref, TOL[torch.bfloat16], "offsets clamped to start at 0")


def test_offsets_out_of_order_stay_inside_the_tensors():
    """Offsets that decrease or run past the tensors are clamped (a decreasing one reads as an empty document):
    the call completes and matches the reference on the clamped offsets."""
    q, k, v = packed(600, 2, 64, torch.bfloat16), packed(600, 2, 64, torch.bfloat16), packed(600, 2, 64, torch.bfloat16)
    bad = torch.tensor([0, 400, 200, 5000], dtype=torch.int32, device="cuda")
    out = tk_ops.attention_varlen(q, k, v, bad, bad, 600, 600, causal=True)
    clamped = torch.tensor([0, 400, 400, 600], dtype=torch.int32, device="cuda")
    ref, _ = reference.attention_varlen(q, k, v, clamped, clamped, causal=True)
    assert_close(out, ref, TOL[torch.bfloat16], "clamped offsets")


def test_offsets_in_host_memory():
    """Host offsets are checked on the host and copied: the same result as GPU offsets, forward and backward; bad
    ones are refused with the offending index; GPU offsets on another device are refused."""
    q, k, v = (packed(900, 2, 64, torch.bfloat16).requires_grad_() for _ in range(3))
    gpu = cu([300, 0, 600])
    host = gpu.cpu()
    out_gpu = tk_ops.attention_varlen(q, k, v, gpu, gpu, 600, 600, causal=True)
    out_host = tk_ops.attention_varlen(q, k, v, host, host, 600, 600, causal=True)
    assert torch.equal(out_gpu, out_host)
    dout = torch.randn_like(out_gpu)
    for a, b in zip(torch.autograd.grad(out_gpu, (q, k, v), dout), torch.autograd.grad(out_host, (q, k, v), dout)):
        assert torch.equal(a, b)
    with pytest.raises(tk_ops.errors.InputError, match="must not decrease"):
        tk_ops.attention_varlen(q, k, v, torch.tensor([0, 600, 300, 900], dtype=torch.int32), gpu, 600, 600)


def test_matches_dense_attention_on_equal_lengths():
    """Documents of one length are a dense batch: the packed op and tk_ops.attention agree to rounding."""
    b, n, h, d = 3, 1000, 4, 128
    q, k, v = (torch.randn(b, n, h, d, device="cuda").bfloat16() for _ in range(3))
    dense = tk_ops.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True).transpose(1, 2)
    lengths = cu([n] * b)
    out = tk_ops.attention_varlen(q.reshape(b * n, h, d), k.reshape(b * n, h, d), v.reshape(b * n, h, d), lengths,
                                  lengths, n, n, causal=True)
    torch.testing.assert_close(out, dense.reshape(b * n, h, d), rtol=0, atol=2e-2)


def reference_grads(q, k, v, dout, cu_q, cu_k, dlse=None, **options):
    """(dQ, dK, dV) in float64, document by document through reference.attention_backward."""
    grads = [torch.zeros(t.shape, dtype=torch.float64, device="cuda") for t in (q, k, v)]
    cq, ck = cu_q.tolist(), cu_k.tolist()
    as_bhnd = lambda t: t.transpose(0, 1).unsqueeze(0)  # noqa: E731
    for i in range(len(cq) - 1):
        (q0, q1), (k0, k1) = (cq[i], cq[i + 1]), (ck[i], ck[i + 1])
        if q1 <= q0 or k1 <= k0:
            continue
        dl = None if dlse is None else dlse[:, q0:q1].unsqueeze(0)
        dq, dk, dv = reference.attention_backward(as_bhnd(q[q0:q1]), as_bhnd(k[k0:k1]), as_bhnd(v[k0:k1]),
                                                  as_bhnd(dout[q0:q1]), dlse=dl, **options)
        grads[0][q0:q1] = dq[0].transpose(0, 1)
        grads[1][k0:k1] = dk[0].transpose(0, 1)
        grads[2][k0:k1] = dv[0].transpose(0, 1)
    return grads


def check_backward(q, k, v, cu_q, cu_k, what, with_lse=False, **options):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out, lse = tk_ops.attention_varlen_with_lse(q, k, v, cu_q, cu_k, 1, 1, **options)
    dout = torch.randn_like(out)
    loss = (out.float() * dout.float()).sum()
    dlse = None
    if with_lse:
        seen = torch.isfinite(lse)
        dlse = torch.where(seen, torch.randn_like(lse), 0.0)
        loss = loss + (torch.where(seen, lse, 0.0) * dlse).sum()
    fresh_pool_with_nan(2 * (q.numel() + k.numel() + v.numel()))
    got = torch.autograd.grad(loss, (q, k, v))
    expect = reference_grads(q.detach(), k.detach(), v.detach(), dout, cu_q, cu_k, dlse, **options)
    assert_grads(got, expect, q.dtype, what, *tolerances(q.dtype, options.get("softcap", 0.0))[1:])


@pytest.mark.parametrize("options", ["full", "causal", "causal_w100", f"w50_20_cap{CAP:g}", "causal_cap2"])
@pytest.mark.parametrize("docs", ["ragged", "many_short", "empty_ends"])
@pytest.mark.parametrize("d", [64, 128])
def test_backward_packed_documents(d, docs, options):
    lengths = DOCS[docs]
    total = sum(lengths)
    kw, scale = OPTIONS[options]
    q = packed(total, 4, d, torch.bfloat16, scale)
    k, v = packed(total, 2, d, torch.bfloat16, scale), packed(total, 2, d, torch.bfloat16)
    check_backward(q, k, v, cu(lengths), cu(lengths), f"d={d} {docs} {options}", **kw)


@pytest.mark.parametrize("options", ["causal", f"w50_20_cap{CAP:g}"])
@pytest.mark.parametrize("d", [96, 256])
def test_backward_packed_documents_other_head_dims(d, options):
    """D = 96 (three 32-column chunks) and D = 256 (the split backward, its exchange tiles and per-consumer dK / dV
    stores of a document's last partial tile) on ragged documents."""
    lengths = DOCS["ragged"]
    total = sum(lengths)
    kw, scale = OPTIONS[options]
    q = packed(total, 4, d, torch.bfloat16, scale)
    k, v = packed(total, 2, d, torch.bfloat16, scale), packed(total, 2, d, torch.bfloat16)
    check_backward(q, k, v, cu(lengths), cu(lengths), f"d={d} ragged {options}", **kw)


# Scales other than 1/sqrt(D), with and without a cap (which acts on the scaled scores), and negative (which the
# forward runs as -q at the positive scale: a path of its own). In float64 on these documents, a kernel that used the
# default scale instead would miss O by 0.25 to 1.1 (relative) and the gradients by 0.6 to 2.4.
SCALED = {
    "s0.05-causal": (0.05, {"causal": True}),
    "s-0.3-w100_30": (-0.3, {"window": (100, 30)}),
    "s-0.3-causal_cap2": (-0.3, {"causal": True, "softcap": 2.0}),
    "s0.05-w100_30_cap2": (0.05, {"window": (100, 30), "softcap": 2.0}),
}


@pytest.mark.parametrize("case", list(SCALED))
@pytest.mark.parametrize("d", [64, 128])
def test_explicit_scale(d, case):
    scale, kw = SCALED[case]
    lengths = DOCS["ragged"]
    total = sum(lengths)
    q = packed(total, 4, d, torch.bfloat16)
    k, v = packed(total, 2, d, torch.bfloat16), packed(total, 2, d, torch.bfloat16)
    what = f"d={d} scale={scale} {kw}"
    check(q, k, v, cu(lengths), cu(lengths), what, scale=scale, **kw)
    check_backward(q, k, v, cu(lengths), cu(lengths), what, scale=scale, **kw)


def test_zero_scale():
    """scale = 0: every visible key weighs the same (the kernels read zeros for q), whatever q holds."""
    lengths = [300, 1, 0, 777]
    q = packed(1078, 4, 64, torch.bfloat16)
    k, v = packed(1078, 2, 64, torch.bfloat16), packed(1078, 2, 64, torch.bfloat16)
    check(q, k, v, cu(lengths), cu(lengths), "scale=0", scale=0.0, causal=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("d", [64, 128])
def test_backward_cross_lengths_trailing_rows_and_lse(d, dtype):
    """Different query and key lengths per document, rows past the last offsets (their gradients are 0), and a
    loss that uses the LSE too."""
    lq, lk = [17, 300, 0, 1, 900], [1000, 100, 50, 1, 899]
    q = packed(sum(lq) + 7, 8, d, dtype)
    k, v = packed(sum(lk) + 9, 2, d, dtype), packed(sum(lk) + 9, 2, d, dtype)
    check_backward(q, k, v, cu(lq), cu(lk), f"cross d={d} {dtype}", with_lse=True, causal=True)


def non_finite(rows):
    """Fill a slice of packed rows with NaN, +inf and -inf in turn, in place."""
    values = torch.tensor([float("nan"), float("inf"), float("-inf")], device=rows.device, dtype=rows.dtype)
    rows.copy_(values[torch.arange(rows.numel(), device=rows.device) % 3].view_as(rows))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal_bottom_right"])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_non_finite_rows_past_the_last_offsets(d, causal):
    """Rows past the last offsets may hold anything (a buffer filled only in part): NaN and inf there in Q, K, V and
    dO reach no output and no gradient. The last document's partial tiles load those rows and mask them, and masked
    products still multiply them by 0; the kernels zero them in shared memory first. The trailing query rows' outputs
    and every trailing row's gradients are 0."""
    lq, lk = [300, 1, 0, 193, 77], [250, 64, 3, 200, 100]
    nq, nk = sum(lq), sum(lk)
    q = packed(nq + 51, 4, d, torch.bfloat16)
    k, v = packed(nk + 70, 2, d, torch.bfloat16), packed(nk + 70, 2, d, torch.bfloat16)
    non_finite(q[nq:])
    non_finite(k[nk:])
    non_finite(v[nk:])
    cu_q, cu_k = cu(lq), cu(lk)
    what = f"non-finite trailing rows d={d} causal={causal}"
    check(q, k, v, cu_q, cu_k, what, causal=causal)

    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = tk_ops.attention_varlen(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=causal)
    dout = torch.randn_like(out)
    non_finite(dout[nq:])
    fresh_pool_with_nan(2 * (q.numel() + k.numel() + v.numel()))
    got = torch.autograd.grad(out, (q, k, v), dout)
    expect = reference_grads(q.detach(), k.detach(), v.detach(), dout, cu_q, cu_k, causal=causal)
    assert_grads(got, expect, q.dtype, what)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_non_finite_next_document(d, causal):
    """A document followed by one whose Q, K, V and dO rows hold NaN and inf: the first document's last partial tiles
    load the second's rows (masked), and its outputs, LSE and gradients stay finite and right. The second document's
    own results are NaN, so only the first's rows are compared."""
    first, second = 100, 200
    q = packed(first + second, 4, d, torch.bfloat16)
    k, v = packed(first + second, 2, d, torch.bfloat16), packed(first + second, 2, d, torch.bfloat16)
    for t in (q, k, v):
        non_finite(t[first:])
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    offsets = cu([first, second])
    out, lse = tk_ops.attention_varlen_with_lse(q, k, v, offsets, offsets, second, second, causal=causal)
    alone = cu([first])
    ref, ref_lse = reference.attention_varlen(q[:first].detach(), k[:first].detach(), v[:first].detach(), alone, alone,
                                              causal=causal)
    what = f"non-finite next document d={d} causal={causal}"
    assert_close(out[:first], ref, TOL[q.dtype], f"{what}: O")
    lse_err = (lse[:, :first].double() - ref_lse).abs().max().item()
    assert lse_err <= LSE_ATOL, f"{what}: LSE max error {lse_err:.3e}"

    dout = torch.randn_like(out)
    non_finite(dout[first:])
    got = torch.autograd.grad(out, (q, k, v), dout)
    expect = reference_grads(q[:first].detach(), k[:first].detach(), v[:first].detach(), dout[:first], alone, alone,
                             causal=causal)
    assert_grads([g[:first] for g in got], expect, q.dtype, what)


def test_backward_of_one_document_matches_dense():
    n, h, d = 3000, 4, 128
    q, k, v = (torch.randn(1, n, h, d, device="cuda").bfloat16().requires_grad_() for _ in range(3))
    dense = tk_ops.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True, window=(500, -1))
    dout = torch.randn_like(dense)
    expect = torch.autograd.grad(dense, (q, k, v), dout)
    rows = lambda t: t[0]  # noqa: E731 - (1, n, h, d) -> (n, h, d)
    out = tk_ops.attention_varlen(rows(q), rows(k), rows(v), cu([n]), cu([n]), n, n, causal=True, window=(500, -1))
    got = torch.autograd.grad(out, (q, k, v), rows(dout.transpose(1, 2)))
    for name, g, e in zip("qkv", got, expect):
        torch.testing.assert_close(g, e, rtol=0, atol=2e-2, msg=f"d{name}")


def test_backward_compiles_fullgraph():
    q, k, v = (packed(1500, 4, 64, torch.bfloat16).requires_grad_() for _ in range(3))
    offsets = cu([700, 0, 800])

    def loss(q, k, v):
        return tk_ops.attention_varlen(q * 2, k, v, offsets, offsets, 800, 800, causal=True).float().square().mean()

    eager = torch.autograd.grad(loss(q, k, v), (q, k, v))
    compiled = torch.autograd.grad(torch.compile(loss, fullgraph=True)(q, k, v), (q, k, v))
    for name, c, e in zip("qkv", compiled, eager):
        assert rel_err(c, e) <= 1e-3, f"d{name}: compiled differs from eager by {rel_err(c, e):.2e}"


def test_compiles_fullgraph_and_captures():
    q, k, v = (packed(1500, 4, 64, torch.bfloat16) for _ in range(3))
    offsets = cu([700, 0, 800])

    def fn(q, k, v):
        return tk_ops.attention_varlen(q * 2, k, v, offsets, offsets, 800, 800, causal=True, window=(64, -1))

    torch.testing.assert_close(torch.compile(fn, fullgraph=True)(q, k, v), fn(q, k, v), rtol=0, atol=1e-2)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        out = fn(q, k, v)
    q.copy_(torch.randn_like(q))
    graph.replay()
    torch.cuda.synchronize()
    ref, _ = reference.attention_varlen(q * 2, k, v, offsets, offsets, causal=True, window=(64, -1))
    assert_close(out, ref, TOL[torch.bfloat16], "graph replay")
