"""Helpers shared by the memory and shared-op tests (this module holds no tests).

Placed: a rows x cols tensor inside a larger flat buffer whose other bytes are a guard pattern.
Kernels get the buffer, the element offset of the tensor and its row stride, so a load that
reads outside the tensor sees guard values (and a test expecting zeros there fails), and a store
that writes outside the tensor changes guard bytes (and guard_intact() fails).
"""
from __future__ import annotations

import struct

import torch

from ..util import poison

DTYPES = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp8e4m3": torch.float8_e4m3fn,
}
DEVICE = "cuda"
GUARD_BYTE = 0x5A  # finite and non-zero in every element type above
GUARD_ROWS = 2     # guard rows above and below the tensor
GUARD_COLS = 16    # guard columns to the left (and at least this many to the right)


def randn(*shape, dtype):
    return torch.randn(*shape, device=DEVICE).to(dtype)


class Placed:
    """A rows x cols tensor at (GUARD_ROWS, GUARD_COLS) of a guarded 2-D buffer.

    aligned=True gives a row stride that is a multiple of 16 elements (every row start 16-byte
    aligned, so the 16-byte paths run); aligned=False gives an odd stride, which forces the
    per-element paths (not even pairs are aligned).
    """

    def __init__(self, rows: int, cols: int, dtype: torch.dtype, aligned: bool = True):
        self.rows, self.cols = rows, cols
        self.stride = (-(-cols // 16) * 16 + 2 * GUARD_COLS) if aligned else cols + 2 * GUARD_COLS + 1
        self.height = rows + 2 * GUARD_ROWS
        self.buf = torch.empty(self.height * self.stride, dtype=dtype, device=DEVICE)
        self.buf.view(torch.uint8).fill_(GUARD_BYTE)
        self.offset = GUARD_ROWS * self.stride + GUARD_COLS
        self.view = self.buf.view(self.height, self.stride)[GUARD_ROWS:GUARD_ROWS + rows, GUARD_COLS:GUARD_COLS + cols]

    @classmethod
    def holding(cls, x: torch.Tensor, aligned: bool = True) -> "Placed":
        p = cls(x.shape[0], x.shape[1], x.dtype, aligned)
        p.view.copy_(x)
        return p

    @classmethod
    def poisoned(cls, rows: int, cols: int, dtype: torch.dtype, aligned: bool = True) -> "Placed":
        p = cls(rows, cols, dtype, aligned)
        poison(p.view)
        return p

    def args(self) -> tuple[int, int]:
        return self.stride, self.offset

    def guard_intact(self) -> bool:
        es = self.buf.element_size()
        raw = self.buf.view(torch.uint8).view(self.height, self.stride * es)
        inside = torch.zeros_like(raw, dtype=torch.bool)
        inside[GUARD_ROWS:GUARD_ROWS + self.rows, GUARD_COLS * es:(GUARD_COLS + self.cols) * es] = True
        return bool((raw[~inside] == GUARD_BYTE).all())


def same(out: torch.Tensor, ref: torch.Tensor) -> bool:
    """Exact equality of values (NaN never equal), for any of the dtypes above."""
    return out.shape == ref.shape and torch.equal(out.float(), ref.float())


def zero_padded(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    out = torch.zeros(rows, cols, dtype=x.dtype, device=x.device)
    out[: x.shape[0], : x.shape[1]] = x
    return out


def float_bits(x: float) -> int:
    return struct.unpack("<i", struct.pack("<f", x))[0]


def ceil_to(n: int, m: int) -> int:
    return -(-n // m) * m


def tensor_cases(tile_rows: int, tile_cols: int):
    """(id, rows, cols, aligned) shapes a tile op is checked on: whole tiles, ragged in both
    directions with aligned rows (partial 16-byte units at the right edge), and ragged with an
    odd row stride (nothing aligned)."""
    return [
        ("exact", 2 * tile_rows, 2 * tile_cols, True),
        ("ragged", 2 * tile_rows - 5, 2 * tile_cols - 6, True),
        ("ragged_odd", 2 * tile_rows - 3, 2 * tile_cols - 5, False),
        ("single_partial", 7, 9, True),
    ]
