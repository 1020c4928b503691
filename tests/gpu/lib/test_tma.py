"""TMA tile and vector transfers (tests/gpu/lib/kernels/tma.cu) against plain torch indexing.

Every tensor is (B, D, R, C) with B, D > 1 so batch and depth coordinates are exercised, and
ragged R / C so that loads must zero-fill and stores must clip. Stores go into a view with a
guard band (padded rows and row stride) that must come back untouched."""
import pytest
import torch

from ..util import assert_close, poison

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
          "fp8e4m3": torch.float8_e4m3fn, "fp8e5m2": torch.float8_e5m2}
# (dtype, tile rows, tile cols), as registered in tma.cu
TILES = [("fp32", 16, 16), ("fp32", 64, 32), ("fp32", 32, 64), ("fp32", 16, 48),
         ("bf16", 16, 16), ("bf16", 64, 32), ("bf16", 128, 64), ("bf16", 64, 128), ("bf16", 32, 48), ("bf16", 256, 64),
         ("bf16", 64, 96), ("bf16", 80, 256),
         ("fp16", 16, 16), ("fp16", 32, 96), ("fp16", 64, 64),
         ("fp8e4m3", 64, 32), ("fp8e4m3", 32, 64), ("fp8e5m2", 64, 256)]
VECS = [("fp32", 16), ("fp32", 128), ("bf16", 64), ("bf16", 256), ("fp16", 32)]
LOAD_PLAIN, PLAIN_STORE, LOAD_STORE, LOAD_ADD, PREFETCH_LOAD, HINTED_LOAD_STORE = range(6)
B, D = 2, 3


def rand(shape, dtype):
    return torch.randn(*shape, device="cuda").mul(4).to(dtype)


def same(a, b):
    """Bitwise equality (fp8 tensors have no == on every torch build)."""
    if a.element_size() == 1:
        return torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    return torch.equal(a, b)


def place(dst, src):
    """dst[..., :R, :C] = src, bit for bit (copied as bytes for 1-byte types, so fp8 values are never
    converted on the way)."""
    R, C = src.shape[-2:]
    if src.element_size() == 1:
        dst.view(torch.uint8)[..., :R, :C] = src.view(torch.uint8)
    else:
        dst[..., :R, :C] = src
    return dst


def sizes(rows, cols, elem, ragged):
    """Tensor rows / cols: ragged ones end mid-tile, keeping rows 16-byte aligned (a TMA rule)."""
    if not ragged:
        return 2 * rows, cols
    return rows + rows // 2 + 3, 2 * cols - 16 // elem


def guarded(shape, dtype, R, C):
    """A (B, D, R+5, C+pad) buffer of random 'old' values; the test views its [:R, :C] corner."""
    pad = 32 // torch.empty((), dtype=dtype).element_size()
    return rand((B, D, R + 5, C + pad), dtype)


def run_tile(tk, name, src, dst, padded, mode):
    Bn, Dn, R, C = src.shape
    tk.run(name, src, dst, padded, args=(Bn, Dn, R, C, dst.shape[2], dst.shape[3], mode))


