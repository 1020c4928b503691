"""Plain-PyTorch references in high precision, one module per kernel family, used by the tests and the
benchmarks' checks: ``tk_ops.reference.matmul(a, b)``, ``tk_ops.reference.attention(q, k, v, causal=True)``, ...
They are written from the ops' documented semantics, independently of the kernels, and define what the kernels are
tested against: the forward passes, and the backward passes through the references' own gradients in float64 (by
autograd; attention's also written out)."""
from .attention import attention, attention_backward, attention_varlen, attention_visible
from .based import based, based_step
from .fftconv import fftconv, fftconv_spectrum, monarch_fft
from .gemm import linear, matmul, scaled_mm
from .mamba2 import mamba2_chunk_scan, mamba2_dt, mamba2_step

__all__ = ["attention", "attention_backward", "attention_varlen", "attention_visible", "based", "based_step", "fftconv",
           "fftconv_spectrum", "linear", "mamba2_chunk_scan", "mamba2_dt", "mamba2_step", "matmul", "monarch_fft",
           "scaled_mm"]
