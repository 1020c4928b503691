"""tk_ops.integrations.transformers without a GPU or the extension, on tiny Llama, Mistral (sliding window) and
Gemma 2 (sliding window, softcap, alternating layers) models in float64 on the CPU.

The kernels are replaced by tk_ops.reference (float64, their own semantics, recording every call), the CPU and
float64 declared kernel-capable, and the attention registered with strict=True: a call that fell back instead of
reaching the kernels' entry points raises. The models' logits are compared with the same weights run on a reference
written here: textbook float64 attention on the boolean masks transformers itself builds (masking_utils.sdpa_mask,
always materialised), rows that see no key giving 0 (transformers' eager attention turns those rows into NaN in
float64). Packed rows are compared with each document run alone. Also: the window semantics against transformers'
masks, what the mask function returns, the fallbacks (CPU tensors, dropout, output_attentions, head dimensions, gaps
under a window) against transformers' own implementations, swap_linears, and examples/train_hf_llama.py's CPU
smoke mode."""
from __future__ import annotations

import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the transformers integration needs transformers")

from tk_ops import _ext, reference, sdpa
from tk_ops.errors import DeviceMismatchError, DTypeError, InputError
from tk_ops.integrations import transformers as tkt
from tk_ops.reference.attention import attention_visible
from tk_ops.sdpa import FallbackWarning as SdpaFallbackWarning
from transformers import (AutoModelForCausalLM, DataCollatorWithFlattening, Gemma2Config, LlamaConfig, MistralConfig,
                          masking_utils)

from ..hf_reference import reference_attention, reference_mask
from ..util import cpu_linear
from .example_loader import load_example

F64 = torch.float64
VOCAB = 96
WINDOW = 4
REFERENCE = "tk_ops_test_reference"


# ---------------------------------------------------------------- the reference attention and the models


transformers.AttentionInterface.register(REFERENCE, reference_attention)
masking_utils.AttentionMaskInterface.register(REFERENCE, reference_mask)

# Tiny models whose attention matters: initializer_range 0.2 makes the scores of order 1, so the softcap of 1.0 binds
# and the attention is far from uniform (test_options_bind checks both, and the window).
COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, initializer_range=0.2, pad_token_id=0)
CONFIGS = {
    "llama": lambda **kw: LlamaConfig(**{**COMMON, **kw}),
    "mistral": lambda **kw: MistralConfig(**{**COMMON, "sliding_window": WINDOW, **kw}),
    # layer 0 sliding (window 4), layer 1 full; both capped
    "gemma2": lambda **kw: Gemma2Config(**{**COMMON, "sliding_window": WINDOW, "attn_logit_softcapping": 1.0,
                                           "query_pre_attn_scalar": 16, **kw}),
}
MODELS = list(CONFIGS)


def build(name: str, implementation: str = "tk_ops", dtype=F64, seed: int = 0, **config):
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(CONFIGS[name](**config), attn_implementation=implementation,
                                            dtype=dtype).eval()


def logits(model, implementation: str, *args, **kwargs) -> torch.Tensor:
    model.set_attn_implementation(implementation)
    with torch.no_grad():
        return model(*args, **kwargs).logits


def assert_near(ours: torch.Tensor, ref: torch.Tensor, tol: float, what: str = ""):
    """max |ours - ref| <= tol * max |ref|; NaN fails."""
    assert ours.shape == ref.shape, f"{what}: {tuple(ours.shape)} != {tuple(ref.shape)}"
    err = (ours.double() - ref.double()).abs().max().item()
    scale = ref.double().abs().max().item()
    assert err <= tol * scale, f"{what}: max error {err:.3e} > {tol:.0e} x {scale:.3e}"


@pytest.fixture(scope="module", autouse=True)
def registered():
    """"tk_ops" (falls back with a warning) and "tk_ops_strict" (raises instead); removed afterwards."""
    names = (tkt.register("tk_ops"), tkt.register("tk_ops_strict", strict=True))
    yield names
    for name in names:
        transformers.AttentionInterface._global_mapping.pop(name, None)
        masking_utils.AttentionMaskInterface._global_mapping.pop(name, None)


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """Each test sees the first warning of every reason (ours and tk_ops.scaled_dot_product_attention's)."""
    monkeypatch.setattr(tkt, "_warned", set())
    monkeypatch.setattr(sdpa, "_warned", set())


@pytest.fixture
def kernels(monkeypatch):
    """The attention ops replaced by tk_ops.reference, recording their calls; the CPU and float64 declared
    kernel-capable, head dimension 16 built."""
    calls = []

    def call(family, op, name, *args):
        assert family == "attention", (family, op)
        if op == "attention_fwd":
            q, k, v, causal, scale, left, right, softcap = args
            assert name == "tk_ops.attention" and q.dim() == 4
            o, lse = reference.attention(q, k, v, causal, scale, (left, right), softcap)
        else:
            assert op == "attention_varlen_fwd" and name == "tk_ops.flash_attn.flash_attn_varlen_func"
            q, k, v, cu_q, cu_k, max_q, max_k, causal, scale, left, right, softcap = args
            assert cu_q.dtype == cu_k.dtype == torch.int32 and type(max_q) is int and type(max_k) is int
            lens_q, lens_k = cu_q.diff(), cu_k.diff()
            assert max_q == int(lens_q.max()) and max_k == int(lens_k.max())
            o, lse = reference.attention_varlen(q, k, v, cu_q, cu_k, causal, scale, (left, right), softcap)
        assert isinstance(causal, bool) and isinstance(left, int) and isinstance(right, int)
        calls.append(dict(op=op, q=tuple(q.shape), k=tuple(k.shape), causal=causal, window=(left, right),
                          softcap=softcap, scale=scale, cu_q=args[3].tolist() if op != "attention_fwd" else None))
        return o.to(q.dtype), lse.float()

    monkeypatch.setattr(_ext, "call", call)
    monkeypatch.setattr(tkt, "_KERNEL_DEVICE_TYPES", ("cuda", "cpu"))
    monkeypatch.setattr(tkt, "_KERNEL_DTYPES", (torch.bfloat16, torch.float16, F64))
    monkeypatch.setattr(tkt, "_built_dims", (16, 32))
    return calls


