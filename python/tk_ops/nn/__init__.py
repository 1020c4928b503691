"""Drop-in ``torch.nn`` modules whose compute runs on tk_ops kernels, one file per kernel family."""
from .attention import Attention
from .based import BasedLinearAttention
from .fftconv import LongConv
from .gemm import Linear
from .mamba2 import Mamba2

__all__ = ["Linear", "Attention", "BasedLinearAttention", "Mamba2", "LongConv"]
