// The attention ops as torch sees them: tk_ops::attention_fwd(q, k, v, causal, scale, window_left, window_right,
// softcap) -> (O, LSE) and tk_ops::attention_bwd(q, k, v, o, dout, lse, <the same options>) -> (dQ, dK, dV), and their
// packed-document forms attention_varlen_fwd / _bwd (the packed tensors, then cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
// max_seqlen_k, then the same options): schemas, and their CUDA, Meta and CPU kernels; the autograd of the forwards
// is in autograd.cpp, the inputs the kernels read beyond the op's tensors in attention_inputs.cpp.
//
// Each rule is one function below, shared by the kernels of the ops it concerns: the CUDA kernel checks them before
// anything reaches a kernel, the Meta kernel (torch.compile's fake tensors) checks them and lays the outputs out the
// same way, and the CPU kernel (common/cpu_refusal.h) runs the Meta kernel and then asks for CUDA tensors. The Python
// wrappers (python/tk_ops/attention.py) only call these ops.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

#include "attention.h"
#include "attention_inputs.h"
#include "common/bhnd_tensors.h"
#include "common/checks.h"
#include "common/cpu_refusal.h"
#include "common/task_counter.h"

namespace {

using namespace tk_kernels;

constexpr const char *ATTENTION = "tk_ops.attention";
constexpr const char *BACKWARD = "tk_ops.attention backward";
constexpr const char *VARLEN = "tk_ops.attention_varlen";
constexpr const char *VARLEN_BACKWARD = "tk_ops.attention_varlen backward";

// ---------------------------------------------------------------- the rules

// "64, 96, 128 or 256", from the list the kernels are built for.
std::string head_dim_list() {
    std::string s;
    const size_t n = std::size(tk_attention::HEAD_DIMS);
    for (size_t i = 0; i < n; i++)
        s += (i == 0 ? "" : i + 1 == n ? " or " : ", ") + std::to_string(tk_attention::HEAD_DIMS[i]);
    return s;
}

// q, k and v in either layout: bfloat16 or float16, one dtype, `dims` dimensions (`layout` words the shape they must
// have), k and v of one shape. Returns the head dimension, the last, one of those the kernels are built for.
int64_t qkv_tensor_rules(const char *op, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, int64_t dims,
                         const char *layout) {
    for (const named_tensor &t : {named_tensor{"q", q}, named_tensor{"k", k}, named_tensor{"v", v}}) {
        const at::ScalarType type = t.tensor.scalar_type();
        check_dtype(type == at::kBFloat16 || type == at::kHalf, op, ": ", t.name, " must be bfloat16 or float16, got ",
                    type);
        check_input(t.tensor.dim() == dims, op, ": ", t.name, " must be ", layout, ", got shape ",
                    t.tensor.sym_sizes());
    }
    check_dtype(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(), op,
                ": q, k, v must share one dtype, got ", q.scalar_type(), ", ", k.scalar_type(), ", ", v.scalar_type());
    // The head dimension picks the kernel: a symbolic one is specialised here.
    const int64_t D = q.sym_size(dims - 1).guard_int(__FILE__, __LINE__);
    check_input(tk_attention::supported_head_dim(int(D)), op, ": head_dim must be ", head_dim_list(), ", got ", D);
    check_input(k.sym_sizes() == v.sym_sizes(), op, ": k and v must have the same shape, got ", k.sym_sizes(), " and ",
                v.sym_sizes());
    return D;
}

// Grouped-query attention: the query heads a multiple of the key/value heads (axis 1 in either layout).
void heads_rule(const char *op, const at::Tensor &q, const at::Tensor &k) {
    const c10::SymInt &Hq = q.sym_size(1), &Hk = k.sym_size(1);
    check_input(Hk >= 1 && Hq % Hk == 0, op, ": the query heads (", Hq, ") must be a multiple of the key/value heads (",
                Hk, ") (grouped-query attention)");
}

// The softmax scale: 1/sqrt(D) unless given, a finite number if given.
double scale_rule(const char *op, std::optional<double> scale, int64_t D) {
    if (!scale) return 1.0 / std::sqrt(double(D));
    check_input(std::isfinite(*scale), op, ": scale must be a finite number or None, got ", *scale);
    return *scale;
}

// q (B, Hq, Nq, D), k and v (B, Hk, Nk, D) like scaled_dot_product_attention's, Hq a multiple of Hk; returns the
// softmax scale, 1/sqrt(D) unless given.
double qkv_rules(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, std::optional<double> scale) {
    const int64_t D = qkv_tensor_rules(ATTENTION, q, k, v, 4,
                                       "4-D (batch, heads, seq_len, head_dim) like scaled_dot_product_attention");
    const c10::SymInt &B = q.sym_size(0), &Hq = q.sym_size(1), &Nq = q.sym_size(2), &Hk = k.sym_size(1),
                      &Nk = k.sym_size(2);
    check_input(k.sym_size(0) == B && k.sym_size(3) == D, ATTENTION,
                ": k and v must be (B, Hk, Nk, D) with q's batch ", B, " and head_dim ", D, ", got ", k.sym_sizes());
    heads_rule(ATTENTION, q, k);
    // The kernels index tasks and rows with 32-bit integers (backward tasks of 64 keys at the least).
    check_input(B < (int64_t(1) << 31) && Hq < (int64_t(1) << 31) && Nq < tk_attention::MAX_SEQ_LEN &&
                    Nk < tk_attention::MAX_SEQ_LEN && B * Hq * ((Nq + 127) / 64) < (int64_t(1) << 31) &&
                    B * Hk * ((Nk + 63) / 64) < (int64_t(1) << 31),
                ATTENTION, ": problem too large");
    return scale_rule(ATTENTION, scale, D);
}

// The masking options: window sides -1 (unlimited) or >= 0, softcap 0 (none) or > 0. Returns the kernels' band:
// causal sets the right side to 0, as in FlashAttention.
tk_attention::band band_rules(bool causal, int64_t window_left, int64_t window_right, double softcap) {
    check_input(window_left >= -1 && window_right >= -1, ATTENTION,
                ": window must be (left, right) with each side -1 (unlimited) or a number of keys >= 0, got (",
                window_left, ", ", window_right, ")");
    check_input(std::isfinite(softcap) && softcap >= 0, ATTENTION,
                ": softcap must be 0 (none) or a positive number, got ", softcap);
    const auto side = [](int64_t w) {
        return w < 0 ? tk_attention::WINDOW_UNLIMITED : int(std::min<int64_t>(w, tk_attention::WINDOW_UNLIMITED));
    };
    return {side(window_left), causal ? 0 : side(window_right)};
}

// What a backward takes from its forward in either layout: the saved O and the incoming dO with q's dtype and shape,
// and the LSE in float32 (its shape is each layout's own).
void saved_rules(const char *op, const at::Tensor &q, const at::Tensor &o, const at::Tensor &dout,
                 const at::Tensor &lse) {
    for (const named_tensor &t : {named_tensor{"o", o}, named_tensor{"dout", dout}}) {
        check_dtype(t.tensor.scalar_type() == q.scalar_type(), op, ": ", t.name, " must have q's dtype ",
                    q.scalar_type(), ", got ", t.tensor.scalar_type());
        check_input(t.tensor.sym_sizes() == q.sym_sizes(), op, ": ", t.name, " must have q's shape ", q.sym_sizes(),
                    ", got ", t.tensor.sym_sizes());
    }
    check_dtype(lse.scalar_type() == at::kFloat, op, ": lse must be float32, as the forward returns it, got ",
                lse.scalar_type());
}

// The forward's saved O, the incoming dO and the LSE, as the forward gave them.
void backward_rules(const at::Tensor &q, const at::Tensor &o, const at::Tensor &dout, const at::Tensor &lse) {
    saved_rules(BACKWARD, q, o, dout, lse);
    check_input(lse.dim() == 3 && lse.sym_size(0) == q.sym_size(0) && lse.sym_size(1) == q.sym_size(1) &&
                    lse.sym_size(2) == q.sym_size(2),
                BACKWARD, ": lse must be (B, Hq, Nq) = ", q.sym_sizes().slice(0, 3), ", as the forward returns it, got ",
                lse.sym_sizes());
}

// Offsets in host memory: 0 first, never decreasing, the last within the packed rows. (Not for tensor subclasses such
// as torch.compile's fake tensors, which have no values to read.)
void host_offsets_rules(const at::Tensor &cu, const char *name, const c10::SymInt &rows) {
    if (!cu.device().is_cpu() || cu.key_set().has(c10::DispatchKey::Python) || cu.scalar_type() != at::kInt ||
        cu.dim() != 1 || cu.size(0) < 1)
        return;
    const at::Tensor c = cu.contiguous();
    const int *x = c.data_ptr<int>();
    check_input(x[0] == 0, VARLEN, ": ", name, " must start at 0, got ", x[0]);
    for (int64_t i = 1; i < c.size(0); i++)
        check_input(x[i] >= x[i - 1], VARLEN, ": ", name, " must not decrease (document lengths >= 0), got ", x[i - 1],
                    " then ", x[i], " at index ", i);
    check_input(rows >= x[c.size(0) - 1], VARLEN, ": ", name, " ends at ", x[c.size(0) - 1],
                ", past the packed tensor's ", rows, " rows");
}

// Offsets live on q's GPU or in host memory (checked there, then copied): a device error like check_devices' else.
void check_offsets_device(const at::Tensor &cu, const char *name, const at::Tensor &q) {
    if (cu.device().is_cpu() || cu.device() == q.device()) return;
    throw c10::ValueError(message(VARLEN, ": ", NOT_ON_ONE_GPU, " of one GPU, but ", name, " is on ", cu.device(),
                                  " and q on ", q.device(), " (offsets may also be in host memory)"));
}

// Packed documents: q (total_q, Hq, D), k and v (total_k, Hk, D) like flash_attn_varlen_func's, cu_seqlens_q and
// cu_seqlens_k int32 (docs + 1) offsets; returns the softmax scale. Offsets in host memory are checked here; the
// kernels clamp any offsets into the tensors (attention.h's varlen_layout), so no value can reach outside them.
double varlen_rules(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const at::Tensor &cu_q,
                    const at::Tensor &cu_k, int64_t max_seqlen_q, int64_t max_seqlen_k, std::optional<double> scale) {
    const int64_t D = qkv_tensor_rules(VARLEN, q, k, v, 3,
                                       "3-D (total_tokens, heads, head_dim) like flash_attn_varlen_func's");
    check_input(k.sym_size(2) == D, VARLEN, ": k and v must have q's head_dim ", D, ", got ", k.sym_sizes());
    heads_rule(VARLEN, q, k);
    const c10::SymInt &Hq = q.sym_size(1), &Hk = k.sym_size(1);
    for (const named_tensor &t : {named_tensor{"cu_seqlens_q", cu_q}, named_tensor{"cu_seqlens_k", cu_k}}) {
        check_dtype(t.tensor.scalar_type() == at::kInt, VARLEN, ": ", t.name, " must be int32 (torch.int32), got ",
                    t.tensor.scalar_type());
        check_input(t.tensor.dim() == 1 && t.tensor.sym_size(0) >= 1, VARLEN, ": ", t.name,
                    " must be 1-D with (documents + 1) offsets, got shape ", t.tensor.sym_sizes());
    }
    check_input(cu_q.sym_size(0) == cu_k.sym_size(0), VARLEN,
                ": cu_seqlens_q and cu_seqlens_k must list the same documents, got ", cu_q.sym_size(0), " and ",
                cu_k.sym_size(0), " offsets");
    check_input(max_seqlen_q >= 0 && max_seqlen_k >= 0, VARLEN, ": max_seqlen_q and max_seqlen_k must be >= 0, got ",
                max_seqlen_q, " and ", max_seqlen_k);
    // Offsets in host memory cost nothing to read: their values are checked here (the kernels then get a copy).
    // Offsets on the GPU are not read (that would wait for it); the kernels clamp them into the tensors.
    host_offsets_rules(cu_q, "cu_seqlens_q", q.sym_size(0));
    host_offsets_rules(cu_k, "cu_seqlens_k", k.sym_size(0));
    // Tasks and padded rows are counted in 32-bit integers: per head at most a block of 64 rows or keys per 64 and
    // one more per document (the two trailing ones included), and the backward's rows a 128-row block per document.
    const c10::SymInt documents = cu_q.sym_size(0) + 1, Tq = q.sym_size(0), Tk = k.sym_size(0);
    const int64_t limit = int64_t(1) << 31;
    check_input(Tq < tk_attention::MAX_SEQ_LEN && Tk < tk_attention::MAX_SEQ_LEN &&
                    Hq * ((Tq + 63) / 64 + documents) < limit && Hk * ((Tk + 63) / 64 + documents) < limit &&
                    (Tq + 127) / 128 * 128 + documents * tk_attention::BWD_ROW_PAD < limit,
                VARLEN, ": problem too large");
    return scale_rule(VARLEN, scale, D);
}

// The varlen forward's saved O, the incoming dO and the LSE (Hq, total_q), as the forward gave them.
void varlen_backward_rules(const at::Tensor &q, const at::Tensor &o, const at::Tensor &dout, const at::Tensor &lse) {
    saved_rules(VARLEN_BACKWARD, q, o, dout, lse);
    check_input(lse.dim() == 2 && lse.sym_size(0) == q.sym_size(1) && lse.sym_size(1) == q.sym_size(0),
                VARLEN_BACKWARD, ": lse must be (Hq, total_q) = (", q.sym_size(1), ", ", q.sym_size(0),
                "), as the forward returns it, got ", lse.sym_sizes());
}

// A packed (total, heads, D) tensor as the kernels' (1, heads, total, D) view.
at::Tensor packed_view(const at::Tensor &t) { return t.unsqueeze(0).transpose(1, 2); }

at::Tensor empty_lse(const at::Tensor &q) {
    if (q.is_cuda()) return at::detail::empty_cuda({q.size(0), q.size(1), q.size(2)}, at::kFloat, q.device(), std::nullopt);
    return at::empty_symint({q.sym_size(0), q.sym_size(1), q.sym_size(2)}, q.options().dtype(at::kFloat));
}

// ---------------------------------------------------------------- CUDA

// The fields the forward and backward problems share: q, k, v as the kernels read them, and the sizes.
template <typename Problem>
void describe_inputs(Problem &p, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, tk_attention::band window,
                     double scale, double softcap) {
    p.q = view_of(q);
    p.k = view_of(k);
    p.v = view_of(v);
    p.batch = int(q.size(0));
    p.q_heads = int(q.size(1));
    p.kv_heads = int(k.size(1));
    p.q_len = int(q.size(2));
    p.kv_len = int(k.size(2));
    p.head_dim = int(q.size(3));
    p.window = window;
    p.scale = float(scale);
    p.softcap = float(softcap);
    p.type = dtype_of(q.scalar_type());
}

std::tuple<at::Tensor, at::Tensor> attention_fwd_cuda(const at::Tensor &q_in, const at::Tensor &k_in,
                                                      const at::Tensor &v_in, bool causal, std::optional<double> scale_in,
                                                      int64_t window_left, int64_t window_right, double softcap) {
    double scale = qkv_rules(q_in, k_in, v_in, scale_in);
    const tk_attention::band window = band_rules(causal, window_left, window_right, softcap);
    check_devices(ATTENTION, {{"q", q_in}, {"k", k_in}, {"v", v_in}});
    const int64_t B = q_in.size(0), Hq = q_in.size(1), Nq = q_in.size(2), Nk = k_in.size(2);

    const c10::cuda::CUDAGuard guard(q_in.device());
    at::Tensor o = empty_like_order(q_in, q_in.scalar_type());
    at::Tensor lse = empty_lse(q_in);
    if (B == 0 || Hq == 0 || Nq == 0) return {o, lse};
    if (Nk == 0) { // no key at all: every row sees nothing
        o.zero_();
        lse.fill_(-std::numeric_limits<float>::infinity());
        return {o, lse};
    }
    const at::Tensor q = tma_readable_copy(tk_attention::with_positive_scale(q_in, scale)), k = tma_readable_copy(k_in),
                     v = tma_readable_copy(v_in);

    tk_attention::fwd_problem p{};
    describe_inputs(p, q, k, v, window, scale, softcap);
    p.o = out_of(o);
    p.lse = lse.data_ptr<float>();
    const at::Tensor counter = task_counter(q_in.device());
    p.task_counter = counter.data_ptr<int>();
    check_launch(tk_attention::forward(p, at::cuda::getCurrentCUDAStream()), "tk_ops.attention kernel");
    return {o, lse};
}

// The forward on packed documents: (O (total_q, Hq, D), LSE (Hq, total_q)), as flash_attn_varlen_func returns them.
std::tuple<at::Tensor, at::Tensor> attention_varlen_fwd_cuda(const at::Tensor &q_in, const at::Tensor &k_in,
                                                             const at::Tensor &v_in, const at::Tensor &cu_q,
                                                             const at::Tensor &cu_k, int64_t max_seqlen_q,
                                                             int64_t max_seqlen_k, bool causal,
                                                             std::optional<double> scale_in, int64_t window_left,
                                                             int64_t window_right, double softcap) {
    double scale = varlen_rules(q_in, k_in, v_in, cu_q, cu_k, max_seqlen_q, max_seqlen_k, scale_in);
    const tk_attention::band window = band_rules(causal, window_left, window_right, softcap);
    check_devices(VARLEN, {{"q", q_in}, {"k", k_in}, {"v", v_in}});
    check_offsets_device(cu_q, "cu_seqlens_q", q_in);
    check_offsets_device(cu_k, "cu_seqlens_k", q_in);
    const int64_t Tq = q_in.size(0), Hq = q_in.size(1), D = q_in.size(2), Tk = k_in.size(0);
    const int docs = int(cu_q.size(0) - 1);

    const c10::cuda::CUDAGuard guard(q_in.device());
    at::Tensor o = at::detail::empty_cuda({Tq, Hq, D}, q_in.scalar_type(), q_in.device(), std::nullopt);
    at::Tensor lse = at::detail::empty_cuda({Hq, Tq}, at::kFloat, q_in.device(), std::nullopt);
    if (Tq == 0 || Hq == 0) return {o, lse};
    if (Tk == 0) {
        o.zero_();
        lse.fill_(-std::numeric_limits<float>::infinity());
        return {o, lse};
    }
    const at::Tensor q = tma_readable_copy(packed_view(tk_attention::with_positive_scale(q_in, scale))),
                     k = tma_readable_copy(packed_view(k_in)), v = tma_readable_copy(packed_view(v_in));
    const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    // The forward's blocks of query rows (its key blocks are not used).
    const at::Tensor layout =
        tk_attention::document_layout(cu_q, cu_k, q_in, k_in, tk_attention::fwd_block_q(int(D)), 1, VARLEN);

    tk_attention::fwd_problem p{};
    describe_inputs(p, q, k, v, window, scale, softcap);
    at::Tensor o4 = packed_view(o);
    p.o = out_of(o4);
    p.lse = lse.data_ptr<float>();
    p.varlen = true;
    p.docs = tk_attention::varlen_layout_at(layout.data_ptr<int>(), docs);
    const at::Tensor counter = task_counter(q_in.device());
    p.task_counter = counter.data_ptr<int>();
    check_launch(tk_attention::forward(p, stream), "tk_ops.attention_varlen kernel");
    return {o, lse};
}

// Runs the backward kernels on (B, H, N, D) views the TMA reads (packed documents: p.varlen and p.docs set, batch 1)
// into dq, dk, dv (views of the outputs). All scratch in one allocation: the float buffers (each a multiple of 128
// floats, so every part stays 16-byte aligned), then the int scratch of the in-kernel dQ conversion.
void run_backward(tk_attention::bwd_problem &p, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                  const at::Tensor &o, const at::Tensor &dout, const at::Tensor &lse_in, tk_attention::band window,
                  double scale, double softcap, at::Tensor &dq, at::Tensor &dk, at::Tensor &dv, const char *what) {
    const bool lse_ok = lse_in.is_contiguous() && reinterpret_cast<uintptr_t>(lse_in.data_ptr()) % 16 == 0;
    const at::Tensor lse = lse_ok ? lse_in : lse_in.clone(at::MemoryFormat::Contiguous);
    describe_inputs(p, q, k, v, window, scale, softcap);
    const tk_attention::bwd_scratch_layout s = tk_attention::bwd_scratch(p);
    const at::Tensor scratch =
        at::detail::empty_cuda({2 * s.row_floats + s.dq_floats + s.ints}, at::kFloat, q.device(), std::nullopt);
    float *const floats = scratch.data_ptr<float>();
    p.o = view_of(o);
    p.dout = view_of(dout);
    p.lse = lse.data_ptr<float>();
    p.lse2 = floats;
    p.delta = floats + s.row_floats;
    p.dq_accum = floats + 2 * s.row_floats;
    p.sync = reinterpret_cast<int *>(floats + 2 * s.row_floats + s.dq_floats);
    p.dk = out_of(dk);
    p.dv = out_of(dv);
    p.dq = out_of(dq); // most of dQ is converted by the main kernel's last blocks (attention.h)
    const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    cudaError_t e = tk_attention::backward(p, stream);
    if (e == cudaSuccess) e = tk_attention::backward_convert_dq(p, out_of(dq), stream);
    check_launch(e, message(what, " kernel").c_str());
}

// dQ, dK, dV of attention_fwd(q, k, v, causal, scale) given O, dO and the LSE it returned. dK and dV have k's and v's
// shapes (summed over each kv head's query heads).
std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_bwd_cuda(const at::Tensor &q_in, const at::Tensor &k_in,
                                                                  const at::Tensor &v_in, const at::Tensor &o_in,
                                                                  const at::Tensor &dout_in, const at::Tensor &lse_in,
                                                                  bool causal, std::optional<double> scale_in,
                                                                  int64_t window_left, int64_t window_right,
                                                                  double softcap) {
    const double scale = qkv_rules(q_in, k_in, v_in, scale_in);
    const tk_attention::band window = band_rules(causal, window_left, window_right, softcap);
    backward_rules(q_in, o_in, dout_in, lse_in);
    check_devices(BACKWARD, {{"q", q_in}, {"k", k_in}, {"v", v_in}, {"o", o_in}, {"dout", dout_in}, {"lse", lse_in}});
    const int64_t B = q_in.size(0), Hq = q_in.size(1), Nq = q_in.size(2), Nk = k_in.size(2);

    const c10::cuda::CUDAGuard guard(q_in.device());
    at::Tensor dq = empty_like_order(q_in, q_in.scalar_type());
    at::Tensor dk = empty_like_order(k_in, k_in.scalar_type());
    at::Tensor dv = empty_like_order(v_in, v_in.scalar_type());
    if (B == 0 || Hq == 0 || Nq == 0 || Nk == 0) return {dq.zero_(), dk.zero_(), dv.zero_()}; // nothing to differentiate
    tk_attention::bwd_problem p{};
    run_backward(p, tma_readable_copy(q_in), tma_readable_copy(k_in), tma_readable_copy(v_in), tma_readable_copy(o_in),
                 tma_readable_copy(dout_in), lse_in, window, scale, softcap, dq, dk, dv, BACKWARD);
    return {dq, dk, dv};
}

// The backward on packed documents: (dQ, dK, dV) packed like q, k and v.
std::tuple<at::Tensor, at::Tensor, at::Tensor>
attention_varlen_bwd_cuda(const at::Tensor &q_in, const at::Tensor &k_in, const at::Tensor &v_in, const at::Tensor &o_in,
                          const at::Tensor &dout_in, const at::Tensor &lse_in, const at::Tensor &cu_q,
                          const at::Tensor &cu_k, int64_t max_seqlen_q, int64_t max_seqlen_k, bool causal,
                          std::optional<double> scale_in, int64_t window_left, int64_t window_right, double softcap) {
    const double scale = varlen_rules(q_in, k_in, v_in, cu_q, cu_k, max_seqlen_q, max_seqlen_k, scale_in);
    const tk_attention::band window = band_rules(causal, window_left, window_right, softcap);
    varlen_backward_rules(q_in, o_in, dout_in, lse_in);
    check_devices(VARLEN_BACKWARD, {{"q", q_in}, {"k", k_in}, {"v", v_in}, {"o", o_in}, {"dout", dout_in},
                                    {"lse", lse_in}});
    check_offsets_device(cu_q, "cu_seqlens_q", q_in);
    check_offsets_device(cu_k, "cu_seqlens_k", q_in);
    const c10::cuda::CUDAGuard guard(q_in.device());
    at::Tensor dq = at::empty_like(q_in, at::MemoryFormat::Contiguous);
    at::Tensor dk = at::empty_like(k_in, at::MemoryFormat::Contiguous);
    at::Tensor dv = at::empty_like(v_in, at::MemoryFormat::Contiguous);
    if (q_in.numel() == 0 || k_in.numel() == 0) return {dq.zero_(), dk.zero_(), dv.zero_()};
    const int docs = int(cu_q.size(0) - 1);
    // Query blocks pad the row buffers (BWD_ROW_PAD rows each); key blocks are the tasks.
    const at::Tensor layout = tk_attention::document_layout(cu_q, cu_k, q_in, k_in, tk_attention::BWD_ROW_PAD,
                                                            tk_attention::bwd_block_k(int(q_in.size(2))), VARLEN);
    tk_attention::bwd_problem p{};
    p.varlen = true;
    p.docs = tk_attention::varlen_layout_at(layout.data_ptr<int>(), docs);
    at::Tensor dq4 = packed_view(dq), dk4 = packed_view(dk), dv4 = packed_view(dv);
    const auto readable = [](const at::Tensor &t) { return tma_readable_copy(packed_view(t)); };
    run_backward(p, readable(q_in), readable(k_in), readable(v_in), readable(o_in), readable(dout_in), lse_in, window,
                 scale, softcap, dq4, dk4, dv4, VARLEN_BACKWARD);
    return {dq, dk, dv};
}

// ---------------------------------------------------------------- Meta (torch.compile's fake tensors)

std::tuple<at::Tensor, at::Tensor> attention_fwd_meta(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                                                      bool causal, std::optional<double> scale,
                                                      int64_t window_left, int64_t window_right, double softcap) {
    qkv_rules(q, k, v, scale);
    band_rules(causal, window_left, window_right, softcap);
    return {empty_like_order(q, q.scalar_type()), empty_lse(q)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_bwd_meta(const at::Tensor &q, const at::Tensor &k,
                                                                  const at::Tensor &v, const at::Tensor &o,
                                                                  const at::Tensor &dout, const at::Tensor &lse,
                                                                  bool causal, std::optional<double> scale,
                                                                  int64_t window_left, int64_t window_right,
                                                                  double softcap) {
    qkv_rules(q, k, v, scale);
    band_rules(causal, window_left, window_right, softcap);
    backward_rules(q, o, dout, lse);
    return {empty_like_order(q, q.scalar_type()), empty_like_order(k, k.scalar_type()),
            empty_like_order(v, v.scalar_type())};
}

std::tuple<at::Tensor, at::Tensor> attention_varlen_fwd_meta(const at::Tensor &q, const at::Tensor &k,
                                                             const at::Tensor &v, const at::Tensor &cu_q,
                                                             const at::Tensor &cu_k, int64_t max_seqlen_q,
                                                             int64_t max_seqlen_k, bool causal,
                                                             std::optional<double> scale, int64_t window_left,
                                                             int64_t window_right, double softcap) {
    varlen_rules(q, k, v, cu_q, cu_k, max_seqlen_q, max_seqlen_k, scale);
    band_rules(causal, window_left, window_right, softcap);
    return {at::empty_symint(q.sym_sizes(), q.options()),
            at::empty_symint({q.sym_size(1), q.sym_size(0)}, q.options().dtype(at::kFloat))};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor>
attention_varlen_bwd_meta(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const at::Tensor &o,
                          const at::Tensor &dout, const at::Tensor &lse, const at::Tensor &cu_q, const at::Tensor &cu_k,
                          int64_t max_seqlen_q, int64_t max_seqlen_k, bool causal, std::optional<double> scale,
                          int64_t window_left, int64_t window_right, double softcap) {
    varlen_rules(q, k, v, cu_q, cu_k, max_seqlen_q, max_seqlen_k, scale);
    band_rules(causal, window_left, window_right, softcap);
    varlen_backward_rules(q, o, dout, lse);
    return {at::empty_symint(q.sym_sizes(), q.options()), at::empty_symint(k.sym_sizes(), k.options()),
            at::empty_symint(v.sym_sizes(), v.options())};
}

// The head dimensions this build's kernels take, for modules that check their configuration when built.
std::vector<int64_t> attention_head_dims() {
    return {std::begin(tk_attention::HEAD_DIMS), std::end(tk_attention::HEAD_DIMS)};
}

} // namespace

TORCH_LIBRARY_FRAGMENT(tk_ops, m) {
    m.def("attention_fwd(Tensor q, Tensor k, Tensor v, bool causal=False, float? scale=None, int window_left=-1, "
          "int window_right=-1, float softcap=0.) -> (Tensor, Tensor)");
    m.def("attention_bwd(Tensor q, Tensor k, Tensor v, Tensor o, Tensor dout, Tensor lse, bool causal=False, "
          "float? scale=None, int window_left=-1, int window_right=-1, float softcap=0.) -> (Tensor dq, Tensor dk, Tensor dv)");
    m.def("attention_varlen_fwd(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "
          "int max_seqlen_q, int max_seqlen_k, bool causal=False, float? scale=None, int window_left=-1, "
          "int window_right=-1, float softcap=0.) -> (Tensor, Tensor)");
    m.def("attention_varlen_bwd(Tensor q, Tensor k, Tensor v, Tensor o, Tensor dout, Tensor lse, Tensor cu_seqlens_q, "
          "Tensor cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, bool causal=False, float? scale=None, "
          "int window_left=-1, int window_right=-1, float softcap=0.) -> (Tensor dq, Tensor dk, Tensor dv)");
    m.def("attention_head_dims() -> int[]", &attention_head_dims);
}

TORCH_LIBRARY_IMPL(tk_ops, CUDA, m) {
    m.impl("attention_fwd", &attention_fwd_cuda);
    m.impl("attention_bwd", &attention_bwd_cuda);
    m.impl("attention_varlen_fwd", &attention_varlen_fwd_cuda);
    m.impl("attention_varlen_bwd", &attention_varlen_bwd_cuda);
}

TORCH_LIBRARY_IMPL(tk_ops, Meta, m) {
    m.impl("attention_fwd", &attention_fwd_meta);
    m.impl("attention_bwd", &attention_bwd_meta);
    m.impl("attention_varlen_fwd", &attention_varlen_fwd_meta);
    m.impl("attention_varlen_bwd", &attention_varlen_bwd_meta);
}

TORCH_LIBRARY_IMPL(tk_ops, CPU, m) {
    m.impl("attention_fwd", tk_kernels::cpu_refusal());
    m.impl("attention_bwd", tk_kernels::cpu_refusal());
    m.impl("attention_varlen_fwd", tk_kernels::cpu_refusal());
    m.impl("attention_varlen_bwd", tk_kernels::cpu_refusal());
}
