"""Drop-in ``torch.nn`` modules whose compute runs on tk_ops kernels, one file per kernel family.

- ``Linear``: ``torch.nn.Linear`` on the bf16 GEMM (same parameters and state_dict).
- ``Attention``: multi-head self-attention (fused qkv projection, flash attention, output projection); GQA,
  causal, sliding windows, softcap, packed documents.
- ``BasedLinearAttention``: the Based linear-attention mixer, with a recurrent state for chunked prefill and
  ``step()`` decoding.
- ``Mamba2``: mamba_ssm's Mamba-2 mixer (its checkpoints load), with a cache for prefill and ``step()`` decoding.
- ``LongConv``: a causal long convolution with one learned filter per channel (Hyena / H3 sequence mixers).

Every module trains (forward and backward on the kernels) and creates its projections in bfloat16 unless told
otherwise; ``help()`` on each gives its formula, shapes, errors and an example.

Example::

    block = torch.nn.Sequential(tk_ops.nn.Linear(1024, 4096), torch.nn.GELU(), tk_ops.nn.Linear(4096, 1024)).cuda()
    y = block(torch.randn(8, 512, 1024, device="cuda", dtype=torch.bfloat16))   # (8, 512, 1024)
"""
from .attention import Attention
from .based import BasedLinearAttention
from .fftconv import LongConv
from .gemm import Linear
from .mamba2 import Mamba2

__all__ = ["Linear", "Attention", "BasedLinearAttention", "Mamba2", "LongConv"]
