// The FFT convolution ops as torch sees them (schemas, and their CUDA, Meta and CPU kernels):
//
//   fftconv_fwd(u, k, pregate, postgate, k_f) -> y          y = postgate * causal_conv(u * pregate, k)
//   fftconv_spectrum(k, n) -> k_f                            the filter's spectrum for sequences of length n
//                                                            (fftconv.h): rfft(k, L), or per filter block on the
//                                                            block path
//   fftconv_bwd(u, k, pregate, postgate, k_f, dy, output_mask) -> (du, dk, dpregate, dpostgate)
//                                                            the gradients of fftconv_fwd (fftconv_bwd.h)
//   fftconv_max_len() -> int                                 the longest sequence the ops take
//
// and, for tk_ops' own tests (python/tk_ops/_testing/fftconv.py), tk_ops_testing::fftconv_bwd_by_cufft: the cuFFT
// path's gradients at an explicit FFT size, on any device.
//
// fftconv_fwd takes the filter k or its spectrum k_f (exactly one); fftconv_bwd may take both (the forward's spectrum
// of k, passed along by the autograd function so that the backward's convolutions need not compute it again; k then
// only gives dk's taps) and computes each gradient only where output_mask (u, k, pregate, postgate) asks for it; the
// others, like those of absent inputs, are empty (0,) tensors. autograd.cpp calls fftconv_bwd as fftconv_fwd's
// autograd formula.
//
// The rules are functions below, one per op, shared by its kernels: the CUDA kernel checks them before anything reaches
// a kernel, the Meta kernel (torch.compile's fake tensors) checks them and shapes the outputs the same way, and the CPU
// kernel (common/cpu_refusal.h) runs the Meta kernel and then asks for CUDA tensors. A sequence's length picks the
// algorithm (fftconv_configs.cuh): the kernels on chip and on the block path (fftconv_convolve.cpp, fftconv_bwd.cpp),
// cuFFT past it (fftconv_cufft.cpp). The Python wrapper (python/tk_ops/fftconv.py) only calls these ops.
#include <ATen/ATen.h>
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "common/checks.h"
#include "common/cpu_refusal.h"
#include "fftconv.h"
#include "fftconv_bwd.h"
#include "fftconv_convolve.h"
#include "fftconv_cufft.h"
#include "fftconv_rules.h"

