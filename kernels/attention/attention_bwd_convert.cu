// Last step of the attention backward: dQ in the input dtype from the main kernel's fp32 accumulator (dense, laid
// out as attention.h's dq_accum_transposed says), written in dQ's own strides. One pass over the accumulator,
// bound by memory: every read and write is 16 bytes per thread, and the transposed layout goes through a shared
// tile so both sides stay coalesced.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention.h"

namespace tk_attention {
namespace {

template <typename T> struct pair_of;
template <> struct pair_of<__nv_bfloat16> {
    using type = __nv_bfloat162;
    static __device__ __forceinline__ type make(float a, float b) { return __floats2bfloat162_rn(a, b); }
};
template <> struct pair_of<__half> {
    using type = __half2;
    static __device__ __forceinline__ type make(float a, float b) { return __floats2half2_rn(a, b); }
};

// 8 floats times the softmax scale (which the accumulator leaves out) -> 16 bytes of the output dtype at dst.
template <typename T> __device__ __forceinline__ void store8(void *dst, const float (&x)[8], float scale) {
    using P = pair_of<T>;
    uint4 packed;
    auto *h = reinterpret_cast<typename P::type *>(&packed);
#pragma unroll
    for (int k = 0; k < 4; k++) h[k] = P::make(x[2 * k] * scale, x[2 * k + 1] * scale);
    *static_cast<uint4 *>(dst) = packed;
}

__device__ __forceinline__ int64_t out_offset(const out4 &o, int64_t b, int64_t h, int64_t row) {
    return b * o.stride_b + h * o.stride_h + row * o.stride_n;
}

// The output row of padded accumulator row i: the same row of a dense sequence (none past q_len), or, for packed
// documents, the packed row it holds (none for padding).
struct output_rows {
    int q_len;
    bool varlen;
    varlen_layout docs;
    __device__ inline int operator()(int i) const {
        if (varlen) return docs.packed_row(i, BWD_ROW_PAD);
        return i < q_len ? i : -1;
    }
};

// Accumulator (batch, heads, padded rows, D): one thread per 8 elements of a row (`rows_per_head` rows: the real ones
// of a dense sequence, all padded ones for packed documents). Rows of the items the main kernel has converted already
// (converted[item] set, see attention.h's bwd_sync) are skipped.
template <typename T, int D>
__global__ void convert_rows(const float *acc, out4 dq, const int *converted, int heads, int rows_per_head,
                             int padded_len, int64_t items, float scale, output_rows out_row) {
    constexpr int PARTS = D / 8;
    const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (id >= items) return;
    const int part = int(id % PARTS);
    const int64_t row = id / PARTS; // over (batch * heads, rows_per_head)
    const int64_t head = row / rows_per_head;
    const int i = int(row - head * rows_per_head);
    const int out = out_row(i);
    if (out < 0) return;
    if (converted && converted[head * (padded_len / BWD_CONVERT_ROWS) + i / BWD_CONVERT_ROWS]) return;
    const float4 *src = reinterpret_cast<const float4 *>(acc + (head * padded_len + i) * D + part * 8);
    const float4 a = src[0], b = src[1];
    const float x[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    store8<T>(static_cast<T *>(dq.ptr) + out_offset(dq, head / heads, head % heads, out) + part * 8, x, scale);
}

// Accumulator (batch, heads, D, padded rows): a block turns 64 rows of one head around through shared memory.
constexpr int T_ROWS = 64, T_THREADS = 256;
template <typename T, int D>
__global__ void __launch_bounds__(T_THREADS)
convert_transposed(const float *acc, out4 dq, int heads, int padded_len, float scale, output_rows out_row) {
    __shared__ float tile[D][T_ROWS + 1]; // +1: the column reads below hit 32 different banks
    const int64_t head = blockIdx.x;
    const int row0 = blockIdx.y * T_ROWS;
    const float *src = acc + head * D * padded_len + row0;
    constexpr int QUADS = T_ROWS / 4; // float4 per accumulator row segment
    for (int k = threadIdx.x; k < D * QUADS; k += T_THREADS) {
        const int d = k / QUADS, r = 4 * (k % QUADS);
        const float4 v = *reinterpret_cast<const float4 *>(src + int64_t(d) * padded_len + r);
        tile[d][r] = v.x;
        tile[d][r + 1] = v.y;
        tile[d][r + 2] = v.z;
        tile[d][r + 3] = v.w;
    }
    __syncthreads();
    constexpr int PARTS = D / 8;
    for (int k = threadIdx.x; k < T_ROWS * PARTS; k += T_THREADS) {
        const int r = k / PARTS, part = k % PARTS;
        const int out = out_row(row0 + r);
        if (out < 0) continue;
        float x[8];
#pragma unroll
        for (int t = 0; t < 8; t++) x[t] = tile[part * 8 + t][r];
        store8<T>(static_cast<T *>(dq.ptr) + out_offset(dq, head / heads, head % heads, out) + part * 8, x, scale);
    }
}

template <typename T, int D> cudaError_t launch(const bwd_problem &p, out4 dq, cudaStream_t stream) {
    const int padded = bwd_scratch(p).rows;
    const int64_t heads = int64_t(p.batch) * p.q_heads;
    const output_rows out_row{p.q_len, p.varlen, p.docs};
    const int rows = p.varlen ? padded : p.q_len; // accumulator rows per head to visit
    if constexpr (dq_accum_transposed(D)) {
        static_assert(BWD_ROW_PAD % T_ROWS == 0, "a transposing block must not cross the accumulator's padding");
        const int64_t row_tiles = (rows + T_ROWS - 1) / T_ROWS;
        if (heads > 0x7fffffff || row_tiles > 65535) return cudaErrorInvalidValue;
        const dim3 grid{unsigned(heads), unsigned(row_tiles)};
        convert_transposed<T, D><<<grid, T_THREADS, 0, stream>>>(p.dq_accum, dq, p.q_heads, padded, p.scale, out_row);
    } else {
        const int64_t items = heads * rows * (D / 8);
        constexpr int BLOCK = 256;
        const int64_t blocks = (items + BLOCK - 1) / BLOCK;
        if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
        convert_rows<T, D><<<unsigned(blocks), BLOCK, 0, stream>>>(p.dq_accum, dq, bwd_sync_of(p).converted, p.q_heads,
                                                                   rows, padded, items, p.scale, out_row);
    }
    return cudaGetLastError();
}

template <typename T> cudaError_t launch_for(const bwd_problem &p, out4 dq, cudaStream_t stream) {
    return with_head_dim(p.head_dim, [&](auto d) { return launch<T, decltype(d)::value>(p, dq, stream); });
}

} // namespace

cudaError_t backward_convert_dq(const bwd_problem &p, out4 dq, cudaStream_t stream) {
    return p.type == dtype::bf16 ? launch_for<__nv_bfloat16>(p, dq, stream) : launch_for<__half>(p, dq, stream);
}

} // namespace tk_attention
