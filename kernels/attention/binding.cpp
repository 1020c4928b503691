// Torch bindings of attention: tk_ops::attention_fwd(q, k, v, causal, scale) -> (O, LSE) and
// tk_ops::attention_bwd(q, k, v, o, dout, lse, causal, scale) -> (dQ, dK, dV).
//
// The Python wrapper (python/tk_ops/attention.py) validates arguments with friendly messages first; the
// checks here are the last line of defence, so that nothing reaching a kernel can fault or read out of bounds.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>

#include "attention.h"
#include "common/require.h"

namespace {

using tk_kernels::require;

// TMA reads a (B, H, N, D) view in place when D is dense, the other strides are multiples of 16 bytes and the
// base is 16-byte aligned; anything else is copied to a contiguous tensor first.
bool tma_readable(const at::Tensor &t) {
    if (t.stride(3) != 1) return false;
    if (reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 != 0) return false;
    for (int d = 0; d < 3; d++)
        if (t.size(d) > 1 && (t.stride(d) % 8 != 0 || t.stride(d) <= 0)) return false;
    return true;
}

// A size-1 axis may carry any stride; give it a harmless one that TMA accepts.
int64_t tma_stride(const at::Tensor &t, int d) { return t.size(d) > 1 ? t.stride(d) : int64_t(8); }

tk_attention::tensor4 view_of(const at::Tensor &t) {
    return {t.data_ptr(), tma_stride(t, 0), tma_stride(t, 1), tma_stride(t, 2)};
}

tk_attention::out4 out_of(at::Tensor &t) { return {t.data_ptr(), tma_stride(t, 0), tma_stride(t, 1), tma_stride(t, 2)}; }

// Outputs take the memory order of their input: a (B, N, H, D) tensor viewed as (B, H, N, D) (what a fused
// QKV projection gives) produces outputs laid out the same way, so that the transposes and reshapes around
// attention stay views, as with scaled_dot_product_attention. The rule, shared with the fake implementations
// in attention.py: (B, N, H, D) order iff H > 1, N > 1 and the head stride is below the sequence stride.
bool heads_inner(const at::Tensor &like) { return like.size(1) > 1 && like.size(2) > 1 && like.stride(1) < like.stride(2); }

at::Tensor empty_like_order(const at::Tensor &like, at::ScalarType type) {
    const auto options = like.options().dtype(type);
    const int64_t B = like.size(0), H = like.size(1), N = like.size(2), D = like.size(3);
    return heads_inner(like) ? at::empty({B, N, H, D}, options).transpose(1, 2) : at::empty({B, H, N, D}, options);
}

// The checks q, k, v share between the forward and the backward.
void check_qkv(const at::Tensor &q_in, const at::Tensor &k_in, const at::Tensor &v_in) {
    require(q_in.is_cuda() && k_in.is_cuda() && v_in.is_cuda(), "tk_ops.attention: inputs must be CUDA tensors");
    require(q_in.device() == k_in.device() && q_in.device() == v_in.device(), "tk_ops.attention: inputs must be on one device");
    require(q_in.dim() == 4 && k_in.dim() == 4 && v_in.dim() == 4, "tk_ops.attention: q, k, v must be 4-D (B, H, N, D)");
    const auto type = q_in.scalar_type();
    require(type == at::kBFloat16 || type == at::kHalf, "tk_ops.attention: inputs must be bfloat16 or float16");
    require(k_in.scalar_type() == type && v_in.scalar_type() == type, "tk_ops.attention: q, k, v must share one dtype");
    const int64_t B = q_in.size(0), Hq = q_in.size(1), Nq = q_in.size(2), D = q_in.size(3);
    const int64_t Hk = k_in.size(1), Nk = k_in.size(2);
    require(D == 64 || D == 128, "tk_ops.attention: head dimension must be 64 or 128, got ", D);
    require(k_in.size(0) == B && v_in.size(0) == B && k_in.size(3) == D && v_in.size(3) == D && v_in.size(1) == Hk &&
                v_in.size(2) == Nk,
            "tk_ops.attention: k and v must be (B, Hk, Nk, D) with q's B and D");
    require(Hk >= 1 && Hq % Hk == 0, "tk_ops.attention: query heads (", Hq, ") must be a multiple of kv heads (", Hk, ")");
    require(B < (1ll << 31) && Hq < (1ll << 31) && Nq < (1ll << 30) && Nk < (1ll << 30) && B * Hq * ((Nq + 127) / 64) < (1ll << 31) &&
                B * Hk * ((Nk + 127) / 128) < (1ll << 31),
            "tk_ops.attention: problem too large");
}

// clone, not contiguous(): a contiguous tensor at a misaligned offset must move too.
at::Tensor tma_readable_copy(const at::Tensor &t) { return tma_readable(t) ? t : t.clone(at::MemoryFormat::Contiguous); }

at::Tensor dense_aligned(const at::Tensor &t) {
    const bool ok = t.is_contiguous() && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
    return ok ? t : t.clone(at::MemoryFormat::Contiguous);
}

tk_attention::dtype kernel_type(const at::Tensor &t) {
    return t.scalar_type() == at::kBFloat16 ? tk_attention::dtype::bf16 : tk_attention::dtype::fp16;
}

// The fields the forward and backward problems share: q, k, v as the kernels read them, and the sizes.
template <typename Problem>
void describe_inputs(Problem &p, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, bool causal, double scale) {
    p.q = view_of(q);
    p.k = view_of(k);
    p.v = view_of(v);
    p.batch = int(q.size(0));
    p.q_heads = int(q.size(1));
    p.kv_heads = int(k.size(1));
    p.q_len = int(q.size(2));
    p.kv_len = int(k.size(2));
    p.head_dim = int(q.size(3));
    p.causal = causal;
    p.scale = float(scale);
    p.type = kernel_type(q);
}

std::tuple<at::Tensor, at::Tensor> attention_fwd(const at::Tensor &q_in, const at::Tensor &k_in, const at::Tensor &v_in,
                                                 bool causal, double scale) {
    check_qkv(q_in, k_in, v_in);
    const int64_t B = q_in.size(0), Hq = q_in.size(1), Nq = q_in.size(2), Nk = k_in.size(2);

    const c10::cuda::CUDAGuard guard(q_in.device());
    at::Tensor o = empty_like_order(q_in, q_in.scalar_type());
    at::Tensor lse = at::empty({B, Hq, Nq}, q_in.options().dtype(at::kFloat));
    if (B == 0 || Hq == 0 || Nq == 0) return {o, lse};
    if (Nk == 0) { // no key at all: every row sees nothing
        o.zero_();
        lse.fill_(-std::numeric_limits<float>::infinity());
        return {o, lse};
    }
    // The kernel takes row maxima of the raw scores and folds the scale into each exponent, which needs
    // scale > 0. The same softmax for other scales: scale * (q.k) == (-scale) * ((-q).k), and a zero scale
    // scores every key 0, as zero queries at scale 1 do.
    at::Tensor q_pos = q_in;
    if (scale < 0) {
        q_pos = q_in.neg();
        scale = -scale;
    } else if (scale == 0) {
        q_pos = at::zeros_like(q_in, at::MemoryFormat::Contiguous);
        scale = 1;
    }
    at::Tensor q = tma_readable_copy(q_pos), k = tma_readable_copy(k_in), v = tma_readable_copy(v_in);
    require(tma_readable(q) && tma_readable(k) && tma_readable(v), "tk_ops.attention: inputs must be 16-byte aligned");

    tk_attention::fwd_problem p{};
    describe_inputs(p, q, k, v, causal, scale);
    p.o = out_of(o);
    p.lse = lse.data_ptr<float>();
    // Freed on return: the caching allocator hands it out again only to work ordered after this kernel.
    at::Tensor task_counter = at::empty({1}, q_in.options().dtype(at::kInt));
    p.task_counter = task_counter.data_ptr<int>();
    const cudaError_t e = tk_attention::forward(p, at::cuda::getCurrentCUDAStream());
    require(e == cudaSuccess, "tk_ops.attention kernel failed: ", cudaGetErrorString(e));
    return {o, lse};
}

// dQ, dK, dV of attention_fwd(q, k, v, causal, scale) given O, dO and the LSE it returned. dK and dV have k's
// and v's shapes (summed over each kv head's query heads).
std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_bwd(const at::Tensor &q_in, const at::Tensor &k_in,
                                                             const at::Tensor &v_in, const at::Tensor &o_in,
                                                             const at::Tensor &dout_in, const at::Tensor &lse_in,
                                                             bool causal, double scale) {
    check_qkv(q_in, k_in, v_in);
    const int64_t B = q_in.size(0), Hq = q_in.size(1), Nq = q_in.size(2), Nk = k_in.size(2);
    require(o_in.is_cuda() && dout_in.is_cuda() && lse_in.is_cuda() && o_in.device() == q_in.device() &&
                dout_in.device() == q_in.device() && lse_in.device() == q_in.device(),
            "tk_ops.attention backward: o, dout and lse must be CUDA tensors on q's device");
    require(o_in.sizes() == q_in.sizes() && dout_in.sizes() == q_in.sizes(),
            "tk_ops.attention backward: o and dout must have q's shape (B, Hq, Nq, D)");
    require(o_in.scalar_type() == q_in.scalar_type() && dout_in.scalar_type() == q_in.scalar_type(),
            "tk_ops.attention backward: o and dout must have q's dtype");
    require(lse_in.scalar_type() == at::kFloat && lse_in.dim() == 3 && lse_in.size(0) == B && lse_in.size(1) == Hq &&
                lse_in.size(2) == Nq,
            "tk_ops.attention backward: lse must be float32 (B, Hq, Nq), as the forward returns it");

    const c10::cuda::CUDAGuard guard(q_in.device());
    at::Tensor dq = empty_like_order(q_in, q_in.scalar_type());
    at::Tensor dk = empty_like_order(k_in, k_in.scalar_type());
    at::Tensor dv = empty_like_order(v_in, v_in.scalar_type());
    if (B == 0 || Hq == 0 || Nq == 0 || Nk == 0) { // nothing to differentiate through
        return {dq.zero_(), dk.zero_(), dv.zero_()};
    }
    at::Tensor q = tma_readable_copy(q_in), k = tma_readable_copy(k_in), v = tma_readable_copy(v_in);
    require(tma_readable(q) && tma_readable(k) && tma_readable(v), "tk_ops.attention: inputs must be 16-byte aligned");
    at::Tensor o = tma_readable_copy(o_in), dout = tma_readable_copy(dout_in), lse = dense_aligned(lse_in);
    require(tma_readable(o) && tma_readable(dout), "tk_ops.attention backward: o and dout must be 16-byte aligned");
    const auto f32 = q_in.options().dtype(at::kFloat);
    const int64_t padded = tk_attention::padded_q_len(int(Nq));
    at::Tensor lse2 = at::empty({B, Hq, padded}, f32), delta = at::empty({B, Hq, padded}, f32);
    at::Tensor dq_accum = at::empty({B * Hq * padded * q_in.size(3)}, f32); // layout: tk_attention::dq_accum_transposed

    tk_attention::bwd_problem p{};
    describe_inputs(p, q, k, v, causal, scale);
    p.o = view_of(o);
    p.dout = view_of(dout);
    p.lse = lse.data_ptr<float>();
    p.lse2 = lse2.data_ptr<float>();
    p.delta = delta.data_ptr<float>();
    p.dq_accum = dq_accum.data_ptr<float>();
    p.dk = out_of(dk);
    p.dv = out_of(dv);
    p.dq = out_of(dq); // most of dQ is converted by the main kernel's last blocks (attention.h)
    at::Tensor sync = at::empty({tk_attention::bwd_sync_ints(p)}, q_in.options().dtype(at::kInt));
    p.sync = sync.data_ptr<int>();
    const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    cudaError_t e = tk_attention::backward(p, stream);
    if (e == cudaSuccess) e = tk_attention::backward_convert_dq(p, out_of(dq), stream);
    require(e == cudaSuccess, "tk_ops.attention backward kernel failed: ", cudaGetErrorString(e));
    return {dq, dk, dv};
}

} // namespace

// The schema is defined in Python (python/tk_ops/attention.py) with its fake implementation and autograd
// formula; here only the CUDA kernel attaches.
TORCH_LIBRARY_IMPL(tk_ops, CUDA, m) {
    m.impl("attention_fwd", &attention_fwd);
    m.impl("attention_bwd", &attention_bwd);
}