namespace tk_fftconv {

using namespace tk_kernels;
using opt_tensor = std::optional<at::Tensor>;

namespace {

constexpr const char *FFTCONV = "tk_ops.fftconv";
constexpr const char *SPECTRUM = "tk_ops.fftconv_spectrum";

// ---------------------------------------------------------------- the rules

// The sequence length n: from 1 to MAX_LEN. It picks the kernel, so a symbolic one is specialised here. Returns the
// FFT size.
int length_rule(const char *op, const c10::SymInt &n_sym, const char *what) {
    const int64_t n = n_sym.guard_int(__FILE__, __LINE__);
    check_input(n >= 1, op, ": ", what, " must be at least 1, got ", n);
    check_input(n <= MAX_LEN, op, ": ", what, " = ", n, " is longer than the longest sequence supported, ", MAX_LEN);
    return fft_size(n);
}

// The filter k: (H, Nk) with 1 <= Nk <= n, float32 (bfloat16 and float16 accepted); `heads` is u's H when known.
void filter_rules(const char *op, const at::Tensor &k, const c10::SymInt *heads, const c10::SymInt &n) {
    const at::ScalarType type = k.scalar_type();
    check_dtype(type == at::kFloat || type == at::kBFloat16 || type == at::kHalf, op,
                ": k must be float32 (or bfloat16 / float16), got ", type);
    if (heads) {
        check_input(k.dim() == 2 && k.sym_size(0) == *heads, op, ": k must be (H, Nk) with u's H = ", *heads,
                    " channels, got shape ", k.sym_sizes());
    } else {
        check_input(k.dim() == 2, op, ": k must be 2-D (H, Nk), got shape ", k.sym_sizes());
    }
    check_input(k.sym_size(1) >= 1 && k.sym_size(1) <= n, op, ": k's length Nk = ", k.sym_size(1),
                " must be between 1 and the sequence length N = ", n);
}

} // namespace

// fftconv_fwd's rules; returns the FFT size.
int fwd_rules(const at::Tensor &u, const at::Tensor &k, const at::Tensor &pregate, const at::Tensor &postgate,
              const at::Tensor &k_f) {
    const at::ScalarType type = u.scalar_type();
    check_dtype(type == at::kBFloat16 || type == at::kHalf, FFTCONV, ": u must be bfloat16 or float16, got ", type);
    check_input(u.dim() == 3, FFTCONV, ": u must be 3-D (batch, channels, seq_len), got shape ", u.sym_sizes());
    const c10::SymInt &H = u.sym_size(1), &N = u.sym_size(2);
    const int fft = length_rule(FFTCONV, N, "the sequence length N (u's last dimension)");
    for (const named_tensor &g : {named_tensor{"pregate", pregate}, named_tensor{"postgate", postgate}}) {
        if (!g.tensor.defined()) continue;
        check_dtype(g.tensor.scalar_type() == type, FFTCONV, ": ", g.name, " must have u's dtype ", type, ", got ",
                    g.tensor.scalar_type());
        check_input(g.tensor.sym_sizes() == u.sym_sizes(), FFTCONV, ": ", g.name, " must have u's shape ",
                    u.sym_sizes(), ", got ", g.tensor.sym_sizes());
    }
    check_input(k.defined() != k_f.defined(), FFTCONV, ": pass exactly one of the filter k and its spectrum k_f, got ",
                k.defined() ? "both" : "neither");
    if (k.defined()) {
        filter_rules(FFTCONV, k, &H, N);
    } else {
        check_dtype(k_f.scalar_type() == at::kComplexFloat, FFTCONV,
                    ": k_f must be complex64, as tk_ops.fftconv_spectrum returns it, got ", k_f.scalar_type());
        const int64_t bins = spectrum_len(fft);
        if (path_of(N.guard_int(__FILE__, __LINE__)) == path::blocks) {
            const int64_t blocks = blocks_of(N.guard_int(__FILE__, __LINE__));
            check_input(k_f.dim() == 3 && k_f.sym_size(0) == H && k_f.sym_size(1) >= 1 && k_f.sym_size(1) <= blocks &&
                            k_f.sym_size(2) == bins,
                        FFTCONV, ": k_f must be (H, J, ", bins, ") with H = ", H, " and 1 <= J <= ", blocks,
                        " for sequences of length N = ", N, " (filter blocks of ", BLOCK_LEN,
                        " taps), as tk_ops.fftconv_spectrum(k, N) returns it, got shape ", k_f.sym_sizes());
        } else {
            check_input(k_f.dim() == 2 && k_f.sym_size(0) == H && k_f.sym_size(1) == bins, FFTCONV,
                        ": k_f must be (H, L / 2 + 1) = (", H, ", ", bins, ") for sequences of length N = ", N,
                        " (FFT size L = ", fft, "), as tk_ops.fftconv_spectrum(k, N) returns it, got shape ",
                        k_f.sym_sizes());
        }
    }
    // The kernels index rows of u with 32-bit integers.
    check_input(u.sym_size(0) * H < (int64_t(1) << 31), FFTCONV, ": problem too large");
    return fft;
}

namespace {

// fftconv_spectrum's rules; returns the FFT size.
int spectrum_rules(const at::Tensor &k, int64_t n) {
    const int fft = length_rule(SPECTRUM, c10::SymInt(n), "the sequence length n");
    filter_rules(SPECTRUM, k, nullptr, c10::SymInt(n));
    check_input(k.sym_size(0) < (int64_t(1) << 31), SPECTRUM, ": problem too large");
    return fft;
}

// fftconv_bwd's rules: the forward's, then those of dy and the mask; returns the FFT size. Unlike the forward, the
// backward may take both k and k_f.
int bwd_rules(const at::Tensor &u, const at::Tensor &k, const at::Tensor &pregate, const at::Tensor &postgate,
              const at::Tensor &k_f, const at::Tensor &dy, const output_mask &mask) {
    const int fft = fwd_rules(u, k_f.defined() ? at::Tensor() : k, pregate, postgate, k_f);
    if (k.defined() && k_f.defined()) {
        const c10::SymInt heads = u.sym_size(1);
        filter_rules(FFTCONV, k, &heads, u.sym_size(2));
    }
    check_input(dy.sym_sizes() == u.sym_sizes() && dy.scalar_type() == u.scalar_type(), FFTCONV,
                ": the output's gradient must have u's shape ", u.sym_sizes(), " and dtype ", u.scalar_type(),
                ", got ", dy.sym_sizes(), " ", dy.scalar_type());
    check_input(!mask[DK] || k.defined(), FFTCONV,
                ": k_f, the filter's precomputed spectrum, gets no gradient; pass the filter k to train it");
    check_input(!mask[DPREGATE] || pregate.defined(), FFTCONV,
                ": pregate's gradient was asked for without a pregate");
    check_input(!mask[DPOSTGATE] || postgate.defined(), FFTCONV,
                ": postgate's gradient was asked for without a postgate");
    return fft;
}

// tk_ops_testing::fftconv_bwd_by_cufft's rules: the backward's, and an FFT size at which nothing wraps.
void bwd_by_cufft_rules(const at::Tensor &u, const at::Tensor &k, const at::Tensor &pregate,
                        const at::Tensor &postgate, const at::Tensor &dy, const output_mask &mask, int64_t fft) {
    bwd_rules(u, k, pregate, postgate, at::Tensor(), dy, mask);
    const c10::SymInt &N = u.sym_size(2);
    check_input(fft >= 2 * N, FFTCONV, ": the FFT size ", fft, " must be at least 2N = ", 2 * N);
}

// ---------------------------------------------------------------- outputs

at::Tensor empty_output(const at::Tensor &u) {
    if (u.is_cuda()) return at::detail::empty_cuda(u.sizes(), u.scalar_type(), u.device(), std::nullopt);
    return at::empty_symint(u.sym_sizes(), u.options().memory_format(at::MemoryFormat::Contiguous));
}

// The spectrum of a filter of `taps` taps for sequences of length n: (heads, L / 2 + 1), or on the block path
// (heads, blocks_of(taps), BLOCK_FFT / 2 + 1).
at::Tensor empty_spectrum(const at::Tensor &like, int64_t heads, int64_t taps, int64_t n, int fft) {
    std::vector<int64_t> shape{heads, spectrum_len(fft)};
    if (path_of(n) == path::blocks) shape.insert(shape.begin() + 1, blocks_of(taps));
    if (like.is_cuda()) return at::detail::empty_cuda(shape, at::kComplexFloat, like.device(), std::nullopt);
    return at::empty(shape, like.options().dtype(at::kComplexFloat));
}

// Whether the backward has nothing to compute: an empty batch, whose dk (no terms in its sum) is zero.
bool empty_batch(const at::Tensor &u, const output_mask &mask, gradients &out) {
    if (u.numel() != 0) return false;
    if (mask[DK]) out.dk.zero_();
    return true;
}

// ---------------------------------------------------------------- CUDA

// The filter's spectrum as the convolutions read it: the given k_f made dense (a lazy conj() view is data, not a flag
// the kernels would honour), or k's for sequences of length n, by the kernel or, past the block path, by cuFFT (whose
// FFT sizes the kernel does not cover).
at::Tensor spectrum_of(const at::Tensor &k, const at::Tensor &k_f, int64_t n, int fft) {
    if (k_f.defined()) return k_f.resolve_conj().contiguous();
    if (path_of(n) == path::cufft && k.size(0) > 0) return spectrum_by_cufft(k, fft);
    const at::Tensor spectrum = empty_spectrum(k, k.size(0), k.size(1), n, fft);
    spectrum_by_kernel(k, n, fft, spectrum);
    return spectrum;
}

at::Tensor spectrum_cuda(const at::Tensor &k, int64_t n) {
    const int fft = spectrum_rules(k, n);
    check_devices(SPECTRUM, {{"k", k}});
    const c10::cuda::CUDAGuard guard(k.device());
    return spectrum_of(k, at::Tensor(), n, fft);
}

at::Tensor fwd_cuda(const at::Tensor &u, const opt_tensor &k_opt, const opt_tensor &pregate_opt,
                    const opt_tensor &postgate_opt, const opt_tensor &k_f_opt) {
    const at::Tensor k = k_opt.value_or(at::Tensor()), k_f = k_f_opt.value_or(at::Tensor());
    const at::Tensor pregate = pregate_opt.value_or(at::Tensor()), postgate = postgate_opt.value_or(at::Tensor());
    const int fft = fwd_rules(u, k, pregate, postgate, k_f);
    check_devices(FFTCONV, {{"u", u}, {"k", k}, {"k_f", k_f}, {"pregate", pregate}, {"postgate", postgate}});
    const c10::cuda::CUDAGuard guard(u.device());
    if (u.numel() == 0) return empty_output(u);
    const int64_t n = u.size(2);
    const at::Tensor spectrum = spectrum_of(k, k_f, n, fft);
    if (path_of(n) == path::cufft) return convolve_by_cufft(u, pregate, postgate, spectrum, fft);
    return convolve_by_kernels(u, pregate, postgate, spectrum, fft, false);
}

grads_tuple bwd_cuda(const at::Tensor &u, const opt_tensor &k_opt, const opt_tensor &pregate_opt,
                     const opt_tensor &postgate_opt, const opt_tensor &k_f_opt, const at::Tensor &dy,
                     output_mask mask) {
    const at::Tensor k = k_opt.value_or(at::Tensor()), k_f = k_f_opt.value_or(at::Tensor());
    const at::Tensor pregate = pregate_opt.value_or(at::Tensor()), postgate = postgate_opt.value_or(at::Tensor());
    const int fft = bwd_rules(u, k, pregate, postgate, k_f, dy, mask);
    check_devices(FFTCONV, {{"u", u}, {"k", k}, {"k_f", k_f}, {"pregate", pregate}, {"postgate", postgate},
                            {"the output's gradient", dy}});
    const c10::cuda::CUDAGuard guard(u.device());
    gradients out(u, k, mask);
    if (empty_batch(u, mask, out)) return out.tuple();
    const int64_t n = u.size(2);
    // The filter's spectrum once for every convolution (dk needs none).
    const bool convolve = mask[DU] || mask[DPREGATE] || mask[DPOSTGATE];
    const at::Tensor spectrum = convolve ? spectrum_of(k, k_f, n, fft) : at::Tensor();
    if (path_of(n) == path::cufft) backward_by_cufft(u, pregate, postgate, spectrum, dy, mask, fft, out);
    else backward_by_kernels(u, pregate, postgate, spectrum, dy, mask, fft, out);
    return out.tuple();
}

// The cuFFT path's gradients at the FFT size `fft`, on the device of the tensors (CPU or CUDA).
grads_tuple bwd_by_cufft(const at::Tensor &u, const at::Tensor &k, const opt_tensor &pregate_opt,
                         const opt_tensor &postgate_opt, const at::Tensor &dy, output_mask mask, int64_t fft) {
    const at::Tensor pregate = pregate_opt.value_or(at::Tensor()), postgate = postgate_opt.value_or(at::Tensor());
    bwd_by_cufft_rules(u, k, pregate, postgate, dy, mask, fft);
    std::optional<c10::cuda::CUDAGuard> guard;
    if (u.is_cuda()) {
        check_devices(FFTCONV, {{"u", u}, {"k", k}, {"pregate", pregate}, {"postgate", postgate}, {"dy", dy}});
        guard.emplace(u.device());
    }
    gradients out(u, k, mask);
    if (empty_batch(u, mask, out)) return out.tuple();
    const bool convolve = mask[DU] || mask[DPREGATE] || mask[DPOSTGATE];
    backward_by_cufft(u, pregate, postgate, convolve ? spectrum_by_cufft(k, fft) : at::Tensor(), dy, mask, fft,
                      out);
    return out.tuple();
}

// ---------------------------------------------------------------- Meta (torch.compile's fake tensors)

at::Tensor fwd_meta(const at::Tensor &u, const opt_tensor &k, const opt_tensor &pregate, const opt_tensor &postgate,
                    const opt_tensor &k_f) {
    fwd_rules(u, k.value_or(at::Tensor()), pregate.value_or(at::Tensor()), postgate.value_or(at::Tensor()),
              k_f.value_or(at::Tensor()));
    return empty_output(u);
}

at::Tensor spectrum_meta(const at::Tensor &k, int64_t n) {
    const int fft = spectrum_rules(k, n);
    return empty_spectrum(k, k.sym_size(0).guard_int(__FILE__, __LINE__), k.sym_size(1).guard_int(__FILE__, __LINE__),
                          n, fft);
}

grads_tuple bwd_meta(const at::Tensor &u, const opt_tensor &k, const opt_tensor &pregate, const opt_tensor &postgate,
                     const opt_tensor &k_f, const at::Tensor &dy, output_mask mask) {
    const at::Tensor k_t = k.value_or(at::Tensor());
    bwd_rules(u, k_t, pregate.value_or(at::Tensor()), postgate.value_or(at::Tensor()), k_f.value_or(at::Tensor()), dy,
              mask);
    return gradients(u, k_t, mask).tuple();
}

grads_tuple bwd_by_cufft_meta(const at::Tensor &u, const at::Tensor &k, const opt_tensor &pregate,
                              const opt_tensor &postgate, const at::Tensor &dy, output_mask mask, int64_t fft) {
    bwd_by_cufft_rules(u, k, pregate.value_or(at::Tensor()), postgate.value_or(at::Tensor()), dy, mask, fft);
    return gradients(u, k, mask).tuple();
}

// The longest sequence the kernels take, for modules that check their configuration when built.
int64_t max_len() { return MAX_LEN; }

} // namespace
} // namespace tk_fftconv

