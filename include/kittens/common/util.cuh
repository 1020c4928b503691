// Thread-scope constants and helpers shared by every layer: warp and lane ids, shared-memory
// sizing and a bump allocator for dynamic shared memory.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

namespace kittens {

constexpr int WARP_THREADS = 32;
constexpr int WARPGROUP_WARPS = 4;
constexpr int WARPGROUP_THREADS = WARP_THREADS * WARPGROUP_WARPS;
constexpr int TILE_DIM = 16; // every tile dimension is a multiple of this

// The largest dynamic shared memory a Hopper block may ask for (227 KB).
constexpr int MAX_SHARED_MEMORY = 227 * 1024;

__device__ __forceinline__ int warpid() { return threadIdx.x / WARP_THREADS; }
__device__ __forceinline__ int laneid() { return threadIdx.x % WARP_THREADS; }
__device__ __forceinline__ int warpgroupid() { return threadIdx.x / WARPGROUP_THREADS; }

constexpr unsigned MASK_ALL = 0xffffffffu;

// 32-bit shared-state-space address of a generic pointer to shared memory (for PTX operands).
__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 2^x in one SFU instruction (ex2.approx.ftz: about 2 ulp, subnormal results flushed to 0). ex2(-inf) = +0, so a
// masked exponent of -inf gives a zero weight. exp(x) is fast_exp2(x * LOG2E).
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
constexpr float LOG2E = 1.4426950408889634f;

// Compile-time shorthand used in static_assert messages and sizes.
template <int N> constexpr bool is_tile_multiple = (N > 0) && (N % TILE_DIM == 0);

// Dynamic shared memory bump allocator. Every allocation is aligned to 1024 bytes, because the
// 128-byte TMA/wgmma swizzle pattern is computed from address bits 4..9 and so repeats every 1 KB.
struct alignas(1024) alignment_dummy { int dummy; };

struct shared_allocator {
    static constexpr int ALIGN = 1024;
    char *ptr;
    __device__ explicit shared_allocator(void *base) : ptr(reinterpret_cast<char *>(base)) { align(); }
    __device__ inline void align() {
        uintptr_t a = reinterpret_cast<uintptr_t>(ptr);
        uint32_t s = smem_addr(ptr);
        uint32_t pad = (ALIGN - (s % ALIGN)) % ALIGN;
        ptr = reinterpret_cast<char *>(a + pad);
    }
    // allocate<T>() gives one T; allocate<T, N>() an array T[N]; allocate<T, N, M>() T[N][M].
    template <typename T, int... dims> __device__ inline auto &allocate() {
        if constexpr (sizeof...(dims) == 0) {
            T *p = reinterpret_cast<T *>(ptr);
            ptr += sizeof(T);
            align();
            return *p;
        } else {
            using arr = typename array_of<T, dims...>::type;
            arr *p = reinterpret_cast<arr *>(ptr);
            ptr += sizeof(arr);
            align();
            return *p;
        }
    }

  private:
    template <typename T, int first, int... rest> struct array_of {
        using type = typename array_of<T, rest...>::type[first];
    };
    template <typename T, int last> struct array_of<T, last> { using type = T[last]; };
};

// The total dynamic shared memory a kernel must request for the listed objects, each rounded up
// to the allocator's alignment, plus one alignment of slack for the base.
template <typename... Ts> constexpr int shared_bytes_for() {
    return (0 + ... + int((sizeof(Ts) + 1023) / 1024 * 1024)) + 1024;
}

} // namespace kittens