def inputs(batch=2, n=12, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(1, VOCAB, (batch, n), generator=gen)


def padding(kind: str, batch=2, n=12) -> torch.Tensor:
    mask = torch.ones(batch, n, dtype=torch.long)
    if kind == "left":
        mask[0, :5] = 0
        mask[1, :1] = 0
    elif kind == "right":
        mask[0, 7:] = 0
        mask[1, 11:] = 0
    return mask


def expected_window(name: str, layer: int) -> tuple[int, int]:
    """The kernels' window for each layer: transformers' W keys up to the query are (W - 1, 0)."""
    sliding = name == "mistral" or (name == "gemma2" and layer == 0)
    return (WINDOW - 1, 0) if sliding else (-1, -1)


def check_calls(calls, name, op, nlayers=2):
    """Every layer's call went to `op` with the model's causal flag, window, softcap and scale."""
    assert len(calls) % nlayers == 0 and calls, calls
    for i, c in enumerate(calls):
        layer = i % nlayers
        assert c["op"] == op, c
        assert c["causal"] is True
        assert c["window"] == expected_window(name, layer), (layer, c)
        assert c["softcap"] == (1.0 if name == "gemma2" else 0.0)
        assert c["scale"] == pytest.approx(16 ** -0.5)


# ---------------------------------------------------------------- registration


@pytest.mark.parametrize("name", MODELS)
def test_register_selects_the_tk_ops_attention(name, monkeypatch):
    """attn_implementation="tk_ops" is accepted once registered, and every layer's attention goes through
    attention_forward; a name never registered is refused by transformers."""
    seen = []
    real = tkt.attention_forward
    monkeypatch.setattr(tkt, "attention_forward", lambda *a, **k: seen.append(k.get("strict")) or real(*a, **k))
    model = build(name, "tk_ops", dtype=torch.float32)
    assert model.config._attn_implementation == "tk_ops"
    assert transformers.AttentionInterface._global_mapping["tk_ops"].__doc__ == real.__doc__
    assert masking_utils.AttentionMaskInterface._global_mapping["tk_ops"] is tkt.prepare_mask
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tkt.FallbackWarning)
        model(inputs())
    assert seen == [False, False]
    with pytest.raises(ValueError, match="tk_ops_never_registered"):
        build(name, "tk_ops_never_registered")


@pytest.mark.parametrize("bad", ["flash_tk", "org/repo", "", "paged|tk"])
def test_register_refuses_names_transformers_reads_otherwise(bad):
    with pytest.raises(InputError, match="name"):
        tkt.register(bad)


# ---------------------------------------------------------------- semantics of transformers' masks


@pytest.mark.parametrize("w", [1, 2, 3, 5])
def test_sliding_window_is_w_keys_up_to_the_query(w):
    """transformers' sliding window W (kv_idx > q_idx - W) is the kernels' (W - 1, 0) on every prefill and every
    decoding step of a sliding-window cache (keys kv_offset .. kv_offset + kv_length, queries the last ones), aligned
    bottom-right; the bidirectional window is |i - j| <= W, the kernels' (W, W)."""
    fn = masking_utils.sliding_window_causal_mask_function(w)
    assert tkt._window(w, True) == (w - 1, 0)
    for n in range(1, 10):
        theirs = masking_utils.sdpa_mask(batch_size=1, q_length=n, kv_length=n, mask_function=fn,
                                         allow_is_causal_skip=False)[0, 0]
        assert torch.equal(attention_visible(n, n, True, tkt._window(w, True)), theirs), n
    # decoding, as DynamicSlidingWindowLayer sizes it: cumulative length c, q new tokens
    for c in range(12):
        for q in (1, 3):
            kv_offset = max(c - w + 1, 0)
            kv_length = (w - 1 + q) if c >= w else c + q
            theirs = masking_utils.sdpa_mask(batch_size=1, q_length=q, kv_length=kv_length, q_offset=c,
                                             kv_offset=kv_offset, mask_function=fn, allow_is_causal_skip=False)[0, 0]
            assert torch.equal(attention_visible(q, kv_length, True, tkt._window(w, True)), theirs), (c, q)
    both = masking_utils.sliding_window_bidirectional_mask_function(w)
    theirs = masking_utils.sdpa_mask(batch_size=1, q_length=9, kv_length=9, mask_function=both,
                                     allow_is_causal_skip=False)[0, 0]
    assert torch.equal(attention_visible(9, 9, False, tkt._window(w, False)), theirs)
    assert tkt._window(None, True) == tkt._window(0, True) == (-1, -1)