TORCH_LIBRARY_FRAGMENT(tk_ops, m) {
    m.def("fftconv_fwd(Tensor u, Tensor? k, Tensor? pregate=None, Tensor? postgate=None, Tensor? k_f=None) -> Tensor");
    m.def("fftconv_spectrum(Tensor k, int n) -> Tensor");
    m.def("fftconv_bwd(Tensor u, Tensor? k, Tensor? pregate, Tensor? postgate, Tensor? k_f, Tensor dy, "
          "bool[4] output_mask) -> (Tensor du, Tensor dk, Tensor dpregate, Tensor dpostgate)");
    m.def("fftconv_max_len() -> int", &tk_fftconv::max_len);
}

TORCH_LIBRARY_FRAGMENT(tk_ops_testing, m) {
    m.def("fftconv_bwd_by_cufft(Tensor u, Tensor k, Tensor? pregate, Tensor? postgate, Tensor dy, bool[4] output_mask, "
          "int fft) -> (Tensor du, Tensor dk, Tensor dpregate, Tensor dpostgate)");
}

TORCH_LIBRARY_IMPL(tk_ops, CUDA, m) {
    m.impl("fftconv_fwd", &tk_fftconv::fwd_cuda);
    m.impl("fftconv_spectrum", &tk_fftconv::spectrum_cuda);
    m.impl("fftconv_bwd", &tk_fftconv::bwd_cuda);
}

TORCH_LIBRARY_IMPL(tk_ops, Meta, m) {
    m.impl("fftconv_fwd", &tk_fftconv::fwd_meta);
    m.impl("fftconv_spectrum", &tk_fftconv::spectrum_meta);
    m.impl("fftconv_bwd", &tk_fftconv::bwd_meta);
}

TORCH_LIBRARY_IMPL(tk_ops, CPU, m) {
    m.impl("fftconv_fwd", tk_kernels::cpu_refusal());
    m.impl("fftconv_spectrum", tk_kernels::cpu_refusal());
    m.impl("fftconv_bwd", tk_kernels::cpu_refusal());
}

TORCH_LIBRARY_IMPL(tk_ops_testing, CUDA, m) { m.impl("fftconv_bwd_by_cufft", &tk_fftconv::bwd_by_cufft); }
TORCH_LIBRARY_IMPL(tk_ops_testing, CPU, m) { m.impl("fftconv_bwd_by_cufft", &tk_fftconv::bwd_by_cufft); }
TORCH_LIBRARY_IMPL(tk_ops_testing, Meta, m) { m.impl("fftconv_bwd_by_cufft", &tk_fftconv::bwd_by_cufft_meta); }
