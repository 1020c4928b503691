// The FFT convolution's backward op as torch sees it (its CUDA, Meta and CPU kernels):
//
//   fftconv_bwd(u, k, pregate, postgate, k_f, dy, output_mask) -> (du, dk, dpregate, dpostgate)
//
// the gradients of y = postgate * causal_conv(u * pregate, k) (binding.cpp) from the output's gradient dy, each
// computed only where output_mask (u, k, pregate, postgate) asks for it (k_f may come with k: the forward's spectrum of
// it, which the convolutions then use); the others, like those of absent inputs, are empty (0,) tensors (a schema's
// outputs are tensors). With g = dy * postgate and v = u * pregate
// (docs/fftconv.md, "Gradients" and "Backward"):
//
//   dv[n]  = sum_m k[m] g[n + m]   a correlation: the forward kernels on the time-reversed g, reversed back (they
//                                  read and write the rows backwards)
//   du     = dv * pregate,  dpregate = dv * u
//   dpostgate = dy * causal_conv(v, k)   the forward kernel with dy as its postgate
//   dk[m]  = sum_b sum_n g[n] v[n - m]   the filter-gradient kernels (on the CPU: ATen's FFTs, for the tests)
//
// Past the block path (N > 65536) all of them come from cuFFT, as the forward does there (bwd_by_cufft).
//
// The rules are the forward's (binding.h) and those of dy and the mask below; the CUDA, Meta and CPU kernels share
// them as the forward's do. The CUDA and CPU kernels share the composition too (the CPU one for its tests, below).
// autograd.cpp calls this op as the forward's autograd formula.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <array>
#include <cstdint>
#include <tuple>

#include "binding.h"
#include "common/checks.h"
#include "fftconv.h"

namespace {

using namespace tk_kernels;
using namespace tk_fftconv_binding;

using grads_tuple = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using output_mask = std::array<bool, 4>;

// The differentiable inputs in the order of output_mask and of the results.
constexpr int U = 0, K = 1, PRE = 2, POST = 3;

// ---------------------------------------------------------------- the rules

// fftconv_bwd's rules: the forward's, then those of dy and the mask; returns the FFT size.
// Unlike the forward, the backward may take both k and k_f: the forward's spectrum of k, passed along by the
// autograd function so that the backward's convolutions need not compute it again (k then only gives dk's taps).
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
    check_input(!mask[K] || k.defined(), FFTCONV,
                ": k_f, the filter's precomputed spectrum, gets no gradient; pass the filter k to train it");
    check_input(!mask[PRE] || pregate.defined(), FFTCONV, ": pregate's gradient was asked for without a pregate");
    check_input(!mask[POST] || postgate.defined(), FFTCONV, ": postgate's gradient was asked for without a postgate");
    return fft;
}

// ---------------------------------------------------------------- outputs

at::Tensor none_like(const at::Tensor &u) { return at::empty_symint({c10::SymInt(0)}, u.options().dtype(at::kFloat)); }

// Dense row-major gradients shaped like their inputs where asked for, (0,) elsewhere: the same on every device, so
// that torch.compile's fake tensors have the strides the CUDA kernel returns.
struct gradients {
    at::Tensor du, dk, dpregate, dpostgate;

    gradients(const at::Tensor &u, const at::Tensor &k, const output_mask &mask) {
        const auto like = [&](bool wanted, const at::Tensor &t) {
            return wanted ? at::empty_symint(t.sym_sizes(), t.options().memory_format(at::MemoryFormat::Contiguous))
                          : none_like(u);
        };
        du = like(mask[U], u);
        dk = like(mask[K], k);
        dpregate = like(mask[PRE], u);
        dpostgate = like(mask[POST], u);
    }
    grads_tuple tuple() const { return {du, dk, dpregate, dpostgate}; }
};

// ---------------------------------------------------------------- the composition

opt_tensor present(const at::Tensor &t) { return t.defined() ? opt_tensor(t) : std::nullopt; }