def test_prepare_mask_outputs():
    """None without padding; the (B, L) padding mask over the keys up to the last query (kv_offset applied, a static
    cache's later slots dropped); the document ids of packed rows (registered); transformers' materialised SDPA mask
    for anything else."""
    causal = masking_utils.causal_mask_function
    sliding = masking_utils.sliding_window_causal_mask_function(3)
    pad = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    assert tkt.prepare_mask(2, 7, 7, mask_function=causal) is None
    assert tkt.prepare_mask(2, 1, 7, q_offset=6, mask_function=sliding, local_size=3) is None
    got = tkt.prepare_mask(2, 7, 7, mask_function=causal, attention_mask=pad)
    assert got.dtype == torch.bool and torch.equal(got, pad)
    # a sliding cache's decoding step: keys 4 .. 6 of the 7 seen
    got = tkt.prepare_mask(2, 1, 3, q_offset=6, kv_offset=4, mask_function=sliding, attention_mask=pad, local_size=3)
    assert torch.equal(got, pad[:, 4:7])
    # a static cache of 10 slots holding 6 tokens, one new query: 7 keys, with and without padding
    got = tkt.prepare_mask(2, 1, 10, q_offset=torch.tensor(6), mask_function=causal, attention_mask=pad)
    assert torch.equal(got, pad)
    got = tkt.prepare_mask(2, 1, 10, q_offset=torch.tensor(6), mask_function=causal)
    assert got.shape == (2, 7) and bool(got.all())
    # a static cache's prefill with a mask shorter than the keys up to the query: padded with "no token"
    got = tkt.prepare_mask(2, 7, 10, q_offset=0, mask_function=causal, attention_mask=pad[:, :5])
    assert torch.equal(got, torch.cat([pad[:, :5], torch.zeros(2, 2, dtype=torch.bool)], 1))
    # packed rows, as create_causal_mask wraps the function
    pos = torch.tensor([[0, 1, 2, 0, 1, 0, 1], [0, 1, 2, 3, 4, 5, 6]])
    ids = masking_utils.find_packed_sequence_indices(pos)
    packed = masking_utils.packed_sequence_compatibility_function(sliding, pos, ids)
    got = tkt.prepare_mask(2, 7, 7, mask_function=packed, local_size=3)
    assert torch.equal(got, ids) and tkt._DOC_IDS.get(id(got)) is got
    # anything else: transformers' own mask, materialised
    odd = masking_utils.or_masks(causal, lambda b, h, q, kv: kv == 0)
    got = tkt.prepare_mask(2, 7, 7, mask_function=odd, attention_mask=pad)
    want = masking_utils.sdpa_mask(batch_size=2, q_length=7, kv_length=7, mask_function=odd, attention_mask=pad,
                                   allow_is_causal_skip=False)
    assert got.shape == (2, 1, 7, 7) and torch.equal(got, want)
    bidirectional = tkt.prepare_mask(1, 4, 4, mask_function=masking_utils.bidirectional_mask_function)
    assert bidirectional.shape == (1, 1, 4, 4) and bool(bidirectional.all())


def describe(mask) -> str:
    if mask is None:
        return "None"
    kind = "doc ids" if tkt._DOC_IDS.get(id(mask)) is mask else str(mask.dtype).replace("torch.", "")
    return f"{kind} {tuple(mask.shape)}"