@pytest.mark.parametrize("ragged", [False, True], ids=["exact", "ragged"])
@pytest.mark.parametrize("mode", [LOAD_PLAIN, PREFETCH_LOAD], ids=["load", "prefetch_load"])
@pytest.mark.parametrize("tile", TILES, ids=lambda t: f"{t[0]}-{t[1]}x{t[2]}")
def test_tile_load_zero_fills(tk, tile, mode, ragged):
    dt, tr, tc = tile
    dtype = DTYPES[dt]
    R, C = sizes(tr, tc, torch.empty((), dtype=dtype).element_size(), ragged)
    src = rand((B, D, R, C), dtype)
    nr, nc = -(-R // tr), -(-C // tc)
    padded = poison(torch.empty(B, D, nr * tr, nc * tc, device="cuda", dtype=dtype))
    dst = guarded(src.shape, dtype, R, C)
    run_tile(tk, f"tma/tile/{dt}/{tr}x{tc}", src, dst, padded, mode)
    want = place(torch.zeros_like(padded), src)
    assert same(padded, want), "TMA load does not reproduce the tile (or did not zero-fill past the edge)"


@pytest.mark.parametrize("ragged", [False, True], ids=["exact", "ragged"])
@pytest.mark.parametrize("mode", [PLAIN_STORE, LOAD_STORE, HINTED_LOAD_STORE],
                         ids=["plain_then_store", "load_then_store", "hinted_load_then_store"])
@pytest.mark.parametrize("tile", TILES, ids=lambda t: f"{t[0]}-{t[1]}x{t[2]}")
def test_tile_store_clips(tk, tile, mode, ragged):
    dt, tr, tc = tile
    dtype = DTYPES[dt]
    R, C = sizes(tr, tc, torch.empty((), dtype=dtype).element_size(), ragged)
    src = rand((B, D, R, C), dtype)
    dst = guarded(src.shape, dtype, R, C)
    want = place(dst.clone(), src)
    padded = torch.empty(1, device="cuda", dtype=dtype)
    run_tile(tk, f"tma/tile/{dt}/{tr}x{tc}", src, dst, padded, mode)
    assert same(dst[:, :, :R, :C], src), "TMA store wrote wrong values"
    assert same(dst, want), "TMA store wrote outside the tensor (guard band changed)"


@pytest.mark.parametrize("ragged", [False, True], ids=["exact", "ragged"])
@pytest.mark.parametrize("tile", [t for t in TILES if not t[0].startswith("fp8")], ids=lambda t: f"{t[0]}-{t[1]}x{t[2]}")
def test_tile_store_add(tk, tile, ragged):
    dt, tr, tc = tile
    dtype = DTYPES[dt]
    R, C = sizes(tr, tc, torch.empty((), dtype=dtype).element_size(), ragged)
    src = rand((B, D, R, C), dtype)
    dst = guarded(src.shape, dtype, R, C)
    old = dst.clone()
    run_tile(tk, f"tma/tile/{dt}/{tr}x{tc}", src, dst, torch.empty(1, device="cuda", dtype=dtype), LOAD_ADD)
    want = (old[:, :, :R, :C].float() + src.float()).to(dtype)
    assert_close(dst[:, :, :R, :C].float(), want.float(), 1e-6 if dtype == torch.float32 else 4e-3, "store_add")
    outside = torch.ones_like(dst, dtype=torch.bool)
    outside[:, :, :R, :C] = False
    assert same(dst[outside], old[outside]), "TMA reduce-add wrote outside the tensor"


def run_vec(tk, name, src, dst, padded, mode):
    Bn, Dn, R, C = src.shape
    tk.run(name, src, dst, padded, args=(Bn, Dn, R, C, dst.shape[2], dst.shape[3], mode))


def vec_sizes(length, elem, ragged):
    return 5, (2 * length if not ragged else 2 * length + length // 2 - 16 // elem)


@pytest.mark.parametrize("ragged", [False, True], ids=["exact", "ragged"])
@pytest.mark.parametrize("mode", [LOAD_PLAIN, PREFETCH_LOAD, PLAIN_STORE, LOAD_STORE, LOAD_ADD],
                         ids=["load", "prefetch_load", "plain_then_store", "load_then_store", "load_then_add"])
@pytest.mark.parametrize("vec", VECS, ids=lambda v: f"{v[0]}-{v[1]}")
def test_vector(tk, vec, mode, ragged):
    dt, length = vec
    dtype = DTYPES[dt]
    R, C = vec_sizes(length, torch.empty((), dtype=dtype).element_size(), ragged)
    src = rand((B, D, R, C), dtype)
    nc = -(-C // length)
    padded = poison(torch.empty(B, D, R, nc * length, device="cuda", dtype=dtype))
    dst = guarded(src.shape, dtype, R, C)
    old = dst.clone()
    run_vec(tk, f"tma/vec/{dt}/{length}", src, dst, padded, mode)
    if mode in (LOAD_PLAIN, PREFETCH_LOAD):
        assert same(padded, place(torch.zeros_like(padded), src))
        return
    want = old.clone()
    if mode == LOAD_ADD:
        want[:, :, :R, :C] = (old[:, :, :R, :C].float() + src.float()).to(dtype)
        assert_close(dst.float(), want.float(), 1e-6 if dtype == torch.float32 else 4e-3, "vector store_add")
        inside = torch.zeros_like(dst, dtype=torch.bool)
        inside[:, :, :R, :C] = True
        assert same(dst[~inside], old[~inside]), "vector reduce-add wrote outside the tensor"
    else:
        assert same(dst, place(want, src))
