// The Based ops as torch sees them (schemas, and their CUDA, Meta and CPU kernels; the autograd of based_fwd is in
// autograd.cpp):
//
//   based_fwd(q, k, v, scale, normalize, eps, kv0, k_sum0, output_final_state, save_den) -> (o, kv, k_sum, den)
//   based_bwd(q, k, v, o, d_o, den, scale, normalize, eps, kv0, k_sum0, d_kv, d_k_sum, initial_state_grad)
//       -> (dq, dk, dv, d_kv0, d_k_sum0)
//   based_step(q, k, v, kv!, k_sum!, scale, normalize, eps) -> o          (the state updated in place)
//   based_value_dims() -> int[]                                           (what the build takes)
//
// and, for tk_ops' own tests and tools (python/tk_ops/_testing/based.py), tk_ops_testing::based_fwd and based_bwd:
// the same ops with one more argument, `algorithm` ("auto", "chunked" or "quadratic"), the kernels to run where the
// public ops choose by shape (based_configs.cuh).
//
// An output that was not asked for (the final state without output_final_state, den without save_den, the initial
// state's gradient without initial_state_grad) is an empty (0,) float32 tensor: a schema's outputs are always
// tensors, and their shapes must follow from the arguments alone for torch.compile's fake tensors.
//
// The rules are functions below, shared by the ops' three kernels: the CUDA kernel checks them before anything
// reaches a kernel, the Meta kernel (torch.compile's fake tensors) checks them and lays the outputs out the same way,
// and the CPU kernel (common/cpu_refusal.h) runs the Meta kernel and then asks for CUDA tensors. The Python wrappers
// (python/tk_ops/based.py) only call these ops.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "based.h"
#include "common/bhnd_tensors.h"
#include "common/checks.h"
#include "common/cpu_refusal.h"
#include "common/task_counter.h"

