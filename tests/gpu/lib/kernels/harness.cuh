// Test-kernel harness. Library unit tests are plain CUDA (no torch headers, so they build fast);
// each .cu file here registers named entry points, and pytest calls them through ctypes on
// tensors it made (tests/gpu/lib/tklib.py).
//
// An entry takes an array of device pointers and an array of integers, launches, and returns a
// cudaError_t as int. Register entries from a TK_TEST_REGISTER(name) { ... } block:
//     tk_test::add("rt_map/exp/bf16/row/32x64", &run_map<...>);
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

#include "kittens.cuh"

namespace tk_test {

using entry_fn = int (*)(void **bufs, const long long *args);
void add(const std::string &name, entry_fn fn);

template <typename T> constexpr const char *dtype_name() {
    if constexpr (std::same_as<T, float>) return "fp32";
    else if constexpr (std::same_as<T, kittens::bf16>) return "bf16";
    else if constexpr (std::same_as<T, kittens::half>) return "fp16";
    else if constexpr (std::same_as<T, kittens::fp8e4m3>) return "fp8e4m3";
    else if constexpr (std::same_as<T, kittens::fp8e5m2>) return "fp8e5m2";
    else return "?";
}
template <typename L> constexpr const char *layout_name() {
    if constexpr (std::same_as<L, kittens::row_l>) return "row";
    else if constexpr (std::same_as<L, kittens::col_l>) return "col";
    else if constexpr (std::same_as<L, kittens::naive_l>) return "naive";
    else if constexpr (std::same_as<L, kittens::ortho_l>) return "ortho";
    else if constexpr (std::same_as<L, kittens::align_l>) return "align";
    else return "?";
}
// "32x64"
inline std::string shape(int r, int c) { return std::to_string(r) + "x" + std::to_string(c); }

// Launch helper: sets the dynamic shared memory limit when a kernel needs more than 48 KB.
template <typename K> inline int launch_status(K kernel, int smem_bytes) {
    if (smem_bytes > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
        if (e != cudaSuccess) return int(e);
    }
    return 0;
}

// Compile-time iteration over type lists, for registering every combination.
template <typename... Ts, typename F> void for_each_type(F &&f) { (f.template operator()<Ts>(), ...); }

} // namespace tk_test

#define TK_TEST_REGISTER(NAME)                                   \
    static void tk_test_register_##NAME();                       \
    static const int tk_test_registered_##NAME = (tk_test_register_##NAME(), 0); \
    static void tk_test_register_##NAME()
