"""tk_ops: fast Hopper (H100/H200) kernels written with a tile library, callable from PyTorch.

Every op is a torch custom op with a backward where one makes sense, traces under ``torch.compile(fullgraph=True)``
and captures into CUDA graphs; ``help()`` on any name below gives its formula, shapes, dtypes, gradients, errors
and an example.

Ops (tensors on an sm_90 GPU; shapes as the functions document them):

- ``matmul(a, b)``: bf16 GEMM ``a @ b``, fp32 accumulation, with a backward.
- ``scaled_mm(a, b, scale_a, scale_b, out_dtype)``: fp8 e4m3 GEMM with per-tensor or row-wise scales, like
  ``torch._scaled_mm``.
- ``attention(q, k, v, causal, scale, window, softcap)``: flash attention on (B, H, N, D) tensors with a
  backward; GQA / MQA, bottom-right causal, sliding windows, softcap. ``attention_with_lse`` also returns the row
  log-sum-exp; ``attention_varlen`` / ``attention_varlen_with_lse`` take packed documents.
- ``scaled_dot_product_attention``: ``torch.nn.functional.scaled_dot_product_attention``'s signature and result,
  on the kernels where they apply. ``flash_attn``: FlashAttention 2's four functions, by changing an import.
- ``based(q, k, v, ...)`` / ``based_step``: Based linear attention, (B, H, N, 16 / Dv), with a recurrent state.
- ``mamba2_chunk_scan(x, dt, A, B, C, ...)`` / ``mamba2_step``: Mamba-2's scan, mamba_ssm's signature, and its
  decoding step.
- ``fftconv(u, k, pregate, postgate)`` / ``fftconv_spectrum``: causal long convolution by FFT, u (B, H, N),
  k (H, Nk).

Modules: ``nn`` (``Linear``, ``Attention``, ``BasedLinearAttention``, ``Mamba2``, ``LongConv``: drop-in
``torch.nn`` modules on these kernels), ``reference`` (float64 PyTorch references of every op), ``errors`` (the
exceptions, all deriving from ``TkOpsError``).

Importing never needs the compiled extension: ops load it on first use and raise a clear error when it is missing
(``errors.ExtensionNotBuiltError``), lacks the op's kernel family (``errors.FamilyNotBuiltError``) or the GPU is not
sm_90 (``errors.UnsupportedDeviceError``); bad arguments raise ``errors.InputError``, ``errors.DTypeError`` or
``errors.DeviceMismatchError``, which are also ``ValueError`` / ``TypeError``. Design notes
are in docs/<family>.md.

Example::

    import tk_ops
    c = tk_ops.matmul(a, b)                         # bf16 GEMM
    o = tk_ops.attention(q, k, v, causal=True)      # flash attention, (B, H, N, D), with a backward
    y = tk_ops.scaled_mm(a8, b8_t.t(), sa, sb)      # fp8 e4m3 GEMM, like torch._scaled_mm
    layer = tk_ops.nn.Linear(4096, 4096)            # drop-in for torch.nn.Linear
    attn = tk_ops.nn.Attention(2048, 16, causal=True)  # fused qkv projection, attention, output projection
    o, state = tk_ops.based(q, k, v, output_final_state=True)  # Based linear attention, (B, H, N, 16 / Dv)
    o_t = tk_ops.based_step(q_t, k_t, v_t, state)   # one decoding step, the state updated in place
    mixer = tk_ops.nn.BasedLinearAttention(1024, 16)  # projections and Based linear attention, with step()
    y = tk_ops.mamba2_chunk_scan(x, dt, A, B, C, D=D, dt_softplus=True)  # Mamba-2 scan, (b, l, h, p)
    y = tk_ops.fftconv(u, k, pregate, postgate)     # causal long convolution by FFT, with a backward
    y_t = tk_ops.mamba2_step(state, x_t, dt_t, A, B_t, C_t, D=D, dt_softplus=True)  # one decoding step, in place
    ref = tk_ops.reference.attention(q.double(), k.double(), v.double(), causal=True)  # float64 reference
"""
__version__ = "0.1.0"

from . import errors
from .errors import TkOpsError
from .gemm import matmul, scaled_mm
from .attention import attention, attention_varlen, attention_varlen_with_lse, attention_with_lse
from .sdpa import scaled_dot_product_attention
from .based import based, based_step
from .mamba2 import mamba2_chunk_scan, mamba2_step
from .fftconv import fftconv, fftconv_spectrum
from . import flash_attn, nn, reference

__all__ = ["matmul", "scaled_mm", "attention", "attention_with_lse", "attention_varlen", "attention_varlen_with_lse",
           "based", "based_step", "mamba2_chunk_scan", "mamba2_step", "fftconv", "fftconv_spectrum", "nn", "reference",
           "errors", "TkOpsError", "__version__", "scaled_dot_product_attention", "flash_attn"]