def test_what_the_attention_function_receives(kernels, monkeypatch):
    """What transformers hands the attention function in each situation (the table of docs/transformers.md)."""
    seen = []
    real = tkt.attention_forward

    named = ("sliding_window", "softcap", "dropout")

    def spy(module, query, key, value, attention_mask, **kwargs):
        seen.append(dict(layer=module.layer_idx, q=tuple(query.shape), k=tuple(key.shape),
                         mask=describe(attention_mask), **{k: v for k, v in kwargs.items() if k in named},
                         kwargs=sorted(k for k in kwargs if k not in named and k != "strict")))
        return real(module, query, key, value, attention_mask, **kwargs)

    monkeypatch.setattr(tkt, "attention_forward", spy)
    gemma, mistral = build("gemma2"), build("mistral")
    ids, mask = inputs(), padding("left")

    logits(gemma, "tk_ops_strict", ids)  # unpadded prefill: no mask; window on the sliding layer only; softcap on both
    assert [(c["layer"], c["mask"], c["sliding_window"], c["softcap"], c["dropout"]) for c in seen] == [
        (0, "None", WINDOW, 1.0, 0.0), (1, "None", None, 1.0, 0.0)]
    assert seen[0]["q"] == (2, 4, 12, 16) and seen[0]["k"] == (2, 2, 12, 16)
    assert {"position_ids", "scaling"} <= set(seen[0]["kwargs"])

    seen.clear()
    logits(gemma, "tk_ops_strict", ids, attention_mask=mask)  # padding: a (B, L) boolean mask
    assert [c["mask"] for c in seen] == ["bool (2, 12)"] * 2

    seen.clear()
    mistral.set_attn_implementation("tk_ops_strict")
    mistral.generate(ids, attention_mask=mask, max_new_tokens=2, do_sample=False, pad_token_id=0)
    # the prefill, then one decoding step: one query against the sliding cache's W - 1 kept keys and the new one
    assert [(c["q"][2], c["k"][2], c["mask"]) for c in seen] == [(12, 12, "bool (2, 12)")] * 2 + [
        (1, WINDOW, f"bool (2, {WINDOW})")] * 2

    seen.clear()
    batch = DataCollatorWithFlattening(return_flash_attn_kwargs=True)([{"input_ids": d} for d in DOCS])
    pos = batch["position_ids"]
    logits(mistral, "tk_ops_strict", batch["input_ids"], position_ids=pos)  # packed, the default cache on
    assert seen[0]["mask"] == "None" and "position_ids" in seen[0]["kwargs"]
    seen.clear()
    logits(mistral, "tk_ops_strict", batch["input_ids"], position_ids=pos, use_cache=False)
    assert seen[0]["mask"] == "doc ids (1, 16)"
    seen.clear()
    flash_kwargs = {k: batch[k] for k in ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")}
    logits(mistral, "tk_ops_strict", batch["input_ids"], **flash_kwargs)
    assert seen[0]["mask"] == "None" and {"cu_seq_lens_q", "max_length_k"} <= set(seen[0]["kwargs"])

    seen.clear()
    with torch.no_grad():
        mistral.train()(ids)  # training mode passes the model's attention dropout (0 here)
    assert seen[0]["dropout"] == 0.0


# ---------------------------------------------------------------- models on the kernels' entry points


@pytest.mark.parametrize("name", MODELS)
def test_options_bind(name):
    """The test models' window and softcap change the logits (so that comparisons below could see them wrong)."""
    ids = inputs()
    base = logits(build(name), REFERENCE, ids)
    if name != "llama":
        assert (logits(build(name, sliding_window=64), REFERENCE, ids) - base).abs().max() > 1e-2 * base.abs().max()
    if name == "gemma2":
        uncapped = logits(build(name, attn_logit_softcapping=None), REFERENCE, ids)
        assert (uncapped - base).abs().max() > 1e-2 * base.abs().max()


@pytest.mark.parametrize("pad", ["none", "left", "right"])
@pytest.mark.parametrize("name", MODELS)
def test_logits_equal_the_reference(name, pad, kernels):
    """Unpadded batches run tk_ops.attention on the (B, H, N, D) tensors; padded ones (left or right) run
    flash_attn_varlen_func on the tokens only; both equal the reference at every token position."""
    model = build(name)
    ids, mask = inputs(), padding(pad)
    kwargs = {} if pad == "none" else {"attention_mask": mask}
    ours = logits(model, "tk_ops_strict", ids, **kwargs)
    check_calls(kernels, name, "attention_fwd" if pad == "none" else "attention_varlen_fwd")
    if pad != "none":
        assert all(c["q"][0] == c["k"][0] == int(mask.sum()) for c in kernels)
        assert all(c["cu_q"] == [0] + mask.sum(1).cumsum(0).tolist() for c in kernels)
    ref = logits(model, REFERENCE, ids, **kwargs)
    valid = mask.bool()
    assert_near(ours[valid], ref[valid], 1e-12, f"{name} {pad}")


def documents_alone(model, docs):
    """The reference's logits of each document run on its own, concatenated."""
    return torch.cat([logits(model, REFERENCE, torch.tensor([d])) for d in docs], dim=1)


DOCS = [[5, 9, 17, 3, 44], [8, 2, 61, 7, 7, 30, 11], [12], [40, 41, 42]]


@pytest.mark.parametrize("route", ["positions", "documents", "cu_seq_lens"])
@pytest.mark.parametrize("name", MODELS)
def test_packed_rows_equal_each_document_alone(name, route, kernels):
    """DataCollatorWithFlattening's batches: one row of documents with restarting position_ids. With the default
    cache transformers' masks do not see the packing, and the attention finds it in position_ids; with
    use_cache=False transformers' masks find it and hand over document ids; with the flash-attention kwargs
    (cu_seq_lens_q/k, max_length_q/k) the offsets are taken as given. Each way, every document's logits are those of
    the document alone, through flash_attn_varlen_func with one document per offset."""
    model = build(name)
    batch = DataCollatorWithFlattening(return_flash_attn_kwargs=route == "cu_seq_lens")(
        [{"input_ids": d} for d in DOCS])
    kwargs = {"input_ids": batch["input_ids"], "position_ids": batch["position_ids"]}
    if route == "documents":
        kwargs["use_cache"] = False
    if route == "cu_seq_lens":
        kwargs.update({k: batch[k] for k in ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")})
    ours = logits(model, "tk_ops_strict", **kwargs)
    check_calls(kernels, name, "attention_varlen_fwd")
    offsets = [0, 5, 12, 13, 16]
    assert all(c["cu_q"] == offsets for c in kernels)
    assert_near(ours[0], documents_alone(model, DOCS)[0], 1e-12, f"{name} {route}")


def test_documents_start_where_positions_do_not_continue(kernels):
    """A document starts wherever a position is not the previous one plus one (transformers' definition), also when
    it does not start at 0 (a document continued from an earlier chunk)."""
    model = build("gemma2")
    ids = torch.tensor([[5, 9, 17, 3, 44, 8, 2, 61, 7, 7, 30]])
    pos = torch.tensor([[0, 1, 2, 3, 4, 7, 8, 9, 10, 11, 12]])
    ours = logits(model, "tk_ops_strict", ids, position_ids=pos)
    assert all(c["cu_q"] == [0, 5, 11] for c in kernels)
    alone = torch.cat([logits(model, REFERENCE, ids[:, :5], position_ids=pos[:, :5]),
                       logits(model, REFERENCE, ids[:, 5:], position_ids=pos[:, 5:])], dim=1)
    assert_near(ours, alone, 1e-12, "continued document")


def test_packed_batch_of_several_rows(kernels):
    """Rows of packed documents in a batch of two (use_cache=False, so transformers' masks detect them per row): the
    document ids of both rows, one document list over the flattened rows."""
    model = build("mistral")
    rows = [[[3, 4, 5, 6, 7, 8], [9, 10]], [[11, 12, 13], [14, 15, 16, 17, 18]]]
    ids = torch.tensor([[t for d in r for t in d] for r in rows])
    pos = torch.tensor([[i for d in r for i in range(len(d))] for r in rows])
    ours = logits(model, "tk_ops_strict", ids, position_ids=pos, use_cache=False)
    assert all(c["cu_q"] == [0, 6, 8, 11, 16] for c in kernels)
    for b, r in enumerate(rows):
        assert_near(ours[b], documents_alone(model, r)[0], 1e-12, f"row {b}")


@pytest.mark.parametrize("pad", ["none", "left"])
@pytest.mark.parametrize("name", MODELS)
def test_generate_greedy_equals_the_reference(name, pad, kernels):
    """Greedy generation with a KV cache: the decoding steps (one query against the cache, aligned bottom-right;
    Mistral's sliding-window cache keeps W - 1 keys, Gemma 2 mixes both) give the reference's tokens and logits."""
    model = build(name)
    ids, mask = inputs(n=9, seed=3), padding(pad, n=9)
    opts = dict(attention_mask=mask, max_new_tokens=8, do_sample=False, output_logits=True,
                return_dict_in_generate=True, pad_token_id=0)
    model.set_attn_implementation("tk_ops_strict")
    ours = model.generate(ids, **opts)
    decode = [c for c in kernels if (c["op"] == "attention_fwd" and c["q"][2] == 1 and c["k"][2] > 1)
              or (c["op"] == "attention_varlen_fwd" and c["cu_q"] == [0, 1, 2] and c["k"][0] > 2)]
    assert len(decode) == 2 * 7, "every decoding step of both layers reached the kernels"
    model.set_attn_implementation(REFERENCE)
    ref = model.generate(ids, **opts)
    assert torch.equal(ours.sequences, ref.sequences)
    for step, (a, b) in enumerate(zip(ours.logits, ref.logits)):
        assert_near(a, b, 1e-12, f"step {step}")


@pytest.mark.parametrize("pad", ["none", "left"])
def test_generate_with_a_static_cache(pad, kernels):
    """A static cache hands the attention all its slots; the keys past the last query are dropped (the mask function
    trims the mask to them), and the tokens equal the reference's."""
    model = build("llama")
    ids, mask = inputs(n=7, seed=4), padding(pad, n=7)
    opts = dict(attention_mask=mask, max_new_tokens=5, do_sample=False, pad_token_id=0, cache_implementation="static")
    model.set_attn_implementation("tk_ops_strict")
    ours = model.generate(ids, **opts)
    model.set_attn_implementation(REFERENCE)
    assert torch.equal(ours, model.generate(ids, **opts))


def test_gradients_through_the_padded_path(kernels):
    """The varlen path gathers and scatters the tokens; gradients reach the parameters as the reference's."""
    ids, mask = inputs(), padding("left")
    grads = []
    for impl in ("tk_ops_strict", REFERENCE):
        model = build("llama")
        model.set_attn_implementation(impl)
        out = model(ids, attention_mask=mask).logits
        (out * mask[..., None]).square().sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert_near(grads[0], grads[1], 1e-11, "gradients")


# ---------------------------------------------------------------- fallbacks


PATHS = ["dense", "decode", "chunk", "padded", "padded-decode", "static", "documents", "positions", "cu_seq_lens",
         "cu_seq_lens-decode"]


def attention_case(what: str):
    """(q, k, v, mask, kwargs) of attention_forward for one path: Gemma 2's and Mistral's layers give them their
    window, softcap and scale."""
    gen = torch.Generator().manual_seed(5)
    b, nq, nk = {"decode": (2, 1, 9), "chunk": (2, 3, 9), "padded-decode": (2, 1, 9), "static": (2, 2, 12),
                 "positions": (1, 9, 9), "cu_seq_lens": (1, 9, 9), "cu_seq_lens-decode": (1, 3, 9)}.get(what, (2, 9, 9))
    q, k, v = (torch.randn(b, h, n, 16, generator=gen, dtype=F64) for h, n in ((4, nq), (2, nk), (2, nk)))
    pad = padding("left", n=9).bool()
    cu = torch.tensor([0, 3, 3, 8, 9], dtype=torch.int32)
    mask, kwargs = None, {}
    if what.startswith("padded"):
        mask = pad
    elif what == "static":
        mask = pad[:, :8]  # 8 of the 12 slots hold keys; the 2 queries are the last two of them
    elif what == "documents":
        mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 2], [0, 0, 1, 1, 1, 1, 1, 1, 1]])
        tkt._DOC_IDS[id(mask)] = mask
    elif what == "positions":
        kwargs["position_ids"] = torch.tensor([[0, 1, 2, 0, 1, 2, 3, 4, 0]])
    elif what == "cu_seq_lens":
        kwargs.update(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=5, max_length_k=5)
    elif what == "cu_seq_lens-decode":  # one query per document against its 3, 2 and 4 keys
        kwargs.update(cu_seq_lens_q=torch.tensor([0, 1, 2, 3], dtype=torch.int32),
                      cu_seq_lens_k=torch.tensor([0, 3, 5, 9], dtype=torch.int32), max_length_q=1, max_length_k=4)
    return q, k, v, mask, kwargs


