"""tk_ops.integrations.transformers on the GPU, with the real kernels: the attention registered with strict=True, so
every call checked here ran on tk_ops.attention / flash_attn_varlen_func (a fallback would raise).

- Each path of the attention function (dense, decoding and chunked prefill against a longer cache, left padding,
  padded decoding, a static cache's extra slots, document ids, packed position_ids, flash-attention offsets; GQA
  groups of 4 and 2, head dimensions 64 and 128, a sliding window and a softcap) against its float64 result (the
  same function on float64 copies, which falls back to transformers' attention on the materialised mask;
  tests/cpu/test_transformers_integration.py checks that the two compute the same thing), as a whole and row by
  row.
- Tiny Llama, Mistral (sliding window) and Gemma 2 (sliding window, softcap) models in bf16: logits, unpadded, left
  and right padded, packed three ways, against a float64 copy of the model on a textbook reference attention; ours
  must come within twice transformers' own bf16 implementation's error (sdpa; eager for Gemma 2's softcap) plus a
  floor. Likewise the gradients of a padded and of a packed training step, float32 master weights under bf16
  autocast, and swap_linears.
- Greedy generate() of 32 tokens on left-padded prompts (dynamic and static caches; Mistral's sliding cache): every
  token we choose must be the float32 reference's greedy choice given the same prefix, or within a measured near-tie
  of it (see test_generate_32_greedy_tokens).

Needs transformers (importorskip: its cases skip with the reason where it is not installed)."""
from __future__ import annotations

import copy
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the transformers integration needs transformers")

from tk_ops.integrations import transformers as tkt
from transformers import (AutoModelForCausalLM, DataCollatorWithFlattening, Gemma2Config, LlamaConfig,
                          MistralConfig, masking_utils)

from ...hf_reference import reference_attention, reference_mask
from ..util import ROW_SLACK, assert_close, rel_err, worst_row

BF16, F64 = torch.bfloat16, torch.float64
STRICT = "tk_ops_gpu_strict"
REFERENCE = "tk_ops_gpu_reference"
# The attention's own bound (as tk_ops.scaled_dot_product_attention's forward tests): O rounded to bf16 twice (P
# before P V, O on the way out), ~2e-3 relative; 1e-2 as a whole and 4x that per row (assert_close).
ATTN_TOL = 1e-2
# Model-level bounds: twice the error of transformers' own bf16 implementation (same weights, same bf16 linears and
# norms, only the attention differs) plus a floor, relative to the float64 reference. The peer's error is ~2e-2 on
# the logits (bf16 rounding through two layers, amplified by the sharpened scores below), ~5e-2 on the gradients: these
# checks catch gross errors of the wiring (attention across documents or into padding, a lost window or cap, NaN);
# test_paths_match_float64 and the CPU tests hold the semantics tightly.
FLOOR = 3e-3


def bound_check(ours: torch.Tensor, peer: torch.Tensor, ref: torch.Tensor, what: str, floor: float = FLOOR):
    """ours within 2 x the peer's error + floor of ref, as a whole and in its worst row."""
    err_peer, err_ours = rel_err(peer, ref), rel_err(ours, ref)
    bound = 2 * err_peer + floor
    assert err_ours <= bound, f"{what}: error {err_ours:.3e} > 2 x peer {err_peer:.3e} + {floor:.0e}"
    _, peer_row = worst_row(peer, ref)
    row, row_err = worst_row(ours, ref)
    row_bound = max(ROW_SLACK * bound, 2 * peer_row + floor)
    assert row_err <= row_bound, (f"{what}: row {row} error {row_err:.3e} > {row_bound:.3e} (peer's worst row "
                                  f"{peer_row:.3e})")


# ---------------------------------------------------------------- the reference attention and the models


@pytest.fixture(scope="module", autouse=True)
def registered():
    tkt.register(STRICT, strict=True)
    transformers.AttentionInterface.register(REFERENCE, reference_attention)
    masking_utils.AttentionMaskInterface.register(REFERENCE, reference_mask)
    yield
    for name in (STRICT, REFERENCE):
        transformers.AttentionInterface._global_mapping.pop(name, None)
        masking_utils.AttentionMaskInterface._global_mapping.pop(name, None)