// dk[h, m] = sum_b sum_n g[b, h, n] v[b, h, n - m] for m < taps (fp32), as the correlation irfft(G conj(V)) summed
// over the batch, in ATen's FFTs: the CPU kernel's composition. Any FFT size of at least N + taps - 1 keeps the circular
// correlation free of wrapped terms at those lags. g and v are exact in fp32 (a product of two 16-bit numbers has at
// most 22 significant bits), so the only roundings are the FFTs' own.
at::Tensor filter_gradient_fft(const at::Tensor &u, const at::Tensor &pregate, const at::Tensor &postgate,
                               const at::Tensor &dy, int64_t taps, int) {
    const int64_t fft = tk_fftconv::correlation_size(u.size(2));
    at::Tensor g = dy.to(at::kFloat), v = u.to(at::kFloat);
    if (postgate.defined()) g.mul_(postgate);
    if (pregate.defined()) v.mul_(pregate);
    // conj_physical, not the lazy conj() view: multiplied in place into another tensor, the view's conjugation was
    // lost when the op ran from a Python dispatch mode's handler, as on torch.compile's AOT path (a CPU test holds the
    // op under such a mode to its eager result).
    at::Tensor products = at::conj_physical(at::fft_rfft(v, fft));
    v.reset();
    products.mul_(at::fft_rfft(g, fft));
    return at::fft_irfft(products.sum(0), fft).narrow(-1, 0, taps);
}

// The same sum by the filter-gradient kernels (fp32; the arguments passed the rules, u is not empty): one transform
// per pair of rows up to ONCHIP_LEN, the block path past it (bwd_by_cufft takes longer rows).
at::Tensor filter_gradient_cuda(const at::Tensor &u_in, const at::Tensor &pregate_in, const at::Tensor &postgate_in,
                                const at::Tensor &dy_in, int64_t taps, int fft) {
    const at::Tensor u = u_in.contiguous(), dy = dy_in.contiguous();
    const at::Tensor pregate = pregate_in.defined() ? pregate_in.contiguous() : pregate_in;
    const at::Tensor postgate = postgate_in.defined() ? postgate_in.contiguous() : postgate_in;
    const auto pointer = [](const at::Tensor &t) { return t.defined() ? t.data_ptr() : nullptr; };
    const tk_fftconv::dtype type = u.scalar_type() == at::kHalf ? tk_fftconv::dtype::fp16 : tk_fftconv::dtype::bf16;
    const int batch = int(u.size(0)), heads = int(u.size(1)), len = int(u.size(2));
    const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    cudaError_t e;
    at::Tensor dk;
    if (len > tk_fftconv::ONCHIP_LEN) {
        dk = at::empty({heads, taps}, u.options().dtype(at::kFloat));
        const at::Tensor workspace = at::empty(
            {int64_t(tk_fftconv::long_dk_workspace_bytes(batch, heads, len, int(taps)))}, u.options().dtype(at::kByte));
        const tk_fftconv::long_dk_problem p{pointer(u), pointer(pregate), pointer(dy), pointer(postgate), dk.data_ptr<float>(),
                                            workspace.data_ptr(), batch, heads, len, int(taps), type};
        e = tk_fftconv::long_filter_gradient(p, stream);
    } else {
        dk = at::zeros({heads, taps}, u.options().dtype(at::kFloat));
        const tk_fftconv::dk_problem p{pointer(u), pointer(pregate), pointer(dy), pointer(postgate), dk.data_ptr<float>(),
                                       batch, heads, len, int(taps), fft, type};
        e = tk_fftconv::filter_gradient(p, stream);
    }
    TORCH_CHECK(e == cudaSuccess, "tk_ops.fftconv filter-gradient kernels failed: ", cudaGetErrorString(e));
    return dk;
}

// How the composition reaches the forward convolution (fftconv_fwd's arguments), the filter's spectrum and the
// filter's gradient.
struct forward_ops {
    at::Tensor (*conv)(const at::Tensor &, const opt_tensor &, const opt_tensor &, const opt_tensor &,
                       const opt_tensor &);
    at::Tensor (*spectrum)(const at::Tensor &, int64_t);
    at::Tensor (*filter_gradient)(const at::Tensor &, const at::Tensor &, const at::Tensor &, const at::Tensor &,
                                  int64_t, int);
    at::Tensor (*reversed_conv)(const at::Tensor &, const opt_tensor &, const at::Tensor &); // binding.h
};

