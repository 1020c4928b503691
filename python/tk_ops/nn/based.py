"""``tk_ops.nn.BasedLinearAttention``: projections and Based linear attention, with decoding steps."""
from __future__ import annotations

import torch

from .. import _ext
from ..based import based, based_step, value_dims
from ..errors import InputError
from .gemm import Linear


class BasedLinearAttention(torch.nn.Module):
    """The Based linear-attention mixer: ``x (B, N, d_model) -> (B, N, d_model)``, causal, with a recurrent state for
    chunked prefill and decoding.

    One fused projection ``qkv`` (a :class:`Linear`, d_model -> 2 * H * feature_dim + d_model) makes the queries and
    keys (feature_dim = 16 per head, the Taylor feature map's input) and the values (Dv = d_model / H per head),
    :func:`tk_ops.based` mixes them and ``proj`` (a :class:`Linear`, d_model -> d_model) projects back; all three run
    on tk_ops kernels, forward and backward. Dv must be a multiple of 16 up to 128 (``value_dims()`` of the module
    ``tk_ops.based`` lists the build's; checking it loads the extension). The rows of ``qkv.weight`` are the H query
    heads, the H key heads (feature_dim rows each), then the H value heads (Dv rows each); an equivalent PyTorch
    module computes::

        q, k, v = qkv(x).split([H * 16, H * 16, d_model], dim=-1)     # each viewed (B, N, H, 16 or Dv)
        s = q_i . k_j / sqrt(16) per head;  w = 1 + s + s^2 / 2 for j <= i, 0 after
        o_i = sum_j w_ij v_j / (sum_j w_ij + eps)                       # without the division if not normalize
        y = proj(o)                                                     # heads concatenated

    which is the Based model's linear attention (hazyresearch/based, its Taylor feature map gives the same w). Its
    checkpoints load directly: ``load_state_dict`` also accepts its parameter names (``proj_q``, ``proj_k``,
    ``proj_v``, ``out_proj`` or ``proj_o``, with as many key/value heads as query heads) and fuses them.

    Args:
        d_model: the model width, a multiple of num_heads.
        num_heads: H; the value dimension Dv = d_model / H must be a multiple of 16 up to 128.
        feature_dim: the queries' and keys' width per head; must be 16 (the kernels' Taylor feature map).
        normalize: divide by the running denominator (True), or use the numerator alone.
        eps: added to the denominator, finite and >= 0.
        bias: give both projections a bias.
        device: where the parameters are created (None: torch's default device).
        dtype: the parameters' dtype (None: bfloat16; the projections compute in bfloat16).

    ``forward(x)`` returns y (B, N, d_model) for x (B, N, d_model), or ``(y, state)`` with
    ``output_final_state=True`` (chunked prefill); ``step(x_t, state)`` decodes one token per sequence, x_t
    (B, d_model) or (B, 1, d_model), updating ``state`` in place. The state is :func:`tk_ops.based`'s:
    ``(kv (B, H, Dv, 273), k_sum (B, H, 273))``, float32 (:meth:`init_state` makes an empty one).

    Autograd:
        Every parameter and x train through ``forward`` (the tk_ops GEMM and Based backward kernels, gradients
        reaching an incoming state too); ``step`` has no gradient.

    Raises:
        InputError: at construction, a size is not a positive int, feature_dim is not 16, d_model is not a multiple of
            num_heads, Dv is not a value dimension the build takes (checked where the extension is installed, else at
            the first forward), normalize is not a bool, or eps is out of range.

    Example::

        mixer = tk_ops.nn.BasedLinearAttention(1024, 16, device="cuda")   # Dv = 64
        x = torch.randn(4, 2048, 1024, device="cuda", dtype=torch.bfloat16)
        y, state = mixer(x, output_final_state=True)                     # (4, 2048, 1024), prompt's state
        with torch.no_grad():
            y_t = mixer.step(torch.randn(4, 1024, device="cuda", dtype=torch.bfloat16), state)   # (4, 1024)
    """

    def __init__(self, d_model: int, num_heads: int, feature_dim: int = 16, normalize: bool = True, eps: float = 1e-6,
                 bias: bool = False, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        name = "tk_ops.nn.BasedLinearAttention"
        for arg, value in (("d_model", d_model), ("num_heads", num_heads), ("feature_dim", feature_dim)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InputError(f"{name}: {arg} must be a positive int, got {value!r}")
        if feature_dim != 16:
            raise InputError(f"{name}: feature_dim must be 16 (the kernels build the Taylor feature map's 273 "
                             f"features for 16), got {feature_dim}")
        if d_model % num_heads:
            raise InputError(f"{name}: d_model={d_model} must be a multiple of num_heads={num_heads}")
        value_dim = d_model // num_heads
        supported = _ext.if_built(value_dims)  # the value dimensions this build's kernels take
        if supported is not None and value_dim not in supported:
            raise InputError(f"{name}: the value dimension d_model / num_heads = {value_dim} must be a multiple of 16 "
                             f"from {min(supported)} to {max(supported)}; choose num_heads so that it is")
        if not isinstance(normalize, bool):
            raise InputError(f"{name}: normalize must be a bool, got {type(normalize).__name__}")
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 <= eps < float("inf"):
            raise InputError(f"{name}: eps must be a finite number >= 0, got {eps!r}")
        dtype = torch.bfloat16 if dtype is None else dtype
        self.d_model, self.num_heads, self.feature_dim, self.value_dim = d_model, num_heads, feature_dim, value_dim
        self.normalize, self.eps = normalize, float(eps)
        self.qkv = Linear(d_model, 2 * num_heads * feature_dim + d_model, bias=bias, device=device, dtype=dtype)
        self.proj = Linear(d_model, d_model, bias=bias, device=device, dtype=dtype)
        self.register_load_state_dict_pre_hook(_fuse_based_projections)

    def _split(self, y: torch.Tensor):
        """q, k, v as (..., H, 16 / Dv) views of the fused projection's output (no copies)."""
        h, f = self.num_heads, self.feature_dim
        q, k, v = y.split([h * f, h * f, self.d_model], dim=-1)
        return q.unflatten(-1, (h, f)), k.unflatten(-1, (h, f)), v.unflatten(-1, (h, self.value_dim))

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None = None,
                output_final_state: bool = False
                ) -> torch.Tensor | tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """The mixer over whole sequences: the qkv projection, causal :func:`tk_ops.based` and the output projection.

        With ``state`` the sequences continue from it (the previous piece's final state, or :meth:`init_state`),
        so a prompt processed in pieces gives the outputs of one pass: chunked prefill.

        Args:
            x: (B, N, d_model) CUDA tensor in the parameters' dtype (bfloat16).
            state: None (a zero state) or ``(kv (B, H, Dv, 273), k_sum (B, H, 273))`` float32, contiguous.
            output_final_state: also return the state after the last token.

        Returns:
            y (B, N, d_model) in x's dtype, or ``(y, (kv, k_sum))`` with ``output_final_state``: the new state,
            float32 (the incoming one is not modified).

        Autograd:
            Differentiable in x, every parameter and ``state``, from y and from the final state.

        Raises:
            InputError: x is not (B, N, d_model), or the state is not a pair of tensors of the shapes above.
            DTypeError: x is not the parameters' dtype (bfloat16), or the state is not float32.
            DeviceMismatchError: x or the state is on the CPU or on another device than the parameters.
            ExtensionNotBuiltError, FamilyNotBuiltError, UnsupportedDeviceError: the kernels are not built, lack the
                gemm or based family, or the GPU is not sm_90 (tk_ops.errors).

        Example::

            mixer = tk_ops.nn.BasedLinearAttention(1024, 16, device="cuda")
            x = torch.randn(4, 4096, 1024, device="cuda", dtype=torch.bfloat16)
            y1, state = mixer(x[:, :2048], output_final_state=True)     # first half of the prompt
            y2 = mixer(x[:, 2048:], state)                              # continues: cat([y1, y2], 1) ~ mixer(x)
        """
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise InputError(f"tk_ops.nn.BasedLinearAttention: input must be (batch, seq_len, {self.d_model}), "
                             f"got shape {tuple(x.shape)}")
        b, n, _ = x.shape
        # (B, N, H, D) slices viewed as (B, H, N, D): the kernel reads them in place, and o comes back in the same
        # (B, N, H, Dv) order, so the reshape below is a view too.
        q, k, v = (t.transpose(1, 2) for t in self._split(self.qkv(x)))
        out = based(q, k, v, None, self.normalize, self.eps, initial_state=state,
                    output_final_state=output_final_state)
        o, final = out if output_final_state else (out, None)
        y = self.proj(o.transpose(1, 2).reshape(b, n, self.d_model))
        return (y, final) if output_final_state else y

    def step(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """One decoding step: the projections and :func:`tk_ops.based_step` for one new token per sequence,
        adding it to ``state`` in place.

        Args:
            x: (B, d_model) or (B, 1, d_model) CUDA tensor in the parameters' dtype (bfloat16): one token per
                sequence.
            state: ``(kv (B, H, Dv, 273), k_sum (B, H, 273))`` float32, from :meth:`init_state` or ``forward(...,
                output_final_state=True)``; updated in place.

        Returns:
            y shaped like x, in x's dtype: the token's output, which sees the token itself, so that prefill then
            steps give the outputs of one pass.

        Autograd:
            No gradient through the step (decoding); a state that requires grad is refused while gradients are
            enabled: decode under ``torch.no_grad()`` or pass the state detached.

        Raises:
            InputError: x is not one token per sequence of width d_model, the state has the wrong shapes, or it
                requires grad while gradients are enabled.
            DTypeError: x is not the parameters' dtype, or the state is not float32.
            DeviceMismatchError: x or the state is on the CPU or on another device than the parameters.
            ExtensionNotBuiltError, FamilyNotBuiltError, UnsupportedDeviceError: the kernels are not built, lack the
                gemm or based family, or the GPU is not sm_90 (tk_ops.errors).

        Example::

            mixer = tk_ops.nn.BasedLinearAttention(1024, 16, device="cuda")
            state = mixer.init_state(4)
            with torch.no_grad():
                for _ in range(16):
                    y_t = mixer.step(torch.randn(4, 1024, device="cuda", dtype=torch.bfloat16), state)   # (4, 1024)
        """
        if x.dim() not in (2, 3) or x.shape[-1] != self.d_model or (x.dim() == 3 and x.shape[1] != 1):
            raise InputError(f"tk_ops.nn.BasedLinearAttention.step: input must be (batch, {self.d_model}) or "
                             f"(batch, 1, {self.d_model}), one token per sequence, got shape {tuple(x.shape)}")
        x2 = x.reshape(x.shape[0], self.d_model)
        q, k, v = self._split(self.qkv(x2))  # (B, H, 16 / Dv) strided views: the step kernel reads any strides
        o = based_step(q, k, v, state, None, self.normalize, self.eps)
        return self.proj(o.reshape(x2.shape)).view(x.shape)

    def init_state(self, batch: int, device: torch.device | str | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """An empty recurrent state for ``batch`` sequences, to start :meth:`forward` or :meth:`step` from.

        Args:
            batch: the number of sequences B.
            device: where to create it (None: the module's device).

        Returns:
            ``(kv, k_sum)``: zeros kv (batch, H, Dv, 273) and k_sum (batch, H, 273), float32, contiguous; the
            state of an empty prefix, equal to passing no state at all.

        Autograd:
            Plain zero tensors that do not require grad (the state the step updates in place).

        Raises:
            No tk_ops error (torch's own for a bad batch or device).

        Example::

            mixer = tk_ops.nn.BasedLinearAttention(1024, 16, device="cuda")
            kv, k_sum = mixer.init_state(8)          # (8, 16, 64, 273), (8, 16, 273) float32
        """
        device = self.proj.weight.device if device is None else device
        features = 1 + self.feature_dim + self.feature_dim ** 2
        return (torch.zeros(batch, self.num_heads, self.value_dim, features, device=device, dtype=torch.float32),
                torch.zeros(batch, self.num_heads, features, device=device, dtype=torch.float32))

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, num_heads={self.num_heads}, feature_dim={self.feature_dim}, "
                f"value_dim={self.value_dim}, normalize={self.normalize}, eps={self.eps}")


def _fuse_based_projections(module, state_dict, prefix, *args):
    """load_state_dict hook: the Based model's separate q, k, v projections (proj_q, proj_k, proj_v) become the rows
    of qkv, and its output projection (out_proj or proj_o) becomes proj."""
    for suffix in ("weight", "bias"):
        parts = [prefix + f"proj_{x}.{suffix}" for x in "qkv"]
        if all(p in state_dict for p in parts):
            state_dict[prefix + f"qkv.{suffix}"] = torch.cat([state_dict.pop(p) for p in parts])
        for out_name in ("out_proj", "proj_o"):
            if prefix + f"{out_name}.{suffix}" in state_dict:
                state_dict[prefix + f"proj.{suffix}"] = state_dict.pop(prefix + f"{out_name}.{suffix}")