@pytest.mark.parametrize("what", PATHS)
@pytest.mark.parametrize("name, layer", [("gemma2", 0), ("gemma2", 1), ("mistral", 0)],
                         ids=["gemma2-sliding", "gemma2-full", "mistral"])
def test_fallback_computes_what_the_kernels_compute(name, layer, what, kernels, monkeypatch):
    """On every path (dense, decoding and chunked prefill against a longer cache, padding, a static cache's extra
    slots, document ids, packed positions, offsets), for a sliding and a full layer with Gemma 2's softcap (the
    model's eager attention) and a sliding layer without (transformers' sdpa attention), the fallback's output equals
    the kernel path's, rows that see no key (padded queries) included: 0."""
    module = build(name).model.layers[layer].self_attn
    opts = dict(scaling=module.scaling, sliding_window=getattr(module, "sliding_window", None) or WINDOW,
                softcap=getattr(module, "attn_logit_softcapping", None))
    if name == "gemma2" and layer == 1:
        opts["sliding_window"] = None
    q, k, v, mask, kwargs = attention_case(what)
    theirs, weights = tkt.attention_forward(module, q, k, v, mask, strict=True, **opts, **kwargs)
    assert kernels and weights is None
    monkeypatch.setattr(tkt, "_KERNEL_DEVICE_TYPES", ("cuda",))
    (ours, _), messages = fallback_warnings(lambda: tkt.attention_forward(module, q, k, v, mask, **opts, **kwargs))
    assert messages and "reason 'device'" in messages[0]
    assert ours.shape == theirs.shape == (q.shape[0], q.shape[2], 4, 16)
    # the eager attention (Gemma 2's softcap) takes its softmax in float32
    assert_near(ours, theirs, 1e-6 if name == "gemma2" else 1e-12, what)
    if what == "padded":  # row 0's first 5 tokens are padding
        assert (ours[0, :5] == 0).all() and (theirs[0, :5] == 0).all() and (ours[0, 5:] != 0).all()