namespace {

using namespace tk_kernels;

constexpr const char *BASED = "tk_ops.based";
constexpr const char *BACKWARD = "tk_ops.based backward";
constexpr const char *STEP = "tk_ops.based_step";
constexpr const char *TESTING_FWD = "tk_ops_testing.based_fwd";
constexpr const char *TESTING_BWD = "tk_ops_testing.based_bwd";
constexpr int64_t F = tk_based::STATE_FEATURES;

using opt_tensor = std::optional<at::Tensor>;

// ---------------------------------------------------------------- the rules

// The inputs' dtypes: bf16 or fp16, one for all.
void dtype_rules(const char *op, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v) {
    for (const named_tensor &t : {named_tensor{"q", q}, named_tensor{"k", k}, named_tensor{"v", v}}) {
        const at::ScalarType type = t.tensor.scalar_type();
        check_dtype(type == at::kBFloat16 || type == at::kHalf, op, ": ", t.name, " must be bfloat16 or float16, got ",
                    type);
    }
    check_dtype(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(), op,
                ": q, k, v must share one dtype, got ", q.scalar_type(), ", ", k.scalar_type(), ", ", v.scalar_type());
}

// The feature dimension (q's and k's last) and the value dimension (v's last); they pick the kernel, so symbolic ones
// are specialised here. Returns Dv.
int64_t dim_rules(const char *op, const c10::SymInt &feature_dim, const c10::SymInt &value_dim) {
    const int64_t dk = feature_dim.guard_int(__FILE__, __LINE__);
    check_input(dk == tk_based::FEATURE_DIM, op, ": the feature dimension of q and k (their last) must be ",
                tk_based::FEATURE_DIM, " (the Taylor feature map's 273 features are built for it), got ", dk);
    const int64_t dv = value_dim.guard_int(__FILE__, __LINE__);
    check_input(tk_based::supported_value_dim(int(dv)), op,
                ": the value dimension of v (its last) must be a multiple of 16 from 16 to ", tk_based::MAX_VALUE_DIM,
                ", got ", dv);
    return dv;
}

// scale (default Dk^-1/2) and eps.
double scalar_rules(const char *op, std::optional<double> scale, double eps) {
    check_input(std::isfinite(eps) && eps >= 0, op, ": eps must be a finite number >= 0, got ", eps);
    if (!scale) return 1.0 / std::sqrt(double(tk_based::FEATURE_DIM));
    check_input(std::isfinite(*scale), op, ": scale must be a finite number or None, got ", *scale);
    return *scale;
}

// q, k (B, H, N, 16) and v (B, H, N, Dv).
void qkv_rules(const char *op, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v) {
    dtype_rules(op, q, k, v);
    for (const named_tensor &t : {named_tensor{"q", q}, named_tensor{"k", k}, named_tensor{"v", v}})
        check_input(t.tensor.dim() == 4, op, ": ", t.name, " must be 4-D (batch, heads, seq_len, dim), got shape ",
                    t.tensor.sym_sizes());
    check_input(k.sym_sizes() == q.sym_sizes(), op, ": q and k must have the same shape, got ", q.sym_sizes(), " and ",
                k.sym_sizes());
    check_input(v.sym_size(0) == q.sym_size(0) && v.sym_size(1) == q.sym_size(1) && v.sym_size(2) == q.sym_size(2), op,
                ": v must be (B, H, N, Dv) with q's (B, H, N) = ", q.sym_sizes().slice(0, 3), ", got ", v.sym_sizes());
    dim_rules(op, q.sym_size(3), v.sym_size(3));
    // The kernels index tasks and rows with 32-bit integers.
    check_input(q.sym_size(0) * q.sym_size(1) < (int64_t(1) << 31) && q.sym_size(2) < (int64_t(1) << 30), op,
                ": problem too large");
}

// A recurrent state (kv, k_sum) for B sequences of H heads and value dimension Dv, in the one layout every op of the
// family exchanges (based.h): kv (B, H, Dv, 273) and k_sum (B, H, 273), float32, contiguous. `what` names the pair in
// messages ("initial_state", "state"). Both or neither: an absent state is two undefined tensors.
void state_rules(const char *op, const char *what, const at::Tensor &kv, const at::Tensor &k_sum, const c10::SymInt &B,
                 const c10::SymInt &H, const c10::SymInt &Dv) {
    check_input(kv.defined() == k_sum.defined(), op, ": ", what,
                " must be both tensors (kv, k_sum) or neither, got only ", kv.defined() ? "kv" : "k_sum");
    if (!kv.defined()) return;
    for (const named_tensor &t : {named_tensor{"kv", kv}, named_tensor{"k_sum", k_sum}})
        check_dtype(t.tensor.scalar_type() == at::kFloat, op, ": ", what, " ", t.name,
                    " must be float32 (the state is kept in fp32), got ", t.tensor.scalar_type());
    const std::vector<c10::SymInt> kv_shape = {B, H, Dv, c10::SymInt(F)}, k_sum_shape = {B, H, c10::SymInt(F)};
    check_input(kv.sym_sizes() == c10::SymIntArrayRef(kv_shape), op, ": ", what, " kv must be (B, H, Dv, 273) = ",
                c10::SymIntArrayRef(kv_shape), ", got ", kv.sym_sizes());
    check_input(k_sum.sym_sizes() == c10::SymIntArrayRef(k_sum_shape), op, ": ", what,
                " k_sum must be (B, H, 273) = ", c10::SymIntArrayRef(k_sum_shape), ", got ", k_sum.sym_sizes());
    for (const named_tensor &t : {named_tensor{"kv", kv}, named_tensor{"k_sum", k_sum}})
        check_input(t.tensor.is_contiguous(), op, ": ", what, " ", t.name,
                    " must be contiguous (the kernels walk the state as one dense block); pass .contiguous()");
}

// based_fwd's rules; returns the query scale.
double fwd_rules(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, std::optional<double> scale,
                 double eps, const at::Tensor &kv0, const at::Tensor &k_sum0) {
    qkv_rules(BASED, q, k, v);
    state_rules(BASED, "initial_state", kv0, k_sum0, q.sym_size(0), q.sym_size(1), v.sym_size(3));
    return scalar_rules(BASED, scale, eps);
}

// based_bwd's rules: the forward's, then its saved tensors and the incoming gradients as the forward gave them.
double bwd_rules(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const at::Tensor &o,
                 const at::Tensor &d_o, const at::Tensor &den, std::optional<double> scale, bool normalize, double eps,
                 const at::Tensor &kv0, const at::Tensor &k_sum0, const at::Tensor &d_kv, const at::Tensor &d_k_sum,
                 bool initial_state_grad) {
    qkv_rules(BACKWARD, q, k, v);
    for (const named_tensor &t : {named_tensor{"o", o}, named_tensor{"d_o", d_o}}) {
        check_dtype(t.tensor.scalar_type() == v.scalar_type(), BACKWARD, ": ", t.name, " must have v's dtype ",
                    v.scalar_type(), ", got ", t.tensor.scalar_type());
        check_input(t.tensor.sym_sizes() == v.sym_sizes(), BACKWARD, ": ", t.name, " must have v's shape ",
                    v.sym_sizes(), ", got ", t.tensor.sym_sizes());
    }
    if (normalize) {
        check_input(den.defined(), BACKWARD, ": den (the forward's, save_den=True) is needed when normalize is set");
        check_dtype(den.scalar_type() == at::kFloat, BACKWARD, ": den must be float32, as the forward returns it, got ",
                    den.scalar_type());
        check_input(den.sym_sizes() == q.sym_sizes().slice(0, 3), BACKWARD, ": den must be (B, H, N) = ",
                    q.sym_sizes().slice(0, 3), ", as the forward returns it, got ", den.sym_sizes());
    }
    const c10::SymInt &B = q.sym_size(0), &H = q.sym_size(1), &Dv = v.sym_size(3);
    state_rules(BACKWARD, "initial_state", kv0, k_sum0, B, H, Dv);
    state_rules(BACKWARD, "the final state's gradient", d_kv, d_k_sum, B, H, Dv);
    check_input(!initial_state_grad || kv0.defined(), BACKWARD,
                ": initial_state_grad needs the initial state (kv0, k_sum0)");
    return scalar_rules(BACKWARD, scale, eps);
}

// based_step's rules: q, k (B, H, 16) and v (B, H, Dv), or all three with a sequence axis of length one
// ((B, H, 1, 16), (B, H, 1, Dv)); the state (B, H, Dv, 273) and (B, H, 273). Returns the query scale.
double step_rules(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const at::Tensor &kv,
                  const at::Tensor &k_sum, std::optional<double> scale, double eps) {
    dtype_rules(STEP, q, k, v);
    const int64_t rank = q.dim();
    check_input(rank == 3 || rank == 4, STEP,
                ": q must be (batch, heads, 16) or (batch, heads, 1, 16) (one token per sequence), got shape ",
                q.sym_sizes());
    check_input(k.sym_sizes() == q.sym_sizes(), STEP, ": q and k must have the same shape, got ", q.sym_sizes(),
                " and ", k.sym_sizes());
    check_input(rank == 3 || q.sym_size(2) == 1, STEP,
                ": based_step takes one token per sequence: the sequence axis of q must have length 1, got shape ",
                q.sym_sizes(), "; use tk_ops.based for several tokens");
    check_input(v.dim() == rank && v.sym_sizes().slice(0, rank - 1) == q.sym_sizes().slice(0, rank - 1), STEP,
                ": v must be ", rank == 3 ? "(B, H, Dv)" : "(B, H, 1, Dv)", " with q's ", q.sym_sizes().slice(0, rank - 1),
                " in front, got ", v.sym_sizes());
    dim_rules(STEP, q.sym_size(-1), v.sym_size(-1));
    check_input(q.sym_size(0) * q.sym_size(1) < (int64_t(1) << 31), STEP, ": problem too large");
    check_input(kv.defined() && k_sum.defined(), STEP, ": the state (kv, k_sum) is required");
    state_rules(STEP, "state", kv, k_sum, q.sym_size(0), q.sym_size(1), v.sym_size(-1));
    return scalar_rules(STEP, scale, eps);
}

// The testing ops' algorithm: "auto" (the public ops' choice by shape), "chunked" or "quadratic". The quadratic
// kernels have no state, so forced they take none in or out (`state`: the call has one).
tk_based::algorithm_choice algorithm_rules(const char *op, std::string_view name, bool state) {
    using tk_based::algorithm_choice;
    if (name == "auto") return algorithm_choice::automatic;
    if (name == "chunked") return algorithm_choice::chunked;
    check_input(name == "quadratic", op, ": algorithm must be \"auto\", \"chunked\" or \"quadratic\", got \"",
                std::string(name), "\"");
    check_input(!state, op, ": algorithm \"quadratic\" takes no state in or out (the quadratic kernels have none)");
    return algorithm_choice::quadratic;
}

// ---------------------------------------------------------------- outputs

// An empty float32 tensor of `shape` on like's device: CUDA tensors come from the caching allocator directly, meta
// (fake) tensors keep symbolic sizes.
at::Tensor empty_f32(const at::Tensor &like, c10::SymIntArrayRef shape) {
    if (like.is_cuda()) return at::detail::empty_cuda(C10_AS_INTARRAYREF_SLOW(shape), at::kFloat, like.device(), std::nullopt);
    return at::empty_symint(shape, like.options().dtype(at::kFloat));
}

// The state of (B, H, Dv) when `wanted`, else (0,).
std::tuple<at::Tensor, at::Tensor> empty_state(const at::Tensor &q, const at::Tensor &v, bool wanted) {
    if (!wanted) return {empty_f32(q, {c10::SymInt(0)}), empty_f32(q, {c10::SymInt(0)})};
    const c10::SymInt &B = q.sym_size(0), &H = q.sym_size(1), &Dv = v.sym_size(3);
    return {empty_f32(q, {B, H, Dv, c10::SymInt(F)}), empty_f32(q, {B, H, c10::SymInt(F)})};
}

at::Tensor empty_den(const at::Tensor &q, bool wanted) {
    if (!wanted) return empty_f32(q, {c10::SymInt(0)});
    return empty_f32(q, q.sym_sizes().slice(0, 3));
}

// based_step's output: v's shape, contiguous.
at::Tensor empty_step_output(const at::Tensor &v) {
    if (v.is_cuda()) return at::detail::empty_cuda(v.sizes(), v.scalar_type(), v.device(), std::nullopt);
    return at::empty_symint(v.sym_sizes(), v.options());
}

// ---------------------------------------------------------------- CUDA

// A float32 tensor as the kernels read it: contiguous and 16-byte aligned; anything else (a view at an odd offset) is
// copied first. The outputs are fresh allocations and need no such care.
at::Tensor dense_f32(const at::Tensor &t) {
    if (!t.defined() || (t.is_contiguous() && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0)) return t;
    return t.clone(at::MemoryFormat::Contiguous);
}

const float *ptr_or_null(const at::Tensor &t) { return t.defined() ? t.data_ptr<float>() : nullptr; }
float *mut_ptr_or_null(at::Tensor &t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

// The fields the forward and backward problems share: the inputs, sizes and options, the initial state (kernel-readable
// or undefined) and the task counter (held by the caller until the launch).
template <typename Problem>
void describe(Problem &p, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const at::Tensor &kv0,
              const at::Tensor &k_sum0, const at::Tensor &counter, double scale, bool normalize, double eps,
              tk_based::algorithm_choice algorithm) {
    p.q = view_of(q);
    p.k = view_of(k);
    p.v = view_of(v);
    p.batch = int(q.size(0));
    p.heads = int(q.size(1));
    p.len = int(q.size(2));
    p.value_dim = int(v.size(3));
    p.scale = float(scale);
    p.normalize = normalize;
    p.eps = float(eps);
    p.type = dtype_of(q.scalar_type());
    p.kv0 = ptr_or_null(kv0);
    p.k_sum0 = ptr_or_null(k_sum0);
    p.task_counter = counter.data_ptr<int>();
    p.algorithm = algorithm;
}

// based_fwd's CUDA kernel, with the algorithm chosen by shape (the public op) or given (the testing op). An empty
// sequence reaches the entry point too, which writes the final state alone.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>
forward_cuda(const at::Tensor &q_in, const at::Tensor &k_in, const at::Tensor &v_in, double scale, bool normalize,
             double eps, const at::Tensor &kv0_in, const at::Tensor &k_sum0_in, bool output_final_state, bool save_den,
             tk_based::algorithm_choice algorithm) {
    check_devices(BASED, {{"q", q_in}, {"k", k_in}, {"v", v_in}, {"initial_state kv", kv0_in},
                          {"initial_state k_sum", k_sum0_in}});

    const c10::cuda::CUDAGuard guard(q_in.device());
    at::Tensor o = empty_like_order(v_in, v_in.scalar_type()); // v's memory order
    auto [kv, k_sum] = empty_state(q_in, v_in, output_final_state);
    at::Tensor den = empty_den(q_in, save_den);
    const at::Tensor q = tma_readable_copy(q_in), k = tma_readable_copy(k_in), v = tma_readable_copy(v_in);
    const at::Tensor kv0 = dense_f32(kv0_in), k_sum0 = dense_f32(k_sum0_in);
    const at::Tensor counter = task_counter(q_in.device());

    tk_based::fwd_problem p{};
    describe(p, q, k, v, kv0, k_sum0, counter, scale, normalize, eps, algorithm);
    p.o = out_of(o);
    if (output_final_state) {
        p.kv_final = kv.data_ptr<float>();
        p.k_sum_final = k_sum.data_ptr<float>();
    }
    if (save_den) p.den = den.data_ptr<float>();
    check_launch(tk_based::forward(p, at::cuda::getCurrentCUDAStream()), "tk_ops.based kernel");
    return {o, kv, k_sum, den};
}

// based_bwd's CUDA kernel, likewise (an empty sequence: the initial state's gradient alone).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
backward_cuda(const at::Tensor &q_in, const at::Tensor &k_in, const at::Tensor &v_in, const at::Tensor &o_in,
              const at::Tensor &d_o_in, const at::Tensor &den_in, double scale, bool normalize, double eps,
              const at::Tensor &kv0_in, const at::Tensor &k_sum0_in, const at::Tensor &d_kv_in,
              const at::Tensor &d_k_sum_in, bool initial_state_grad, tk_based::algorithm_choice algorithm) {
    check_devices(BACKWARD, {{"q", q_in}, {"k", k_in}, {"v", v_in}, {"o", o_in}, {"d_o", d_o_in}, {"den", den_in},
                             {"initial_state kv", kv0_in}, {"initial_state k_sum", k_sum0_in}, {"d_kv", d_kv_in},
                             {"d_k_sum", d_k_sum_in}});

    const c10::cuda::CUDAGuard guard(q_in.device());
    at::Tensor dq = empty_like_order(q_in, q_in.scalar_type());
    at::Tensor dk = empty_like_order(k_in, k_in.scalar_type());
    at::Tensor dv = empty_like_order(v_in, v_in.scalar_type());
    auto [d_kv0, d_k_sum0] = empty_state(q_in, v_in, initial_state_grad);
    const at::Tensor q = tma_readable_copy(q_in), k = tma_readable_copy(k_in), v = tma_readable_copy(v_in);
    const at::Tensor o = tma_readable_copy(o_in), d_o = tma_readable_copy(d_o_in);
    const at::Tensor den = normalize ? dense_f32(den_in) : at::Tensor();
    const at::Tensor kv0 = dense_f32(kv0_in), k_sum0 = dense_f32(k_sum0_in);
    const at::Tensor d_kv = dense_f32(d_kv_in), d_k_sum = dense_f32(d_k_sum_in);
    const at::Tensor counter = task_counter(q_in.device());

    tk_based::bwd_problem p{};
    describe(p, q, k, v, kv0, k_sum0, counter, scale, normalize, eps, algorithm);
    p.o = view_of(o);
    p.d_o = view_of(d_o);
    p.dq = out_of(dq);
    p.dk = out_of(dk);
    p.dv = out_of(dv);
    p.den = ptr_or_null(den);
    p.d_kv_final = ptr_or_null(d_kv);
    p.d_k_sum_final = ptr_or_null(d_k_sum);
    if (initial_state_grad) {
        p.d_kv0 = mut_ptr_or_null(d_kv0);
        p.d_k_sum0 = mut_ptr_or_null(d_k_sum0);
    }
    // The kernels' scratch from torch's caching allocator (blocks 512-byte aligned): reused across calls and owned by a
    // captured CUDA graph's pool like every other tensor, with no allocation call of its own on the stream. Its size
    // follows from the same problem (the algorithm included) that the launch reads.
    const size_t workspace_bytes = tk_based::backward_workspace_bytes(p);
    at::Tensor workspace;
    if (workspace_bytes > 0) {
        workspace = at::detail::empty_cuda({int64_t(workspace_bytes)}, at::kByte, q_in.device(), std::nullopt);
        p.workspace = workspace.data_ptr();
    }
    check_launch(tk_based::backward(p, at::cuda::getCurrentCUDAStream()), "tk_ops.based backward kernel");
    return {dq, dk, dv, d_kv0, d_k_sum0};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>
based_fwd_cuda(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, std::optional<double> scale,
               bool normalize, double eps, const opt_tensor &kv0_opt, const opt_tensor &k_sum0_opt,
               bool output_final_state, bool save_den) {
    const at::Tensor kv0 = kv0_opt.value_or(at::Tensor()), k_sum0 = k_sum0_opt.value_or(at::Tensor());
    const double s = fwd_rules(q, k, v, scale, eps, kv0, k_sum0);
    return forward_cuda(q, k, v, s, normalize, eps, kv0, k_sum0, output_final_state, save_den,
                        tk_based::algorithm_choice::automatic);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
based_bwd_cuda(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const at::Tensor &o,
               const at::Tensor &d_o, const opt_tensor &den_opt, std::optional<double> scale, bool normalize,
               double eps, const opt_tensor &kv0_opt, const opt_tensor &k_sum0_opt, const opt_tensor &d_kv_opt,
               const opt_tensor &d_k_sum_opt, bool initial_state_grad) {
    const at::Tensor den = den_opt.value_or(at::Tensor());
    const at::Tensor kv0 = kv0_opt.value_or(at::Tensor()), k_sum0 = k_sum0_opt.value_or(at::Tensor());
    const at::Tensor d_kv = d_kv_opt.value_or(at::Tensor()), d_k_sum = d_k_sum_opt.value_or(at::Tensor());
    const double s = bwd_rules(q, k, v, o, d_o, den, scale, normalize, eps, kv0, k_sum0, d_kv, d_k_sum,
                               initial_state_grad);
    return backward_cuda(q, k, v, o, d_o, den, s, normalize, eps, kv0, k_sum0, d_kv, d_k_sum, initial_state_grad,
                         tk_based::algorithm_choice::automatic);
}

tk_based::token3 token_of(const at::Tensor &t) {
    const int64_t d = t.dim() - 1; // (B, H, D) or (B, H, 1, D): the sequence axis has length one and no say
    return {t.data_ptr(), t.stride(0), t.stride(1), t.stride(d)};
}

at::Tensor based_step_cuda(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, at::Tensor &kv,
                           at::Tensor &k_sum, std::optional<double> scale_in, bool normalize, double eps) {
    const double scale = step_rules(q, k, v, kv, k_sum, scale_in, eps);
    check_devices(STEP, {{"q", q}, {"k", k}, {"v", v}, {"state kv", kv}, {"state k_sum", k_sum}});

    const c10::cuda::CUDAGuard guard(q.device());
    at::Tensor o = empty_step_output(v);
    if (o.numel() == 0) return o;
    tk_based::step_problem p{};
    p.q = token_of(q);
    p.k = token_of(k);
    p.v = token_of(v);
    p.o = o.data_ptr();
    p.kv = kv.data_ptr<float>();
    p.k_sum = k_sum.data_ptr<float>();
    p.batch = int(q.size(0));
    p.heads = int(q.size(1));
    p.value_dim = int(v.size(-1));
    p.scale = float(scale);
    p.normalize = normalize;
    p.eps = float(eps);
    p.type = dtype_of(q.scalar_type());
    check_launch(tk_based::step(p, at::cuda::getCurrentCUDAStream()), "tk_ops.based_step kernel");
    return o;
}

// The testing ops: the public ops' rules, then the algorithm's.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>
testing_fwd_cuda(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, std::optional<double> scale,
                 bool normalize, double eps, const opt_tensor &kv0_opt, const opt_tensor &k_sum0_opt,
                 bool output_final_state, bool save_den, std::string_view algorithm) {
    const at::Tensor kv0 = kv0_opt.value_or(at::Tensor()), k_sum0 = k_sum0_opt.value_or(at::Tensor());
    const double s = fwd_rules(q, k, v, scale, eps, kv0, k_sum0);
    const auto choice = algorithm_rules(TESTING_FWD, algorithm, kv0.defined() || output_final_state);
    return forward_cuda(q, k, v, s, normalize, eps, kv0, k_sum0, output_final_state, save_den, choice);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
testing_bwd_cuda(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const at::Tensor &o,
                 const at::Tensor &d_o, const opt_tensor &den_opt, std::optional<double> scale, bool normalize,
                 double eps, const opt_tensor &kv0_opt, const opt_tensor &k_sum0_opt, const opt_tensor &d_kv_opt,
                 const opt_tensor &d_k_sum_opt, bool initial_state_grad, std::string_view algorithm) {
    const at::Tensor den = den_opt.value_or(at::Tensor());
    const at::Tensor kv0 = kv0_opt.value_or(at::Tensor()), k_sum0 = k_sum0_opt.value_or(at::Tensor());
    const at::Tensor d_kv = d_kv_opt.value_or(at::Tensor()), d_k_sum = d_k_sum_opt.value_or(at::Tensor());
    const double s = bwd_rules(q, k, v, o, d_o, den, scale, normalize, eps, kv0, k_sum0, d_kv, d_k_sum,
                               initial_state_grad);
    const auto choice = algorithm_rules(TESTING_BWD, algorithm, kv0.defined() || d_kv.defined());
    return backward_cuda(q, k, v, o, d_o, den, s, normalize, eps, kv0, k_sum0, d_kv, d_k_sum, initial_state_grad,
                         choice);
}

// ---------------------------------------------------------------- Meta (torch.compile's fake tensors)

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>
based_fwd_meta(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, std::optional<double> scale,
               bool normalize, double eps, const opt_tensor &kv0, const opt_tensor &k_sum0, bool output_final_state,
               bool save_den) {
    fwd_rules(q, k, v, scale, eps, kv0.value_or(at::Tensor()), k_sum0.value_or(at::Tensor()));
    auto [kv, k_sum] = empty_state(q, v, output_final_state);
    return {empty_like_order(v, v.scalar_type()), kv, k_sum, empty_den(q, save_den)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
based_bwd_meta(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const at::Tensor &o,
               const at::Tensor &d_o, const opt_tensor &den, std::optional<double> scale, bool normalize, double eps,
               const opt_tensor &kv0, const opt_tensor &k_sum0, const opt_tensor &d_kv, const opt_tensor &d_k_sum,
               bool initial_state_grad) {
    bwd_rules(q, k, v, o, d_o, den.value_or(at::Tensor()), scale, normalize, eps, kv0.value_or(at::Tensor()),
              k_sum0.value_or(at::Tensor()), d_kv.value_or(at::Tensor()), d_k_sum.value_or(at::Tensor()),
              initial_state_grad);
    auto [d_kv0, d_k_sum0] = empty_state(q, v, initial_state_grad);
    return {empty_like_order(q, q.scalar_type()), empty_like_order(k, k.scalar_type()),
            empty_like_order(v, v.scalar_type()), d_kv0, d_k_sum0};
}

at::Tensor based_step_meta(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, at::Tensor &kv,
                           at::Tensor &k_sum, std::optional<double> scale, bool normalize, double eps) {
    step_rules(q, k, v, kv, k_sum, scale, eps);
    return empty_step_output(v);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>
testing_fwd_meta(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, std::optional<double> scale,
                 bool normalize, double eps, const opt_tensor &kv0, const opt_tensor &k_sum0, bool output_final_state,
                 bool save_den, std::string_view algorithm) {
    auto out = based_fwd_meta(q, k, v, scale, normalize, eps, kv0, k_sum0, output_final_state, save_den);
    algorithm_rules(TESTING_FWD, algorithm, (kv0 && kv0->defined()) || output_final_state);
    return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
testing_bwd_meta(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const at::Tensor &o,
                 const at::Tensor &d_o, const opt_tensor &den, std::optional<double> scale, bool normalize, double eps,
                 const opt_tensor &kv0, const opt_tensor &k_sum0, const opt_tensor &d_kv, const opt_tensor &d_k_sum,
                 bool initial_state_grad, std::string_view algorithm) {
    auto out = based_bwd_meta(q, k, v, o, d_o, den, scale, normalize, eps, kv0, k_sum0, d_kv, d_k_sum,
                              initial_state_grad);
    algorithm_rules(TESTING_BWD, algorithm, (kv0 && kv0->defined()) || (d_kv && d_kv->defined()));
    return out;
}

// ---------------------------------------------------------------- without tensors

// The value dimensions the kernels take, for modules that check their configuration when built.
std::vector<int64_t> based_value_dims() {
    std::vector<int64_t> dims;
    for (int d = 1; d <= tk_based::MAX_VALUE_DIM; d++)
        if (tk_based::supported_value_dim(d)) dims.push_back(d);
    return dims;
}

} // namespace

TORCH_LIBRARY_FRAGMENT(tk_ops, m) {
    m.def("based_fwd(Tensor q, Tensor k, Tensor v, float? scale=None, bool normalize=True, float eps=1e-06, "
          "Tensor? kv0=None, Tensor? k_sum0=None, bool output_final_state=False, bool save_den=False) "
          "-> (Tensor o, Tensor kv, Tensor k_sum, Tensor den)");
    m.def("based_bwd(Tensor q, Tensor k, Tensor v, Tensor o, Tensor d_o, Tensor? den, float? scale=None, "
          "bool normalize=True, float eps=1e-06, Tensor? kv0=None, Tensor? k_sum0=None, Tensor? d_kv=None, "
          "Tensor? d_k_sum=None, bool initial_state_grad=False) "
          "-> (Tensor dq, Tensor dk, Tensor dv, Tensor d_kv0, Tensor d_k_sum0)");
    m.def("based_step(Tensor q, Tensor k, Tensor v, Tensor(a!) kv, Tensor(b!) k_sum, float? scale=None, "
          "bool normalize=True, float eps=1e-06) -> Tensor");
    m.def("based_value_dims() -> int[]", &based_value_dims);
}

TORCH_LIBRARY_IMPL(tk_ops, CUDA, m) {
    m.impl("based_fwd", &based_fwd_cuda);
    m.impl("based_bwd", &based_bwd_cuda);
    m.impl("based_step", &based_step_cuda);
}

TORCH_LIBRARY_IMPL(tk_ops, Meta, m) {
    m.impl("based_fwd", &based_fwd_meta);
    m.impl("based_bwd", &based_bwd_meta);
    m.impl("based_step", &based_step_meta);
}

TORCH_LIBRARY_IMPL(tk_ops, CPU, m) {
    for (const char *op : {"based_fwd", "based_bwd", "based_step"}) m.impl(op, tk_kernels::cpu_refusal());
}

TORCH_LIBRARY_FRAGMENT(tk_ops_testing, m) {
    m.def("based_fwd(Tensor q, Tensor k, Tensor v, float? scale=None, bool normalize=True, float eps=1e-06, "
          "Tensor? kv0=None, Tensor? k_sum0=None, bool output_final_state=False, bool save_den=False, "
          "str algorithm=\"auto\") -> (Tensor o, Tensor kv, Tensor k_sum, Tensor den)");
    m.def("based_bwd(Tensor q, Tensor k, Tensor v, Tensor o, Tensor d_o, Tensor? den, float? scale=None, "
          "bool normalize=True, float eps=1e-06, Tensor? kv0=None, Tensor? k_sum0=None, Tensor? d_kv=None, "
          "Tensor? d_k_sum=None, bool initial_state_grad=False, str algorithm=\"auto\") "
          "-> (Tensor dq, Tensor dk, Tensor dv, Tensor d_kv0, Tensor d_k_sum0)");
}

TORCH_LIBRARY_IMPL(tk_ops_testing, CUDA, m) {
    m.impl("based_fwd", &testing_fwd_cuda);
    m.impl("based_bwd", &testing_bwd_cuda);
}

TORCH_LIBRARY_IMPL(tk_ops_testing, Meta, m) {
    m.impl("based_fwd", &testing_fwd_meta);
    m.impl("based_bwd", &testing_bwd_meta);
}

TORCH_LIBRARY_IMPL(tk_ops_testing, CPU, m) {
    for (const char *op : {"based_fwd", "based_bwd"}) m.impl(op, tk_kernels::cpu_refusal());
}
