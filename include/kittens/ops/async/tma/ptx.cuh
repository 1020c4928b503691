// Raw PTX for the TMA engine: one 4-D tensor-map operation each. The public functions in
// tile.cuh / vec.cuh turn tiles and coordinates into these calls.
//
// Tensor-map coordinates are in elements and ordered innermost first: {col, row, depth, batch}
// (the order the maps are built in, see types/global/tma_desc.cuh). Out-of-range parts of a box
// are zero-filled on load and dropped on store / reduce.
//
// The tensor map is addressed generically: it must live in kernel parameter space (pass the gl
// as `const __grid_constant__`) or in global memory, never in a local copy.
#pragma once

#include <cuda.h>

#include "../../../common/common.cuh"

namespace kittens {
namespace tma {
namespace detail {

__device__ __forceinline__ uint64_t map_addr(const CUtensorMap *m) { return reinterpret_cast<uint64_t>(m); }

// global -> shared, completion counted in bytes on the mbarrier at `bar`.
__device__ __forceinline__ void load_4d(uint32_t dst, const CUtensorMap *m, uint32_t bar, int c0, int c1, int c2, int c3) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(dst),
                 "l"(map_addr(m)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}

// An L2 eviction policy for the .L2::cache_hint forms: `first` for data streamed through once (a GEMM's
// output), `last` for data many blocks read again (its operands).
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
    uint64_t p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
    return p;
}
__device__ __forceinline__ uint64_t l2_policy_evict_last() {
    uint64_t p;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(p));
    return p;
}

__device__ __forceinline__ void load_4d_hint(uint32_t dst, const CUtensorMap *m, uint32_t bar, int c0, int c1, int c2, int c3,
                                             uint64_t policy) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
                 " [%0], [%1, {%3, %4, %5, %6}], [%2], %7;\n" ::"r"(dst),
                 "l"(map_addr(m)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "l"(policy)
                 : "memory");
}

__device__ __forceinline__ void store_4d_hint(const CUtensorMap *m, uint32_t src, int c0, int c1, int c2, int c3, uint64_t policy) {
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group.L2::cache_hint"
                 " [%0, {%2, %3, %4, %5}], [%1], %6;\n" ::"l"(map_addr(m)),
                 "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "l"(policy)
                 : "memory");
}

// shared -> global, tracked by the issuing thread's bulk async-group.
__device__ __forceinline__ void store_4d(const CUtensorMap *m, uint32_t src, int c0, int c1, int c2, int c3) {
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group"
                 " [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(map_addr(m)),
                 "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}

// global += shared, element type taken from the map (f32, f16, bf16 are the float ones).
__device__ __forceinline__ void reduce_add_4d(const CUtensorMap *m, uint32_t src, int c0, int c1, int c2, int c3) {
    asm volatile("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group"
                 " [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(map_addr(m)),
                 "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}

// Pull the box into L2 without touching shared memory.
__device__ __forceinline__ void prefetch_4d(const CUtensorMap *m, int c0, int c1, int c2, int c3) {
    asm volatile("cp.async.bulk.prefetch.tensor.4d.L2.global.tile [%0, {%1, %2, %3, %4}];\n" ::"l"(map_addr(m)),
                 "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}

// Fetch a tensor map into the SM's descriptor cache ahead of its first use.
__device__ __forceinline__ void prefetch_map(const CUtensorMap *m) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(map_addr(m)) : "memory");
}

} // namespace detail
} // namespace tma
} // namespace kittens