@pytest.mark.parametrize("how", ["argument", "module"])
def test_is_causal_from_the_argument_or_the_module(how, kernels):
    """is_causal=False (an argument transformers forwards) or a module whose is_causal is False: the kernels run
    without the causal band, and a window is |i - j| <= W on both sides."""
    module = build("mistral").model.layers[0].self_attn
    q, k, v, _, _ = attention_case("dense")
    if how == "module":
        module.is_causal = False
        out, _ = tkt.attention_forward(module, q, k, v, None, sliding_window=2, strict=True)
    else:
        out, _ = tkt.attention_forward(module, q, k, v, None, sliding_window=2, is_causal=False, strict=True)
    assert [(c["causal"], c["window"]) for c in kernels] == [(False, (2, 2))]
    want, _ = reference.attention(q, k, v, False, None, (2, 2))
    assert_near(out, want.transpose(1, 2), 1e-12, how)


def fallback_warnings(fn):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = fn()
    return result, [str(w.message) for w in seen if issubclass(w.category, tkt.FallbackWarning)]


@pytest.mark.parametrize("name", MODELS)
def test_cpu_tensors_run_transformers_attention(name):
    """Without the stand-in, CPU tensors fall back: transformers' sdpa attention (the model's eager attention for
    Gemma 2's softcap) on the mask the kernels would have used, warned once for the reason 'device'; the logits equal
    transformers' own implementation's at every token; strict=True raises DeviceMismatchError."""
    model = build(name, dtype=torch.float32)
    ids, mask = inputs(), padding("left")
    ours, messages = fallback_warnings(lambda: logits(model, "tk_ops", ids, attention_mask=mask))
    assert len(messages) == 1 and "reason 'device'" in messages[0], messages
    _, again = fallback_warnings(lambda: logits(model, "tk_ops", ids, attention_mask=mask))
    assert again == []
    theirs = logits(model, "eager" if name == "gemma2" else "sdpa", ids, attention_mask=mask)
    valid = mask.bool()
    assert_near(ours[valid], theirs[valid], 1e-5, name)
    with pytest.raises(DeviceMismatchError, match="CUDA"):
        logits(model, "tk_ops_strict", ids)


def test_packed_fallback_keeps_the_documents():
    """The fallback for packed rows materialises the documents' mask: CPU logits of a packed row equal each document
    alone."""
    model = build("gemma2")
    batch = DataCollatorWithFlattening()([{"input_ids": d} for d in DOCS])
    ours, messages = fallback_warnings(lambda: logits(model, "tk_ops", batch["input_ids"],
                                                      position_ids=batch["position_ids"]))
    assert messages and "reason 'device'" in messages[0]
    # Gemma 2's eager attention (the softcap's fallback) takes its softmax in float32
    assert_near(ours[0], documents_alone(model, DOCS)[0], 1e-6, "packed fallback")


