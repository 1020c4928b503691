// The FFT convolution ops as torch sees them (schemas, and their CUDA, Meta and CPU kernels):
//
//   fftconv_fwd(u, k, pregate, postgate, k_f) -> y          y = postgate * causal_conv(u * pregate, k)
//   fftconv_spectrum(k, n) -> k_f                            the filter's spectrum for sequences of length n (fftconv.h):
//                                                            rfft(k, L), or per filter block on the block path
//
// The backward op, fftconv_bwd, is in bwd_binding.cpp and its autograd formula in autograd.cpp; binding.h names what
// they use of this file.
//
// fftconv_fwd takes the filter k or its spectrum k_f (exactly one). The rules are functions below, shared by the
// ops' three kernels: the CUDA kernel checks them before anything reaches a kernel, the Meta kernel (torch.compile's
// fake tensors) checks them and shapes the outputs the same way, and the CPU kernel checks them and then asks for
// CUDA tensors (see common/checks.h). The Python wrapper (python/tk_ops/fftconv.py) only calls these ops.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "binding.h"
#include "common/checks.h"
#include "fftconv.h"

// One named namespace, so that the functions binding.h declares are defined where they are; the rest is this file's.
namespace tk_fftconv_binding {

using namespace tk_kernels;

constexpr const char *SPECTRUM = "tk_ops.fftconv_spectrum";

// ---------------------------------------------------------------- the rules

// The sequence length n: from 1 to MAX_LEN. It picks the kernel, so a symbolic one is specialised here. Returns the
// FFT size.
int length_rule(const char *op, const c10::SymInt &n_sym, const char *what) {
    const int64_t n = n_sym.guard_int(__FILE__, __LINE__);
    check_input(n >= 1, op, ": ", what, " must be at least 1, got ", n);
    check_input(n <= tk_fftconv::MAX_LEN, op, ": ", what, " = ", n, " is longer than the longest sequence supported, ",
                tk_fftconv::MAX_LEN);
    return tk_fftconv::fft_size(n);
}

// Whether sequences of length n take the block path, or cuFFT past it (fftconv.h).
bool block_path(int64_t n) { return n > tk_fftconv::ONCHIP_LEN && n <= tk_fftconv::BLOCKS_LEN; }
bool cufft_path(int64_t n) { return n > tk_fftconv::BLOCKS_LEN; }

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
        const int64_t bins = tk_fftconv::spectrum_len(fft);
        if (block_path(N.guard_int(__FILE__, __LINE__))) {
            const int64_t blocks = tk_fftconv::blocks_of(N.guard_int(__FILE__, __LINE__));
            check_input(k_f.dim() == 3 && k_f.sym_size(0) == H && k_f.sym_size(1) >= 1 && k_f.sym_size(1) <= blocks &&
                            k_f.sym_size(2) == bins,
                        FFTCONV, ": k_f must be (H, J, ", bins, ") with H = ", H, " and 1 <= J <= ", blocks,
                        " for sequences of length N = ", N, " (filter blocks of ", tk_fftconv::BLOCK_LEN,
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

// fftconv_spectrum's rules; returns the FFT size.
int spectrum_rules(const at::Tensor &k, int64_t n) {
    const int fft = length_rule(SPECTRUM, c10::SymInt(n), "the sequence length n");
    filter_rules(SPECTRUM, k, nullptr, c10::SymInt(n));
    check_input(k.sym_size(0) < (int64_t(1) << 31), SPECTRUM, ": problem too large");
    return fft;
}

// ---------------------------------------------------------------- outputs

at::Tensor empty_output(const at::Tensor &u) {
    if (u.is_cuda()) return at::detail::empty_cuda(u.sizes(), u.scalar_type(), u.device(), std::nullopt);
    return at::empty_symint(u.sym_sizes(), u.options().memory_format(at::MemoryFormat::Contiguous));
}

// The spectrum of a filter of `taps` taps for sequences of length n: (heads, L / 2 + 1), or on the block path
// (heads, blocks_of(taps), BLOCK_FFT / 2 + 1).
at::Tensor empty_spectrum(const at::Tensor &like, const c10::SymInt &heads, int64_t taps, int64_t n, int fft) {
    const int64_t bins = tk_fftconv::spectrum_len(fft);
    std::vector<int64_t> shape{heads.guard_int(__FILE__, __LINE__), bins};
    if (block_path(n)) shape.insert(shape.begin() + 1, tk_fftconv::blocks_of(taps));
    if (like.is_cuda()) return at::detail::empty_cuda(shape, at::kComplexFloat, like.device(), std::nullopt);
    return at::empty(shape, like.options().dtype(at::kComplexFloat));
}

// ---------------------------------------------------------------- CUDA

void check_launch(cudaError_t e, const char *what) {
    if (e != cudaSuccess) throw c10::Error(message(what, " failed: ", cudaGetErrorString(e)));
}

// The kernels read dense rows.
at::Tensor dense(const at::Tensor &t) { return t.defined() ? t.contiguous() : t; }

tk_fftconv::dtype kernel_type(at::ScalarType t) {
    if (t == at::kBFloat16) return tk_fftconv::dtype::bf16;
    if (t == at::kHalf) return tk_fftconv::dtype::fp16;
    return tk_fftconv::dtype::fp32;
}

// The filter's spectrum (empty_spectrum's shape) in fp32 (k is checked): rfft(k, fft), or on the block path the rfft at
// fft points of each block of BLOCK_LEN taps (the last one zero-padded), by one kernel of ours that reads the taps as
// they are; past the block path by cuFFT, whose fft sizes it does not cover. It runs on H rows once per call, beside
// the B H / 2 pair transforms of the forward kernels.
at::Tensor compute_spectrum(const at::Tensor &k, int64_t n, int fft) {
    if (cufft_path(n) && k.size(0) > 0) return at::fft_rfft(k.to(at::kFloat), fft, -1).contiguous();
    at::Tensor k_f = empty_spectrum(k, k.sym_size(0), k.size(1), n, fft);
    if (k.size(0) == 0) return k_f;
    const bool blocks = block_path(n);
    const int64_t heads = k.size(0), taps = k.size(1), count = blocks ? tk_fftconv::blocks_of(taps) : 1;
    const tk_fftconv::spectrum_problem p{k.data_ptr(), k.stride(0), k.stride(1), kernel_type(k.scalar_type()),
                                         reinterpret_cast<float2 *>(k_f.data_ptr()), int(heads), int(taps), int(count),
                                         blocks ? tk_fftconv::BLOCK_LEN : fft / 2, fft};
    check_launch(tk_fftconv::filter_spectrum(p, at::cuda::getCurrentCUDAStream()),
                 "tk_ops.fftconv: computing the filter's spectrum");
    return k_f;
}

at::Tensor spectrum_cuda(const at::Tensor &k, int64_t n) {
    const int fft = spectrum_rules(k, n);
    check_devices(SPECTRUM, {{"k", k}});
    const c10::cuda::CUDAGuard guard(k.device());
    return compute_spectrum(k, n, fft);
}

// Past the block path, y = conv(u, k_f) by cuFFT in fp32 through ATen, with the kernels' contract (into y; `reversed`
// as convolve's, which the backward no longer needs there: bwd_by_cufft correlates in frequency).
void convolve_by_cufft(const at::Tensor &u, const at::Tensor &pregate, const at::Tensor &postgate,
                       const at::Tensor &k_f, int fft, bool reversed, at::Tensor &y) {
    at::Tensor v = pregate.defined() ? u.to(at::kFloat).mul_(pregate) : u.to(at::kFloat);
    if (reversed) v = v.flip(-1);
    at::Tensor spectrum = at::fft_rfft(v, fft, -1);
    v.reset();
    spectrum.mul_(k_f);
    at::Tensor out = at::fft_irfft(spectrum, fft, -1).narrow(-1, 0, u.size(2));
    spectrum.reset();
    if (reversed) out = out.flip(-1);
    if (postgate.defined()) out = out.mul_(postgate);
    y.copy_(out);
}

// y = conv(u, k_f) (gates applied) on the kernels; `reversed` reads and writes every row time-reversed. The arguments
// passed the rules.
at::Tensor convolve(const at::Tensor &u_in, const at::Tensor &pregate_in, const at::Tensor &postgate_in,
                    const at::Tensor &k_f, int fft, bool reversed) {
    at::Tensor y = empty_output(u_in);
    if (y.numel() == 0) return y;
    if (cufft_path(u_in.size(2))) {
        convolve_by_cufft(u_in, pregate_in, postgate_in, k_f, fft, reversed, y);
        return y;
    }
    const at::Tensor u = dense(u_in), pregate = dense(pregate_in), postgate = dense(postgate_in);
    const auto pointer = [](const at::Tensor &t) { return t.defined() ? t.data_ptr() : nullptr; };
    const int batch = int(u.size(0)), heads = int(u.size(1)), len = int(u.size(2));
    const tk_fftconv::dtype type = kernel_type(u.scalar_type());
    const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    if (block_path(len)) {
        const at::Tensor workspace = at::empty({int64_t(tk_fftconv::long_workspace_bytes(batch, heads, len))},
                                               u.options().dtype(at::kByte));
        const tk_fftconv::long_problem p{pointer(u), pointer(pregate), pointer(postgate),
                                         reinterpret_cast<const float2 *>(k_f.data_ptr()), y.data_ptr(),
                                         workspace.data_ptr(), batch, heads, len, int(k_f.size(1)), type, reversed};
        check_launch(tk_fftconv::long_forward(p, stream), "tk_ops.fftconv block kernels");
        return y;
    }
    const tk_fftconv::fwd_problem p{pointer(u), pointer(pregate), pointer(postgate),
                                    reinterpret_cast<const float2 *>(k_f.data_ptr()), y.data_ptr(), batch, heads, len,
                                    fft, type, reversed};
    check_launch(tk_fftconv::forward(p, stream), "tk_ops.fftconv kernel");
    return y;
}

at::Tensor fwd_cuda(const at::Tensor &u_in, const opt_tensor &k_opt, const opt_tensor &pregate_opt,
                    const opt_tensor &postgate_opt, const opt_tensor &k_f_opt) {
    const at::Tensor k = k_opt.value_or(at::Tensor()), k_f_in = k_f_opt.value_or(at::Tensor());
    const at::Tensor pregate_in = pregate_opt.value_or(at::Tensor()), postgate_in = postgate_opt.value_or(at::Tensor());
    const int fft = fwd_rules(u_in, k, pregate_in, postgate_in, k_f_in);
    check_devices(FFTCONV, {{"u", u_in}, {"k", k}, {"k_f", k_f_in}, {"pregate", pregate_in}, {"postgate", postgate_in}});
    const c10::cuda::CUDAGuard guard(u_in.device());
    if (u_in.numel() == 0) return empty_output(u_in);
    // A lazy conj() view is data, not a flag the kernels would honour.
    const at::Tensor k_f = k.defined() ? compute_spectrum(k, u_in.size(2), fft) : k_f_in.resolve_conj().contiguous();
    return convolve(u_in, pregate_in, postgate_in, k_f, fft, false);
}

at::Tensor reversed_conv_cuda(const at::Tensor &u, const opt_tensor &pregate, const at::Tensor &k_f) {
    const at::Tensor gate = pregate.value_or(at::Tensor());
    const int fft = fwd_rules(u, at::Tensor(), gate, at::Tensor(), k_f);
    const c10::cuda::CUDAGuard guard(u.device());
    return convolve(u, gate, at::Tensor(), k_f.resolve_conj().contiguous(), fft, true);
}

// ---------------------------------------------------------------- Meta (torch.compile's fake tensors)

at::Tensor fftconv_fwd_meta(const at::Tensor &u, const opt_tensor &k, const opt_tensor &pregate,
                            const opt_tensor &postgate, const opt_tensor &k_f) {
    fwd_rules(u, k.value_or(at::Tensor()), pregate.value_or(at::Tensor()), postgate.value_or(at::Tensor()),
              k_f.value_or(at::Tensor()));
    return empty_output(u);
}

at::Tensor fftconv_spectrum_meta(const at::Tensor &k, int64_t n) {
    const int fft = spectrum_rules(k, n);
    return empty_spectrum(k, k.sym_size(0), k.sym_size(1).guard_int(__FILE__, __LINE__), n, fft);
}

// ---------------------------------------------------------------- CPU: the op's rules, then the device rule

at::Tensor fftconv_fwd_cpu(const at::Tensor &u, const opt_tensor &k_opt, const opt_tensor &pregate_opt,
                           const opt_tensor &postgate_opt, const opt_tensor &k_f_opt) {
    const at::Tensor k = k_opt.value_or(at::Tensor()), k_f = k_f_opt.value_or(at::Tensor());
    const at::Tensor pregate = pregate_opt.value_or(at::Tensor()), postgate = postgate_opt.value_or(at::Tensor());
    fwd_rules(u, k, pregate, postgate, k_f);
    reject_cpu(FFTCONV, {{"u", u}, {"k", k}, {"k_f", k_f}, {"pregate", pregate}, {"postgate", postgate}});
}

at::Tensor fftconv_spectrum_cpu(const at::Tensor &k, int64_t n) {
    spectrum_rules(k, n);
    reject_cpu(SPECTRUM, {{"k", k}});
}

// The longest sequence the kernels take, for modules that check their configuration when built.
int64_t fftconv_max_len() { return tk_fftconv::MAX_LEN; }

} // namespace tk_fftconv_binding

using namespace tk_fftconv_binding;

TORCH_LIBRARY_FRAGMENT(tk_ops, m) {
    m.def("fftconv_fwd(Tensor u, Tensor? k, Tensor? pregate=None, Tensor? postgate=None, Tensor? k_f=None) -> Tensor");
    m.def("fftconv_spectrum(Tensor k, int n) -> Tensor");
    m.def("fftconv_max_len() -> int", &fftconv_max_len);
}

TORCH_LIBRARY_IMPL(tk_ops, CUDA, m) {
    m.impl("fftconv_fwd", &fwd_cuda);
    m.impl("fftconv_spectrum", &spectrum_cuda);
}

TORCH_LIBRARY_IMPL(tk_ops, Meta, m) {
    m.impl("fftconv_fwd", &fftconv_fwd_meta);
    m.impl("fftconv_spectrum", &fftconv_spectrum_meta);
}

TORCH_LIBRARY_IMPL(tk_ops, CPU, m) {
    m.impl("fftconv_fwd", &fftconv_fwd_cpu);
    m.impl("fftconv_spectrum", &fftconv_spectrum_cpu);
}
