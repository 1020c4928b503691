// First step of the attention backward: per query row, delta = sum_d dO * O (fp32) and lse2 = LSE * log2(e),
// the base-2 form the main kernel exponentiates against. Rows that see no key (LSE = -inf) and the padding
// rows up to a multiple of BWD_ROW_PAD get lse2 = +inf, which makes every P of theirs exactly 0.
// The same pass zeroes the fp32 dQ accumulator the main kernel adds into (one launch and one pass over the rows
// fewer than a separate fill). The accumulator is dense with 8 floats per (padded row, 8-element part), so each
// thread that reads a part zeroes its own 32 bytes of it whatever its layout; the first threads also zero the int
// scratch of the in-kernel dQ conversion (attention.h's bwd_scratch_layout).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention.h"

namespace tk_attention {
namespace {

__device__ __forceinline__ float2 to_float2(__nv_bfloat162 x) { return __bfloat1622float2(x); }
__device__ __forceinline__ float2 to_float2(__half2 x) { return __half22float2(x); }

// Offset, in 16-byte units, of 8 elements of one row of a (batch, heads, rows, D) tensor whose strides are all
// multiples of 8 elements (the binding's TMA rule, which it enforces by copying anything else).
__device__ __forceinline__ int64_t chunk_at(const tensor4 &t, int64_t b, int64_t h, int64_t row, int part) {
    return (b * t.stride_b + h * t.stride_h + row * t.stride_n) / 8 + part;
}

// Lanes per row: D / 8 parts of 8 elements (16 bytes), rounded up to a power of two so that a row's lanes are an
// aligned group of a warp, which the shuffles below reduce over (D = 96: 12 parts on 16 lanes, 4 of them idle).
template <int D> constexpr int row_lanes() {
    int lanes = 1;
    while (lanes < D / 8) lanes *= 2;
    return lanes;
}

// One thread per 8 elements (16 bytes) of a row; the row_lanes<D>() threads of a row are adjacent lanes of a warp.
// Packed documents (varlen): padded row i of a head holds the packed row docs.packed_row(i) (batch 1).
template <typename T2, int D>
__global__ void prepare_rows(tensor4 o, tensor4 dout, const float *lse, float *lse2, float *delta, float *dq_accum,
                             int *sync, int64_t sync_ints, int q_heads, int q_len, int padded_len, int64_t rows,
                             varlen_layout docs, bool varlen) {
    constexpr int PARTS = D / 8, LANES = row_lanes<D>();
    static_assert(PARTS * 8 == D && LANES <= 32, "prepare_rows: a row is whole 16-byte parts within one warp");
    const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (id < sync_ints) sync[id] = 0; // the in-kernel dQ conversion's counts and flags
    const int64_t row = id / LANES; // in the padded (batch * heads, padded_len) grid
    const int part = int(id % LANES);
    if (row < rows && part < PARTS) {
        float4 *acc = reinterpret_cast<float4 *>(dq_accum) + 2 * (row * PARTS + part);
        acc[0] = acc[1] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    const int64_t head = row / padded_len;
    int i = int(row - head * padded_len); // the query row in the sequence (packed: in all documents)
    if (varlen && row < rows) i = docs.packed_row(i, BWD_ROW_PAD);
    const bool real = row < rows && i >= 0 && i < q_len && part < PARTS;
    float sum = 0.f;
    if (real) {
        const int64_t batch = head / q_heads, q_head = head % q_heads;
        const uint4 a = static_cast<const uint4 *>(o.ptr)[chunk_at(o, batch, q_head, i, part)];
        const uint4 b = static_cast<const uint4 *>(dout.ptr)[chunk_at(dout, batch, q_head, i, part)];
        const T2 *a2 = reinterpret_cast<const T2 *>(&a), *b2 = reinterpret_cast<const T2 *>(&b);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float2 x = to_float2(a2[k]), y = to_float2(b2[k]);
            sum = fmaf(x.x, y.x, fmaf(x.y, y.y, sum));
        }
    }
#pragma unroll
    for (int m = 1; m < LANES; m <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);
    if (row >= rows || part != 0) return;
    float l = INFINITY;
    if (real) {
        const float x = lse[head * q_len + i];
        l = x == -INFINITY ? INFINITY : x * 1.4426950408889634f;
    }
    lse2[row] = l;
    delta[row] = real ? sum : 0.f;
}

template <typename T2, int D> cudaError_t launch(const bwd_problem &p, cudaStream_t stream) {
    const bwd_scratch_layout scratch = bwd_scratch(p);
    const int64_t rows = scratch.row_floats; // one per padded row of every head
    const int64_t threads = rows * row_lanes<D>();
    constexpr int BLOCK = 256;
    const int64_t blocks = (threads + BLOCK - 1) / BLOCK;
    const int64_t sync_ints = bwd_converts_in_kernel(p) ? scratch.ints : 0;
    if (blocks > 0x7fffffff || sync_ints > threads) return cudaErrorInvalidValue;
    prepare_rows<T2, D><<<unsigned(blocks), BLOCK, 0, stream>>>(
        p.o, p.dout, p.lse, p.lse2, p.delta, p.dq_accum, p.sync, sync_ints, p.q_heads, p.q_len, scratch.rows, rows,
        p.docs, p.varlen);
    return cudaGetLastError();
}

template <typename T2> cudaError_t launch_for(const bwd_problem &p, cudaStream_t stream) {
    return with_head_dim(p.head_dim, [&](auto d) { return launch<T2, decltype(d)::value>(p, stream); });
}

} // namespace

cudaError_t backward_prepare(const bwd_problem &p, cudaStream_t stream) {
    return p.type == dtype::bf16 ? launch_for<__nv_bfloat162>(p, stream) : launch_for<__half2>(p, stream);
}

} // namespace tk_attention