def test_dropout_while_training_falls_back(kernels):
    """Attention dropout in training mode is transformers' sdpa attention (same random stream: the same result as the
    sdpa model from the same seed), warned once; strict=True raises."""
    model = build("llama", attention_dropout=0.5).train()
    ids = inputs()
    model.set_attn_implementation("tk_ops")
    torch.manual_seed(7)
    ours, messages = fallback_warnings(lambda: model(ids).logits)
    assert len(messages) == 1 and "reason 'dropout'" in messages[0]
    assert kernels == []
    model.set_attn_implementation("sdpa")
    torch.manual_seed(7)
    assert torch.equal(ours, model(ids).logits)
    model.set_attn_implementation("tk_ops_strict")
    with pytest.raises(InputError, match="dropout"):
        model(ids)
    model.eval().set_attn_implementation("tk_ops_strict")
    model(ids)
    assert kernels, "evaluation mode runs the kernels"


@pytest.mark.parametrize("name", ["llama", "gemma2"])
def test_output_attentions_returns_eagers_weights(name, kernels):
    """output_attentions=True runs the model's eager attention on the kernels' mask: the weights come back, equal to
    the eager model's at the tokens (in float32: transformers' eager attention turns padded rows into NaN in float64,
    which then reach every row through the values)."""
    model = build(name, dtype=torch.float32)
    ids, mask = inputs(), padding("right")
    model.set_attn_implementation("tk_ops")
    with torch.no_grad():
        ours, messages = fallback_warnings(lambda: model(ids, attention_mask=mask, output_attentions=True))
    assert any("reason 'output_attentions'" in m for m in messages)
    model.set_attn_implementation("eager")
    with torch.no_grad():
        theirs = model(ids, attention_mask=mask, output_attentions=True)
    valid = mask.bool()
    assert len(ours.attentions) == 2
    for a, b in zip(ours.attentions, theirs.attentions):
        rows = valid[:, None, :, None].expand_as(a)
        assert_near(a[rows], b[rows], 1e-6, "attention weights")
    assert_near(ours.logits[valid], theirs.logits[valid], 1e-6, "logits")


def test_head_dim_not_built_falls_back(kernels, monkeypatch):
    monkeypatch.setattr(tkt, "_built_dims", (64, 128))
    model = build("mistral")
    ids = inputs()
    ours, messages = fallback_warnings(lambda: logits(model, "tk_ops", ids))
    assert len(messages) == 1 and "reason 'head_dim'" in messages[0] and "64, 128" in messages[0]
    assert kernels == []
    assert_near(ours, logits(model, REFERENCE, ids), 1e-12, "head_dim fallback")


def test_gaps_under_a_window_fall_back_with_transformers_semantics(kernels):
    """A padding mask with a gap inside a row: transformers' window counts the gap's positions, which documents
    would drop; that call falls back on the mask itself and equals the reference. Without a window (Llama) the gap
    runs on the kernels (dropping it changes no causal visibility)."""
    ids = inputs()
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[0, 4:6] = 0
    valid = mask.bool()
    mistral = build("mistral")
    ours, messages = fallback_warnings(lambda: logits(mistral, "tk_ops", ids, attention_mask=mask))
    assert len(messages) == 1 and "reason 'attention_mask'" in messages[0] and "gaps" in messages[0]
    assert_near(ours[valid], logits(mistral, REFERENCE, ids, attention_mask=mask)[valid], 1e-12, "window gaps")
    kernels.clear()
    llama = build("llama")
    ours = logits(llama, "tk_ops_strict", ids, attention_mask=mask)
    assert kernels and all(c["op"] == "attention_varlen_fwd" for c in kernels)
    assert_near(ours[valid], logits(llama, REFERENCE, ids, attention_mask=mask)[valid], 1e-12, "gaps")


def test_a_4d_mask_goes_to_tk_ops_sdpa(kernels):
    """A 4-D boolean mask given to the model reaches tk_ops.scaled_dot_product_attention (here on the CPU it falls
    back to torch's SDPA with its own warning) and equals the reference on the same mask; with Gemma 2's softcap it
    falls back to the eager attention."""
    ids = inputs(n=6)
    mask = torch.ones(2, 1, 6, 6, dtype=torch.bool).tril()
    mask[1, 0, :, 0] = False
    mask[1, 0, 0, 0] = True
    for name in ("llama", "gemma2"):
        model = build(name)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            ours = logits(model, "tk_ops", ids, attention_mask=mask)
        kinds = {w.category for w in seen}
        assert (tkt.FallbackWarning if name == "gemma2" else SdpaFallbackWarning) in kinds
        # Gemma 2 falls back to its eager attention, whose softmax is float32
        assert_near(ours, logits(model, REFERENCE, ids, attention_mask=mask), 1e-6 if name == "gemma2" else 1e-12,
                    name)


def test_float32_outside_autocast_falls_back(kernels, monkeypatch):
    """float32 tensors outside autocast are not the kernels' (they compute in 16 bits): reason 'dtype', and
    DTypeError under strict=True."""
    monkeypatch.setattr(tkt, "_KERNEL_DTYPES", (torch.bfloat16, torch.float16))
    model = build("llama", dtype=torch.float32)
    ids = inputs()
    ours, messages = fallback_warnings(lambda: logits(model, "tk_ops", ids))
    assert len(messages) == 1 and "reason 'dtype'" in messages[0] and "autocast" in messages[0]
    assert kernels == []
    assert_near(ours, logits(model, "sdpa", ids), 1e-6, "dtype fallback")
    with pytest.raises(DTypeError, match="bfloat16"):
        logits(model, "tk_ops_strict", ids)


