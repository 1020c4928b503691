// The argument checks of the torch bindings: the kinds of error an op raises, their messages, and the device
// rule every op shares.
//
// Each op's shape and dtype rules are one function in its family's binding.cpp, called by the op's CUDA kernel
// (before anything touches memory), by its Meta kernel (so torch.compile's fake tensors obey the same rules and
// get their output shapes and strides from the same code) and by its CPU kernel (which then refuses CPU tensors).
// Sizes are read as SymInts there: under dynamic shapes they are symbols, and a rule becomes a guard.
//
// A failed rule throws a c10 error, which Python sees as ValueError (InputError in tk_ops), TypeError (DTypeError)
// or NotImplementedError (an unsupported GPU); the wrappers in python/tk_ops re-raise them as the tk_ops
// exceptions. Messages are assembled with std::string, never through std::ostream (which TORCH_CHECK and c10::str
// use): on the device image, number formatting through a stream inside this library crashed the process,
// apparently a mismatch between the libstdc++ headers built against and the one loaded at run time.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContextLight.h>
#include <c10/core/SymInt.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include <initializer_list>
#include <string>
#include <type_traits>

#include "common/dtype.h"
#include "common/error_phrases.h"

namespace tk_kernels {

// ---------------------------------------------------------------- message parts

inline std::string text(const char *s) { return s; }
inline std::string text(const std::string &s) { return s; }
template <typename T>
    requires std::is_arithmetic_v<T>
std::string text(T v) {
    return std::to_string(v);
}
// A symbolic size prints its value where it has one (the message is about to be thrown: specialising costs nothing).
inline std::string text(const c10::SymInt &v) {
    if (auto concrete = v.maybe_as_int()) return std::to_string(*concrete);
    if (v.has_hint()) return std::to_string(v.guard_int(__FILE__, __LINE__));
    return v.toSymNode()->str();
}
// As Python prints it: torch.bfloat16.
inline std::string text(at::ScalarType t) { return "torch." + std::string(c10::getDtypeNames(t).first); }
inline std::string text(const at::Device &d) { return d.str(); }
// A shape as Python prints it: (2, 8, 64).
inline std::string text(c10::SymIntArrayRef shape) {
    std::string s = "(";
    for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + text(shape[i]);
    return s + (shape.size() == 1 ? ",)" : ")");
}

template <typename... Parts> std::string message(const Parts &...parts) {
    std::string s;
    ((s += text(parts)), ...);
    return s;
}

// ---------------------------------------------------------------- the kinds of error

// A shape, size, layout or value the op cannot take (tk_ops.InputError).
template <typename... Parts> void check_input(bool ok, const Parts &...parts) {
    if (!ok) throw c10::ValueError(message(parts...));
}

// A dtype the op does not accept (tk_ops.DTypeError).
template <typename... Parts> void check_dtype(bool ok, const Parts &...parts) {
    if (!ok) throw c10::TypeError(message(parts...));
}

// A kernel launch (or a CUDA call around it) that failed: RuntimeError in Python, with CUDA's own words.
inline void check_launch(cudaError_t e, const char *what) {
    if (e != cudaSuccess) throw c10::Error(message(what, " failed: ", cudaGetErrorString(e)));
}

// ---------------------------------------------------------------- element types

// The kernels' name for a dtype the op's rules admitted (bf16, fp16 or fp32; anything else is a bug in the rules).
inline dtype dtype_of(at::ScalarType t) {
    if (t == at::kBFloat16) return dtype::bf16;
    if (t == at::kHalf) return dtype::fp16;
    if (t == at::kFloat) return dtype::fp32;
    throw c10::Error(message("tk_ops: no kernel element type for ", t, " (an op's rules let it through)"));
}

// ---------------------------------------------------------------- devices

struct named_tensor {
    const char *name;
    const at::Tensor &tensor; // undefined tensors (an absent optional argument) are skipped
};

// A tensor that is not on a GPU: the kernels need CUDA tensors (also the CPU kernels' answer, common/cpu_refusal.h).
[[noreturn]] inline void reject_cpu(const std::string &op, const char *name, const at::Device &device) {
    throw c10::ValueError(message(op, ": ", NOT_ON_ONE_GPU, ", but ", name, " is on ", device, "; move it with .cuda()"));
}

// The CUDA kernels' device rule: every tensor on the GPU of the first, and that GPU an sm_90 one (the only target
// compiled). Cheap enough for every call: the device properties are cached by torch.
inline void check_devices(const char *op, std::initializer_list<named_tensor> tensors) {
    const named_tensor &first = *tensors.begin();
    const at::Device device = first.tensor.device();
    for (const named_tensor &t : tensors) {
        if (!t.tensor.defined() || t.tensor.device() == device) continue;
        if (!t.tensor.is_cuda()) reject_cpu(op, t.name, t.tensor.device());
        throw c10::ValueError(message(op, ": ", NOT_ON_ONE_GPU, " of one GPU, but ", t.name, " is on ",
                                      t.tensor.device(), " and ", first.name, " on ", device));
    }
    const cudaDeviceProp *props = at::cuda::getDeviceProperties(device.index());
    if (props->major != 9 || props->minor != 0)
        throw c10::NotImplementedError(message(op, ": ", NOT_HOPPER, " (sm_90: H100/H200); this is sm_", props->major,
                                               props->minor, " (", device, ")"));
}


// ---------------------------------------------------------------- layouts

// Whether a (rows, cols) matrix with these strides is dense row-major, as torch's is_contiguous() decides it (any
// stride on an axis of size one). For int64_t or SymInt; the transpose's question is row_major(cols, rows, cs, rs).
template <typename I> bool row_major(const I &rows, const I &cols, const I &row_stride, const I &col_stride) {
    return rows == 0 || cols == 0 || ((cols == 1 || col_stride == 1) && (rows == 1 || row_stride == cols));
}

// The product of a shape's first `count` extents.
inline c10::SymInt leading_extent(c10::SymIntArrayRef shape, size_t count) {
    c10::SymInt n = 1;
    for (size_t i = 0; i < count; i++) n = n * shape[i];
    return n;
}

} // namespace tk_kernels
