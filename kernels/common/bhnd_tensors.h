// The torch side of (batch, heads, seq, dim) operands, shared by the bindings of the families that take them: which
// views TMA reads in place, their description for the kernels (common/tensor4.h), and outputs allocated in the
// memory order of an input.
#pragma once

#include <ATen/ATen.h>
#include <ATen/cuda/EmptyTensor.h>

#include <array>
#include <cstdint>

#include "common/tensor4.h"

namespace tk_kernels {

// TMA reads a (B, H, N, D) view in place when D is dense, the other strides are multiples of 16 bytes and the base is
// 16-byte aligned; anything else is copied to a contiguous tensor first (clone, not contiguous(): a contiguous tensor
// at a misaligned offset must move too).
inline bool tma_readable(const at::Tensor &t) {
    if (t.stride(3) != 1 || reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 != 0) return false;
    for (int d = 0; d < 3; d++)
        if (t.size(d) > 1 && (t.stride(d) % 8 != 0 || t.stride(d) <= 0)) return false;
    return true;
}

inline at::Tensor tma_readable_copy(const at::Tensor &t) {
    return tma_readable(t) ? t : t.clone(at::MemoryFormat::Contiguous);
}

// A size-1 axis may carry any stride; give it a harmless one that TMA accepts.
inline int64_t tma_stride(const at::Tensor &t, int d) { return t.size(d) > 1 ? t.stride(d) : int64_t(8); }

inline tensor4 view_of(const at::Tensor &t) { return {t.data_ptr(), tma_stride(t, 0), tma_stride(t, 1), tma_stride(t, 2)}; }
inline out4 out_of(at::Tensor &t) { return {t.data_ptr(), tma_stride(t, 0), tma_stride(t, 1), tma_stride(t, 2)}; }

// Outputs take the memory order of their input: a (B, N, H, D) tensor viewed as (B, H, N, D) (what a fused
// projection gives) produces outputs laid out the same way, so that the transposes and reshapes around the op stay
// views, as with scaled_dot_product_attention: (B, N, H, D) order when H > 1, N > 1 and the head stride is below the
// sequence stride.
template <typename I> std::array<I, 4> strides_like(const I &H, const I &N, const I &D, bool heads_inner) {
    if (heads_inner) return {N * H * D, D, H * D, I(1)};
    return {H * N * D, N * D, D, I(1)};
}

// An empty (B, H, N, D) tensor shaped like `like`, of dtype `type`, in like's memory order. CUDA tensors come from the
// caching allocator directly (no dispatch on the eager path); meta (fake) tensors keep symbolic sizes.
inline at::Tensor empty_like_order(const at::Tensor &like, at::ScalarType type) {
    const bool heads_inner = like.sym_size(1) > 1 && like.sym_size(2) > 1 && like.sym_stride(1) < like.sym_stride(2);
    if (like.is_cuda()) {
        const int64_t B = like.size(0), H = like.size(1), N = like.size(2), D = like.size(3);
        return at::detail::empty_strided_cuda({B, H, N, D}, strides_like(H, N, D, heads_inner), type, like.device());
    }
    const c10::SymInt &B = like.sym_size(0), &H = like.sym_size(1), &N = like.sym_size(2), &D = like.sym_size(3);
    return at::empty_strided_symint({B, H, N, D}, strides_like(H, N, D, heads_inner), like.options().dtype(type));
}

} // namespace tk_kernels