# ---------------------------------------------------------------- swap_linears


def linear_stand_in(monkeypatch):
    """tk_ops.nn.Linear's op replaced by a CPU product (float32, rounded to bf16), counting calls."""
    count = []

    def call(family, op, name, x, weight, bias):
        assert (family, op, name) == ("gemm", "linear", "tk_ops.nn.Linear")
        assert x.dtype == weight.dtype == torch.bfloat16
        count.append(1)
        return cpu_linear(x, weight, bias)

    monkeypatch.setattr(_ext, "call", call)
    return count


def test_swap_linears_shares_parameters(monkeypatch):
    """Every bf16 nn.Linear with sizes that are multiples of 8 becomes a tk_ops.nn.Linear holding the same Parameter
    objects; lm_head (vocab 100, not a multiple of 8) stays, with the reason; tied weights stay tied; the logits are
    the unswapped model's (bf16)."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(CONFIGS["llama"](vocab_size=100), attn_implementation="sdpa",
                                             dtype=torch.bfloat16).eval()
    params = {name: p for name, p in model.named_parameters()}
    keys = list(model.state_dict())
    ids = torch.randint(0, 100, (2, 8))
    with torch.no_grad():
        before = model(ids).logits
    report = tkt.swap_linears(model)
    assert report.swapped == 2 * 7  # q, k, v, o, gate, up, down per layer
    assert report.skipped == {"lm_head": "out_features=100 is not a multiple of 8 (tk_ops.nn.Linear's TMA row rule)"}
    tk_linear = type(model.model.layers[0].mlp.up_proj)
    assert tk_linear.__module__ == "tk_ops.nn.gemm" and tk_linear.__name__ == "Linear"
    assert all(p is params[name] for name, p in model.named_parameters())
    assert list(model.state_dict()) == keys
    count = linear_stand_in(monkeypatch)
    with torch.no_grad():
        after = model(ids).logits
    assert len(count) == 14
    assert_near(after, before, 3e-2, "swapped logits")
    assert tkt.swap_linears(model) == tkt.SwapReport(0, report.skipped), "swapping again changes nothing"


def test_swap_linears_skips_and_reasons():
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(CONFIGS["llama"](tie_word_embeddings=True), dtype=torch.bfloat16)
    report = tkt.swap_linears(model, skip=("mlp.down_proj", "model.layers.1.self_attn.q_proj"))
    assert report.swapped == 2 * 7 + 1 - 3
    assert set(report.skipped) == {"model.layers.0.mlp.down_proj", "model.layers.1.mlp.down_proj",
                                   "model.layers.1.self_attn.q_proj"}
    assert set(report.skipped.values()) == {"listed in skip"}
    assert model.lm_head.weight is model.model.embed_tokens.weight, "tied weights stay tied"
    # float32 master weights: nothing to swap, each layer says why
    fp32 = AutoModelForCausalLM.from_config(CONFIGS["llama"](), dtype=torch.float32)
    report = tkt.swap_linears(fp32)
    assert report.swapped == 0 and len(report.skipped) == 2 * 7 + 1
    assert all("torch.float32" in r and "bfloat16" in r for r in report.skipped.values())
    # subclasses and modules with forward hooks keep their behaviour
    odd = torch.nn.Sequential(torch.nn.Linear(8, 8, dtype=torch.bfloat16), torch.nn.Linear(8, 8, dtype=torch.bfloat16),
                              type("MyLinear", (torch.nn.Linear,), {})(8, 8, dtype=torch.bfloat16))
    odd[1].register_forward_hook(lambda *a: None)
    report = tkt.swap_linears(odd)
    assert report.swapped == 1 and set(report.skipped) == {"1", "2"}
    assert "hooks" in report.skipped["1"] and "subclass" in report.skipped["2"]
    shared = torch.nn.Linear(16, 16, dtype=torch.bfloat16)
    twice = torch.nn.ModuleDict({"a": shared, "b": shared})
    assert tkt.swap_linears(twice).swapped == 1 and twice["a"] is twice["b"], "one module shared stays one"


# ---------------------------------------------------------------- the example


@pytest.fixture(scope="module")
def example():
    yield from load_example("train_hf_llama")


def test_example_arguments(example):
    quick = example.parse_args(["--quick"])
    assert (quick.steps, quick.layers, quick.seq, quick.batch) == (40, 2, 256, 4)
    smoke = example.parse_args(["--cpu-smoke"])
    assert smoke.device == "cpu" and smoke.steps <= 6 and smoke.hidden <= 64


@pytest.mark.parametrize("extra", [[], ["--packed"], ["--generate"]], ids=["dense", "packed", "generate"])
def test_example_cpu_smoke(example, extra, capsys):
    """The example's CPU mode trains both models a few steps (the tk_ops attention falling back to transformers' on
    CPU tensors, which it says) and judges the curves, and the packed and generate variants run."""
    assert example.main(["--cpu-smoke", *extra]) == 0
    out = capsys.readouterr().out
    assert "falls back" in out and "OK" in out
    assert "swap_linears: 0 of" in out and "float32" in out
    if extra == ["--generate"]:
        assert "greedy tokens" in out


def test_example_needs_a_gpu_without_cpu_smoke(example, capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: main would train")
    assert example.main(["--quick"]) == 2
    assert "CUDA" in capsys.readouterr().err
