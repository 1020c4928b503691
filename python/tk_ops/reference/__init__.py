"""Plain-PyTorch references in high precision, one module per kernel family, used by the tests and the
benchmarks' checks: ``tk_ops.reference.matmul(a, b)``, ``tk_ops.reference.attention(q, k, v, causal=True)``, ...
They are written from the ops' documented semantics, independently of the kernels."""
from .attention import attention, attention_backward
from .gemm import linear, matmul, scaled_mm

__all__ = ["attention", "attention_backward", "linear", "matmul", "scaled_mm"]