// The gradients from forward convolutions and dk's FFTs (the top of the file); the arguments passed the rules.
grads_tuple compose(const at::Tensor &u, const at::Tensor &k, const at::Tensor &pregate, const at::Tensor &postgate,
                    const at::Tensor &k_f, const at::Tensor &dy, const output_mask &mask, int fft,
                    const forward_ops &ops) {
    gradients out(u, k, mask);
    if (u.numel() == 0) { // an empty batch: no terms in dk's sum
        if (mask[K]) out.dk.zero_();
        return out.tuple();
    }
    const bool convolve = mask[U] || mask[PRE] || mask[POST];
    // The filter's spectrum once for both forward convolutions below.
    const at::Tensor spectrum = k_f.defined() || !convolve ? k_f : ops.spectrum(k, u.size(2));
    if (mask[U] || mask[PRE]) {
        // The forward forms its gated input flip(dy) * flip(postgate) = flip(g) itself.
        const at::Tensor dv = ops.reversed_conv(dy, present(postgate), spectrum);
        if (mask[U]) {
            if (pregate.defined()) at::mul_out(out.du, dv, pregate);
            else out.du = dv;
        }
        if (mask[PRE]) at::mul_out(out.dpregate, dv, u);
    }
    if (mask[POST]) out.dpostgate = ops.conv(u, std::nullopt, present(pregate), dy, spectrum);
    if (mask[K]) out.dk.copy_(ops.filter_gradient(u, pregate, postgate, dy, k.size(1), fft));
    return out.tuple();
}

// Past the block path the forward convolves with cuFFT (binding.cpp), and so do the gradients, g's spectrum computed
// once for both dv and dk: dv = irfft(G conj K)[:N] (a correlation; at L >= 2N nothing wraps, so no reversal is
// needed), dpostgate = dy * irfft(V K)[:N], dk = irfft(sum_b G conj V)[:taps]. The arguments passed the rules.
grads_tuple bwd_by_cufft(const at::Tensor &u, const at::Tensor &k, const at::Tensor &pregate, const at::Tensor &postgate,
                         const at::Tensor &k_f, const at::Tensor &dy, const output_mask &mask, int fft) {
    gradients out(u, k, mask);
    if (u.numel() == 0) {
        if (mask[K]) out.dk.zero_();
        return out.tuple();
    }
    const int64_t n = u.size(2);
    const bool convolve = mask[U] || mask[PRE] || mask[POST];
    const at::Tensor spectrum = k_f.defined() || !convolve ? k_f : spectrum_cuda(k, n);
    const auto as_float = [](const at::Tensor &x, const at::Tensor &gate) {
        return gate.defined() ? x.to(at::kFloat).mul_(gate) : x.to(at::kFloat);
    };
    // conj_physical rather than lazy conj() views, as in filter_gradient_fft.
    const at::Tensor G = at::fft_rfft(as_float(dy, postgate), fft, -1);
    if (mask[U] || mask[PRE]) {
        const at::Tensor dv = at::fft_irfft(G * at::conj_physical(spectrum), fft, -1).narrow(-1, 0, n);
        if (mask[U]) {
            if (pregate.defined()) at::mul_out(out.du, dv, pregate);
            else out.du.copy_(dv);
        }
        if (mask[PRE]) at::mul_out(out.dpregate, dv, u);
    }
    if (mask[POST] || mask[K]) {
        const at::Tensor V = at::fft_rfft(as_float(u, pregate), fft, -1);
        if (mask[POST]) at::mul_out(out.dpostgate, at::fft_irfft(V * spectrum, fft, -1).narrow(-1, 0, n), dy);
        if (mask[K]) out.dk.copy_(at::fft_irfft((G * at::conj_physical(V)).sum(0), fft, -1).narrow(-1, 0, k.size(1)));
    }
    return out.tuple();
}

// ---------------------------------------------------------------- CUDA: binding.cpp's kernels called directly

grads_tuple bwd_cuda(const at::Tensor &u, const opt_tensor &k_opt, const opt_tensor &pregate_opt,
                     const opt_tensor &postgate_opt, const opt_tensor &k_f_opt, const at::Tensor &dy,
                     output_mask mask) {
    const at::Tensor k = k_opt.value_or(at::Tensor()), k_f = k_f_opt.value_or(at::Tensor());
    const at::Tensor pregate = pregate_opt.value_or(at::Tensor()), postgate = postgate_opt.value_or(at::Tensor());
    const int fft = bwd_rules(u, k, pregate, postgate, k_f, dy, mask);
    check_devices(FFTCONV, {{"u", u}, {"k", k}, {"k_f", k_f}, {"pregate", pregate}, {"postgate", postgate},
                            {"the output's gradient", dy}});
    const c10::cuda::CUDAGuard guard(u.device());
    if (u.size(2) > tk_fftconv::BLOCKS_LEN) return bwd_by_cufft(u, k, pregate, postgate, k_f, dy, mask, fft);
    return compose(u, k, pregate, postgate, k_f, dy, mask, fft, forward_ops{&fwd_cuda, &spectrum_cuda, &filter_gradient_cuda, &reversed_conv_cuda});
}

