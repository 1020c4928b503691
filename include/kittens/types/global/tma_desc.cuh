// Host-side creation of TMA tensor maps that match a shared tile's or vector's layout.
//
// A tile map is 4-D (col, row, depth, batch) with a box of (swizzle_elements x rows x 1 x 1):
// one TMA instruction moves one column chunk of a tile (see st.cuh), and its swizzle mode is the
// tile's. Out-of-range boxes are zero-filled on load and clipped on store by the hardware, which
// is how ragged edges stay correct without any bounds code in kernels.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "../shared/st.cuh"
#include "../shared/sv.cuh"

namespace kittens {
namespace tma {
namespace detail {

template <typename T> constexpr CUtensorMapDataType data_type() {
    if constexpr (std::same_as<T, bf16>) return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    else if constexpr (std::same_as<T, half>) return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    else if constexpr (std::same_as<T, float>) return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    else return CU_TENSOR_MAP_DATA_TYPE_UINT8; // fp8: TMA only moves bytes
}

template <int swizzle_bytes> constexpr CUtensorMapSwizzle swizzle_mode() {
    if constexpr (swizzle_bytes == 128) return CU_TENSOR_MAP_SWIZZLE_128B;
    else if constexpr (swizzle_bytes == 64) return CU_TENSOR_MAP_SWIZZLE_64B;
    else if constexpr (swizzle_bytes == 32) return CU_TENSOR_MAP_SWIZZLE_32B;
    else return CU_TENSOR_MAP_SWIZZLE_NONE;
}

// The driver entry point, found once through the runtime so nothing links against libcuda.
inline PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void *p = nullptr;
        cudaDriverEntryPointQueryResult q;
        cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
        if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || p == nullptr)
            throw std::runtime_error("kittens: cuTensorMapEncodeTiled is not available from the CUDA driver");
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    }();
    return fn;
}

// Driver calls act on the calling thread's current context, which a thread that has only used the
// runtime so far may not have (PyTorch's autograd threads, for one). Setting the runtime's current device
// binds that device's primary context to this thread.
inline void bind_current_context() {
    int dev = 0;
    if (cudaGetDevice(&dev) == cudaSuccess) cudaSetDevice(dev);
}

inline void check_encode(CUresult r, const char *what) {
    if (r != CUDA_SUCCESS)
        throw std::runtime_error(std::string("kittens: cuTensorMapEncodeTiled failed for a ") + what +
                                 " map (error " + std::to_string(int(r)) +
                                 "); the global address must be 16-byte aligned and every stride a multiple of 16 bytes");
}

// dims: {cols, rows, depth, batch} in elements; strides: {row, depth, batch} in elements.
template <ducks::st::all ST, typename T>
inline void make_tile_map(CUtensorMap *map, const T *ptr, const uint64_t dims[4], const uint64_t strides[3]) {
    static_assert(sizeof(T) == sizeof(typename ST::T), "tensor map element size must match the tile's");
    static_assert(ST::rows <= 256, "a TMA box is at most 256 rows: a gl cannot carry a map for a taller tile");
    cuuint64_t gdim[4] = {dims[0], dims[1], dims[2], dims[3]};
    cuuint64_t gstride[3] = {strides[0] * sizeof(T), strides[1] * sizeof(T), strides[2] * sizeof(T)};
    cuuint32_t box[4] = {cuuint32_t(ST::swizzle_elements), cuuint32_t(ST::rows), 1, 1};
    cuuint32_t estride[4] = {1, 1, 1, 1};
    bind_current_context();
    CUresult r = encode_tiled()(map, data_type<typename ST::T>(), 4, const_cast<T *>(ptr), gdim, gstride, box, estride,
                                CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle_mode<ST::swizzle_bytes>(),
                                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    check_encode(r, "tile");
}

// Vector maps treat the tensor's last dimension as the vector axis: box = {length, 1, 1, 1}.
template <ducks::sv::all SV, typename T>
inline void make_vec_map(CUtensorMap *map, const T *ptr, const uint64_t dims[4], const uint64_t strides[3]) {
    static_assert(sizeof(T) == sizeof(typename SV::T), "tensor map element size must match the vector's");
    static_assert(SV::length <= 256, "a TMA box is at most 256 elements long");
    cuuint64_t gdim[4] = {dims[0], dims[1], dims[2], dims[3]};
    cuuint64_t gstride[3] = {strides[0] * sizeof(T), strides[1] * sizeof(T), strides[2] * sizeof(T)};
    cuuint32_t box[4] = {cuuint32_t(SV::length), 1, 1, 1};
    cuuint32_t estride[4] = {1, 1, 1, 1};
    bind_current_context();
    CUresult r = encode_tiled()(map, data_type<typename SV::T>(), 4, const_cast<T *>(ptr), gdim, gstride, box, estride,
                                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    check_encode(r, "vector");
}

} // namespace detail
} // namespace tma
} // namespace kittens