VOCAB = 512
WINDOW = 64
COMMON = dict(vocab_size=VOCAB, hidden_size=512, intermediate_size=1024, num_hidden_layers=2,
              num_key_value_heads=2, pad_token_id=0, bos_token_id=None, eos_token_id=None)
CONFIGS = {
    "llama": lambda **kw: LlamaConfig(**{**COMMON, "num_attention_heads": 8, "head_dim": 64, **kw}),
    "mistral": lambda **kw: MistralConfig(**{**COMMON, "num_attention_heads": 4, "head_dim": 128,
                                             "sliding_window": WINDOW, **kw}),
    "gemma2": lambda **kw: Gemma2Config(**{**COMMON, "num_attention_heads": 4, "head_dim": 128,
                                           "sliding_window": WINDOW, "attn_logit_softcapping": 5.0,
                                           "query_pre_attn_scalar": 128, **kw}),
}
# The projections' initialisation (std 0.02) gives scores of std ~0.2: attention nearly uniform and a softcap that
# never binds. Scaling q_proj and k_proj by 4.5 gives scores of std ~4, so that masks and the cap of 5 matter.
SHARPEN = 4.5


def build(name: str, dtype=BF16, seed: int = 0, sharpen: float = SHARPEN, **config):
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(CONFIGS[name](**config), attn_implementation=STRICT, dtype=dtype)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(sharpen)
            layer.self_attn.k_proj.weight.mul_(sharpen)
    return model.cuda().eval()


def peer_of(name: str) -> str:
    """transformers' own implementation for the model (SDPA refuses Gemma 2's softcap)."""
    return "eager" if name == "gemma2" else "sdpa"


def run(model, implementation: str, **kwargs) -> torch.Tensor:
    model.set_attn_implementation(implementation)
    with torch.no_grad():
        return model(**kwargs).logits.double()


def float64_twin(model):
    twin = copy.deepcopy(model).double()
    twin.set_attn_implementation(REFERENCE)
    return twin


# ---------------------------------------------------------------- the attention function's paths


PATHS = ["dense", "decode", "chunk", "padded", "padded-decode", "static", "documents", "positions", "cu_seq_lens",
         "cu_seq_lens-decode"]


def path_case(what: str, hq: int, hk: int, d: int, scale: float):
    """(q, k, v, mask, kwargs) in float64 on the GPU: ragged lengths (none a multiple of the kernels' tiles)."""
    b, nq, nk = {"decode": (2, 1, 300), "chunk": (2, 37, 300), "padded-decode": (2, 1, 300), "static": (2, 5, 400),
                 "positions": (1, 300, 300), "cu_seq_lens": (1, 300, 300),
                 "cu_seq_lens-decode": (1, 3, 300)}.get(what, (2, 300, 300))
    # bf16 values held in float64: the reference sees exactly the kernels' inputs
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=F64) for h, n in ((hq, nq), (hk, nk), (hk, nk)))
    q, k, v = ((t * s).to(BF16).double() for t, s in ((q, scale), (k, scale), (v, 1.0)))
    pad = torch.ones(2, 300, dtype=torch.bool, device="cuda")
    pad[0, :111] = False
    cu = torch.tensor([0, 77, 77, 200, 300], dtype=torch.int32, device="cuda")
    mask, kwargs = None, {}
    if what.startswith("padded"):
        mask = pad
    elif what == "static":
        mask = pad  # 300 of the 400 slots hold keys; the 5 queries are the last 5 of them
    elif what == "documents":
        mask = torch.cat([torch.zeros(2, 120), torch.ones(2, 130), 2 * torch.ones(2, 50)], 1).long().cuda()
        mask[1, :60] = 5
        tkt._DOC_IDS[id(mask)] = mask
    elif what == "positions":
        kwargs["position_ids"] = torch.cat([torch.arange(77), torch.arange(123), torch.arange(100)])[None].cuda()
    elif what == "cu_seq_lens":
        kwargs.update(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=123, max_length_k=123)
    elif what == "cu_seq_lens-decode":
        kwargs.update(cu_seq_lens_q=torch.tensor([0, 1, 2, 3], dtype=torch.int32, device="cuda"),
                      cu_seq_lens_k=torch.tensor([0, 90, 91, 300], dtype=torch.int32, device="cuda"),
                      max_length_q=1, max_length_k=209)
    return q, k, v, mask, kwargs