// ---------------------------------------------------------------- Meta (torch.compile's fake tensors)

grads_tuple bwd_meta(const at::Tensor &u, const opt_tensor &k, const opt_tensor &pregate, const opt_tensor &postgate,
                     const opt_tensor &k_f, const at::Tensor &dy, output_mask mask) {
    const at::Tensor k_t = k.value_or(at::Tensor());
    bwd_rules(u, k_t, pregate.value_or(at::Tensor()), postgate.value_or(at::Tensor()), k_f.value_or(at::Tensor()), dy,
              mask);
    return gradients(u, k_t, mask).tuple();
}

// ---------------------------------------------------------------- CPU: the composition through the dispatcher

// The forward and spectrum ops' CPU kernels refuse CPU tensors (the device rule), so on the CPU this op fails at its
// first call of either, as every op fails there; with CPU stand-ins registered for those two ops
// (tests/cpu/test_fftconv_bwd_api.py) it runs the CUDA kernel's composition, which is how the composition is tested
// without a GPU.
at::Tensor dispatched_conv(const at::Tensor &u, const opt_tensor &k, const opt_tensor &pregate,
                           const opt_tensor &postgate, const opt_tensor &k_f) {
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("tk_ops::fftconv_fwd", "")
                               .typed<at::Tensor(const at::Tensor &, const opt_tensor &, const opt_tensor &,
                                                 const opt_tensor &, const opt_tensor &)>();
    return op.call(u, k, pregate, postgate, k_f);
}

at::Tensor dispatched_spectrum(const at::Tensor &k, int64_t n) {
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("tk_ops::fftconv_spectrum", "")
                               .typed<at::Tensor(const at::Tensor &, int64_t)>();
    return op.call(k, n);
}

// reversed_conv_cuda's composition by copies, through the dispatcher.
at::Tensor dispatched_reversed_conv(const at::Tensor &u, const opt_tensor &pregate, const at::Tensor &k_f) {
    return dispatched_conv(u.flip(-1), std::nullopt, pregate ? opt_tensor(pregate->flip(-1)) : std::nullopt, std::nullopt,
                           k_f)
        .flip(-1);
}

grads_tuple bwd_cpu(const at::Tensor &u, const opt_tensor &k_opt, const opt_tensor &pregate_opt,
                    const opt_tensor &postgate_opt, const opt_tensor &k_f_opt, const at::Tensor &dy,
                    output_mask mask) {
    const at::Tensor k = k_opt.value_or(at::Tensor()), k_f = k_f_opt.value_or(at::Tensor());
    const at::Tensor pregate = pregate_opt.value_or(at::Tensor()), postgate = postgate_opt.value_or(at::Tensor());
    const int fft = bwd_rules(u, k, pregate, postgate, k_f, dy, mask);
    // Without a convolution to run, nothing else would apply the device rule.
    if (!(mask[U] || mask[PRE] || mask[POST]) || u.numel() == 0)
        reject_cpu(FFTCONV, {{"u", u}, {"k", k}, {"k_f", k_f}, {"pregate", pregate}, {"postgate", postgate},
                             {"the output's gradient", dy}});
    return compose(u, k, pregate, postgate, k_f, dy, mask, fft, forward_ops{&dispatched_conv, &dispatched_spectrum, &filter_gradient_fft, &dispatched_reversed_conv});
}

} // namespace

TORCH_LIBRARY_FRAGMENT(tk_ops, m) {
    m.def("fftconv_bwd(Tensor u, Tensor? k, Tensor? pregate, Tensor? postgate, Tensor? k_f, Tensor dy, "
          "bool[4] output_mask) -> (Tensor du, Tensor dk, Tensor dpregate, Tensor dpostgate)");
}

TORCH_LIBRARY_IMPL(tk_ops, CUDA, m) { m.impl("fftconv_bwd", &bwd_cuda); }
TORCH_LIBRARY_IMPL(tk_ops, Meta, m) { m.impl("fftconv_bwd", &bwd_meta); }
TORCH_LIBRARY_IMPL(tk_ops, CPU, m) { m.impl("fftconv_bwd", &bwd_cpu); }
