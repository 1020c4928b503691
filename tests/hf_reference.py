"""The reference side of the transformers integration's tests (CPU and GPU): an attention function for transformers'
AttentionInterface that computes in float64 on transformers' own materialised mask, and that mask. Imported only
after the tests have checked that transformers is installed."""
import torch
from transformers import masking_utils


def reference_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, softcap=None,
                        **kwargs):
    """softmax(scale q k^T, capped, masked) v in float64 on transformers' materialised mask; rows that see no key give
    0."""
    group = query.shape[1] // key.shape[1]
    k = key.double().repeat_interleave(group, dim=1)
    v = value.double().repeat_interleave(group, dim=1)
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    s = query.double() @ k.transpose(-1, -2) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if attention_mask is not None:
        s = (s.masked_fill(~attention_mask, float("-inf")) if attention_mask.dtype == torch.bool
             else s + attention_mask)
    p = torch.softmax(s, dim=-1).nan_to_num(nan=0.0)
    return (p @ v).to(query.dtype).transpose(1, 2), None


def reference_mask(**kwargs):
    """transformers' sdpa mask, always materialised (no skipping of the causal or bidirectional cases)."""
    kwargs.update(allow_is_causal_skip=False, allow_is_bidirectional_skip=False)
    return masking_utils.sdpa_mask(**kwargs)