@pytest.mark.parametrize("what", PATHS)
@pytest.mark.parametrize("name, layer", [("llama", 0), ("mistral", 0), ("gemma2", 0), ("gemma2", 1)],
                         ids=["llama-gqa4-d64", "mistral-window-d128", "gemma2-window-cap-d128", "gemma2-cap-d128"])
def test_paths_match_float64(name, layer, what):
    """Every path of the attention function on the kernels (bf16) against its float64 result; padded query rows
    exactly 0."""
    module = build(name, dtype=torch.float32).model.layers[layer].self_attn
    hq, hk, d = module.config.num_attention_heads, module.config.num_key_value_heads, module.head_dim
    window = None if name == "llama" or (name == "gemma2" and layer == 1) else WINDOW
    softcap = getattr(module, "attn_logit_softcapping", None)
    # scores of std ~4 under Gemma 2's cap of 5, which binds; the others sharp enough for masks to matter
    q, k, v, mask, kwargs = path_case(what, hq, hk, d, 2.0 if softcap else 1.5)
    opts = dict(scaling=module.scaling, sliding_window=window, softcap=softcap, **kwargs)
    ours, weights = tkt.attention_forward(module, q.to(BF16), k.to(BF16), v.to(BF16), mask, strict=True, **opts)
    assert weights is None and ours.dtype == BF16 and ours.shape == (q.shape[0], q.shape[2], hq, d)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tkt.FallbackWarning)
        ref, _ = tkt.attention_forward(module, q, k, v, mask, **opts)  # float64: transformers' attention
    assert_close(ours, ref, ATTN_TOL, f"{name} layer {layer} {what}")
    if what == "padded":
        assert (ours[0, :111] == 0).all() and (ref[0, :111] == 0).all()


def test_autocast_casts_like_sdpa():
    """Under bf16 autocast a float32 model's attention gets float32 queries and keys (rotary embeddings in float32)
    and bf16 values: the kernels take them cast to bf16, as SDPA does, and return bf16."""
    module = build("llama", dtype=torch.float32).model.layers[0].self_attn
    q, k, v, _, _ = path_case("dense", 8, 2, 64, 1.5)
    with torch.autocast("cuda", dtype=BF16):
        ours, _ = tkt.attention_forward(module, q.float(), k.float(), v.to(BF16), None, scaling=module.scaling,
                                        strict=True)
    ref, _ = tkt.attention_forward(module, q, k, v, None, scaling=module.scaling)
    assert ours.dtype == BF16
    assert_close(ours, ref, ATTN_TOL, "autocast")


# ---------------------------------------------------------------- models


DOCS = [100, 37, 250, 1, 120]


