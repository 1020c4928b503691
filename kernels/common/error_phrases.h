// Words that name the kind of a device error. Every op reports a CPU tensor or tensors on two GPUs with a
// message containing NOT_ON_ONE_GPU, and a GPU the kernels were not built for with one containing NOT_HOPPER;
// the Python layer reads this table from tk_ops._C (kernels/module.cpp) and raises tk_ops.DeviceMismatchError and
// tk_ops.UnsupportedDeviceError for them. Plain C++ (no torch headers): module.cpp includes it too.
#pragma once

namespace tk_kernels {

inline constexpr const char *NOT_ON_ONE_GPU = "tk_ops kernels run on CUDA tensors";
inline constexpr const char *NOT_HOPPER = "tk_ops kernels need a Hopper GPU";

// (phrase, name of the tk_ops exception) pairs, as module.cpp hands them to Python.
inline constexpr const char *ERROR_PHRASES[][2] = {
    {NOT_ON_ONE_GPU, "DeviceMismatchError"},
    {NOT_HOPPER, "UnsupportedDeviceError"},
};

} // namespace tk_kernels