def model_inputs(case: str, seed: int = 1):
    """(our keyword arguments, the reference's and the peer's, the positions compared)."""
    gen = torch.Generator().manual_seed(seed)
    if case.startswith("packed"):
        docs = [torch.randint(1, VOCAB, (n,), generator=gen).tolist() for n in DOCS]
        batch = DataCollatorWithFlattening(return_flash_attn_kwargs=True)([{"input_ids": d} for d in docs])
        ids, pos = batch["input_ids"].cuda(), batch["position_ids"].cuda()
        theirs = dict(input_ids=ids, position_ids=pos, use_cache=False)  # transformers' masks find the documents
        ours = {"packed-positions": dict(input_ids=ids, position_ids=pos),
                "packed-documents": theirs,
                "packed-cu_seq_lens": dict(input_ids=ids, position_ids=pos, **{
                    k: (batch[k].cuda() if torch.is_tensor(batch[k]) else batch[k])
                    for k in ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")})}[case]
        return ours, theirs, torch.ones(1, sum(DOCS), dtype=torch.bool, device="cuda")
    ids = torch.randint(1, VOCAB, (2, 300), generator=gen).cuda()
    mask = torch.ones(2, 300, dtype=torch.long, device="cuda")
    if case == "left":
        mask[0, :111] = 0
    elif case == "right":
        mask[1, 173:] = 0
    kwargs = dict(input_ids=ids) if case == "dense" else dict(input_ids=ids, attention_mask=mask)
    return kwargs, kwargs, mask.bool()


@pytest.mark.parametrize("case", ["dense", "left", "right", "packed-positions", "packed-documents",
                                  "packed-cu_seq_lens"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_model_logits(name, case):
    """The model's logits at every token, against the float64 reference, within twice transformers' own bf16
    implementation's error."""
    model = build(name)
    ours_in, theirs_in, valid = model_inputs(case)
    ours = run(model, STRICT, **ours_in)
    peer = run(model, peer_of(name), **theirs_in)
    twin = float64_twin(model)
    with torch.no_grad():
        ref = twin(**theirs_in).logits
    bound_check(ours[valid], peer[valid], ref[valid], f"{name} {case}")
    if name == "gemma2" and case == "dense":  # the softcap binds: without it the logits move far beyond the bound
        for layer in twin.model.layers:
            layer.self_attn.attn_logit_softcapping = None
        with torch.no_grad():
            uncapped = twin(**theirs_in).logits
        assert rel_err(uncapped[valid], ref[valid]) > 10 * rel_err(ours[valid], ref[valid])


def loss_of(model, implementation: str, case: str):
    model.set_attn_implementation(implementation)
    ours_in, theirs_in, valid = model_inputs(case, seed=2)
    kwargs = ours_in if implementation == STRICT else theirs_in
    logits = model(**kwargs).logits.float()
    target = torch.randint(0, VOCAB, logits.shape[:2], generator=torch.Generator().manual_seed(3)).cuda()
    losses = torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none")
    return (losses * valid).sum() / valid.sum()


def attention_grads(model) -> torch.Tensor:
    return torch.cat([p.grad.double().flatten() for n, p in model.named_parameters() if "self_attn" in n])


@pytest.mark.parametrize("case", ["left", "packed-positions"])
def test_training_step_gradients(case):
    """A training step's gradients through the varlen path (gathered tokens, scattered outputs, the backward
    kernels): the attention projections' gradients against the float64 reference's, within twice sdpa's bf16 error."""
    grads = {}
    for impl in (STRICT, "sdpa", REFERENCE):
        model = build("mistral")
        model = float64_twin(model) if impl == REFERENCE else model
        model.train()
        loss_of(model, impl, case).backward()
        grads[impl] = attention_grads(model)
    bound_check(grads[STRICT], grads["sdpa"], grads[REFERENCE], f"gradients {case}", floor=5e-3)


def test_float32_master_weights_under_autocast():
    """A float32 model under bf16 autocast (float32 master weights) runs the attention on the kernels (strict: no
    fallback), its logits as sdpa's under the same autocast; swap_linears swaps nothing there and says why."""
    model = build("llama", dtype=torch.float32)
    report = tkt.swap_linears(model)
    assert report.swapped == 0 and all("float32" in r for r in report.skipped.values())
    ours_in, _, valid = model_inputs("left")
    twin = float64_twin(model)
    with torch.no_grad():
        ref = twin(**ours_in).logits
    with torch.autocast("cuda", dtype=BF16):
        ours = run(model, STRICT, **ours_in)
        peer = run(model, "sdpa", **ours_in)
    bound_check(ours[valid], peer[valid], ref[valid], "autocast")


def test_swap_linears_on_bf16_model():
    """swap_linears on a bf16 model: every projection on tk_ops.nn.Linear (the same Parameter objects), logits within
    twice the unswapped model's error, and a backward through both the GEMM and the attention kernels."""
    model = build("llama")
    ours_in, _, valid = model_inputs("left")
    unswapped = run(model, STRICT, **ours_in)
    ref = float64_twin(model)(**ours_in).logits.detach()
    weight = model.model.layers[0].mlp.up_proj.weight
    report = tkt.swap_linears(model, skip=("lm_head",))
    assert report.swapped == 2 * 7 and report.skipped == {"lm_head": "listed in skip"}
    assert model.model.layers[0].mlp.up_proj.weight is weight
    swapped = run(model, STRICT, **ours_in)
    bound_check(swapped[valid], unswapped[valid], ref[valid], "swapped")
    model.train()
    loss_of(model, STRICT, "left").backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters() if p.requires_grad)


# ---------------------------------------------------------------- generation


# A greedy step decides nothing where the reference's best two logits are closer than bf16 rounding can move them.
# That noise is measured, not assumed: transformers' own sdpa attention on the same bf16 weights, teacher-forced on the
# same tokens, differs from the float32 reference by E (the largest difference over the row's logits). A token we
# chose is accepted if the reference scores it within 2 E of its best; a step is decisive if the reference's own top
# two are more than 2 E apart, and those must be the reference's choice. Scores of std ~2 (q and k scaled by 2): at
# the other tests' 4.5 the bf16 noise reaches ~7% of the logits' spread and a third of the steps become near-ties.
NEW_TOKENS = 32
GENERATE_SHARPEN = 2.0


@pytest.mark.parametrize("name, cache", [("llama", "dynamic"), ("llama", "static"), ("mistral", "dynamic")])
def test_generate_32_greedy_tokens(name, cache):
    """generate() on three left-padded prompts (prefill on the varlen path, then 31 decoding steps of one query
    against the KV cache, aligned bottom-right; Mistral's cache keeps its last W - 1 keys, the prompts and the output
    reaching past W = 64): the float32 reference, teacher-forced on our sequences, scores every token we chose within
    the measured bf16 noise of its best (see above); at least 60% of the steps are decisive (so the check is not
    vacuous), and the first steps' logits are within twice sdpa's bf16 error of the reference's."""
    model = build(name, sharpen=GENERATE_SHARPEN)
    lengths = [20, 47, 70]
    p = max(lengths)
    gen = torch.Generator().manual_seed(4)
    ids = torch.zeros(len(lengths), p, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, p - n:], mask[i, p - n:] = torch.randint(1, VOCAB, (n,), generator=gen), 1
    ids, mask = ids.cuda(), mask.cuda()
    opts = dict(attention_mask=mask, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    if cache == "static":
        # generate() would compile the decoding step for a static cache; the padding path reads its mask on the host
        # and breaks that graph, so the static cache is checked eagerly here
        opts.update(cache_implementation="static", disable_compile=True)
    model.set_attn_implementation(STRICT)
    out = model.generate(ids, **opts)
    seq = out.sequences
    assert seq.shape == (3, p + NEW_TOKENS)
    full_mask = torch.cat([mask, torch.ones(3, NEW_TOKENS, dtype=torch.long, device="cuda")], 1)
    reference = copy.deepcopy(model).float()
    reference.set_attn_implementation("sdpa")
    with torch.no_grad():
        rows = reference(seq, attention_mask=full_mask).logits[:, p - 1:-1].double()  # the rows that chose each token
    peer = run(model, "sdpa", input_ids=seq, attention_mask=full_mask)[:, p - 1:-1]
    allowed = 2 * (peer - rows).abs().amax(-1)
    chosen = seq[:, p:]
    gap = rows.amax(-1) - rows.gather(-1, chosen[..., None])[..., 0]
    top2 = rows.topk(2, dim=-1).values
    decisive = (top2[..., 0] - top2[..., 1]) > allowed
    assert decisive.float().mean() >= 0.6, f"only {decisive.float().mean():.0%} decisive steps: margins too small"
    worst = int((gap - allowed).argmax())
    assert (gap <= allowed).all(), (f"prompt {worst // NEW_TOKENS}, new token {worst % NEW_TOKENS}: we chose a token "
                                    f"the reference scores {gap.flatten()[worst]:.4f} below its best (bf16 noise bound "
                                    f"{allowed.flatten()[worst]:.4f})")
    # the first steps' logits: prefill (step 0) and decoding steps against the cache
    ours = torch.stack([s.double() for s in out.logits[:4]], 1)
    bound_check(ours, peer[:, :4], rows[:, :4], f"{name} {cache} first steps")
