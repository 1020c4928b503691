// Host entry points of the attention kernels. Plain CUDA types only: the torch binding (binding.cpp) includes this,
// the kernels' translation units (one per head dimension and direction) implement it.
#pragma once

#include "attention_configs.cuh"
#include "common/dtype.h"
#include "common/tensor4.h"

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <type_traits>
#include <utility>

#include <cuda_runtime.h>

namespace tk_attention {

// The head dimensions the kernels are built for. Adding one: list it here and add its kernel configurations
// (attention_configs.cuh) and instantiation files (attention_fwd_d<D>.cu, attention_bwd_d<D>.cu); every dispatch
// goes through with_head_dim.
inline constexpr int HEAD_DIMS[] = {64, 96, 128, 256};
constexpr bool supported_head_dim(int d) {
    for (int x : HEAD_DIMS)
        if (x == d) return true;
    return false;
}

// f(std::integral_constant<int, D>{}) for the listed D equal to d; cudaErrorInvalidValue for any other d.
template <std::size_t I = 0, typename F> cudaError_t with_head_dim(int d, F &&f) {
    if constexpr (I == std::size(HEAD_DIMS)) {
        return cudaErrorInvalidValue;
    } else {
        if (d == HEAD_DIMS[I]) return f(std::integral_constant<int, HEAD_DIMS[I]>{});
        return with_head_dim<I + 1>(d, std::forward<F>(f));
    }
}

using tk_kernels::dtype; // bf16 or fp16 (the rules admit no other)

// Which keys a query row sees. Row i of a (q_len, kv_len) problem sees keys j with
//   i + diag - left <= j <= i + diag + right,   diag = kv_len - q_len
// (bottom-right aligned, FlashAttention's convention), besides 0 <= j < kv_len. A side at WINDOW_UNLIMITED (or more)
// has no limit: causal attention is right = 0; a sliding window sets left too. Any limit past the sequence ends
// works as unlimited, so the binding clamps the sides to this value; with sequences shorter than MAX_SEQ_LEN, row +
// diag +- side stays inside int32 (attention_masking.cuh).
constexpr int WINDOW_UNLIMITED = 1 << 30;
constexpr int MAX_SEQ_LEN = 1 << 28; // query and key rows per sequence (packed: in all), exclusive
struct band {
    int left = WINDOW_UNLIMITED, right = WINDOW_UNLIMITED;
    constexpr bool limited() const { return left < WINDOW_UNLIMITED || right < WINDOW_UNLIMITED; }
    // The causal shape: the schedules' heuristics for uneven task loads assume it.
    constexpr bool causal() const { return left >= WINDOW_UNLIMITED && right == 0; }
};

// The compile-time choices of a kernel beyond its element type and head dimension.
struct variant {
    bool banded = false;      // band limited on some side: masks per row, and skips whole tiles outside the band
    bool left_edge = false;   // banded with a left limit (a sliding window): masks test that edge too
    bool softcap = false;     // scores s become softcap * tanh(s / softcap) before the softmax
    bool narrow_tail = false; // forward only: a consumer's last tile runs as the narrowest product (attn_fwd)
    bool varlen = false;      // packed documents (varlen_layout), each its own sequence
    bool short_window = false; // forward only: a short sliding window (fwd_config::kv_window keys per tile)
};

// Packed documents (attention_varlen): document d holds the query rows q[d] .. q[d + 1] - 1 and the key rows
// k[d] .. k[d + 1] - 1 of the packed (total rows, heads, D) tensors; blocks_q[d] and blocks_k[d] count the query and
// key blocks (of the kernel's block sizes) of the documents before d. prepare_varlen writes all four from the caller's
// cu_seqlens, clamped to be non-decreasing and within the totals, so any input keeps every access inside the
// tensors (a decreasing entry reads as an empty document). Two documents follow the caller's: the query rows past
// its last offset (they see no key, so their output is written as zeros) and the key rows past it.
struct varlen_layout {
    const int *q = nullptr, *k = nullptr, *blocks_q = nullptr, *blocks_k = nullptr;
    int count = 0; // documents, the two trailing ones included
    // The document holding block `block` of the packed order (blocks: blocks_q or blocks_k): the last d with
    // blocks[d] <= block, which skips empty documents.
    __device__ inline int doc_of(const int *blocks, int block) const {
        int lo = 0, hi = count - 1;
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (blocks[mid] <= block) lo = mid;
            else hi = mid - 1;
        }
        return lo;
    }
    __device__ inline int doc_of_block(int block) const { return doc_of(blocks_q, block); }
    // The backward's row buffers give each document's query rows their own run of whole BWD_ROW_PAD-row blocks
    // (blocks_q at that block size): padded row i holds the packed query row returned, or none (-1: padding).
    __device__ inline int packed_row(int i, int pad_rows) const {
        const int d = doc_of(blocks_q, i / pad_rows), j = i - blocks_q[d] * pad_rows;
        return j < q[d + 1] - q[d] ? q[d] + j : -1;
    }
};
// Query rows per forward task (attn_fwd's BLOCK_Q): the block size of varlen_layout::blocks_q for the forward.
constexpr int fwd_block_q(int head_dim) { return 64 * fwd_config_for(head_dim).consumers; }
// Ints of scratch the layout takes for `docs` caller documents: four arrays of docs + 3 offsets.
inline int64_t varlen_layout_ints(int docs) { return 4 * (int64_t(docs) + 3); }
// The layout in `scratch` (varlen_layout_ints(docs) ints), written by prepare_varlen from cu_seqlens_q / _k (docs + 1
// ints each, on the device).
varlen_layout varlen_layout_at(int *scratch, int docs);
cudaError_t prepare_varlen(const int *cu_q, const int *cu_k, int docs, int total_q, int total_k, int q_block_rows,
                           int k_block_rows, int *scratch, cudaStream_t stream);

using tk_kernels::out4;
using tk_kernels::tensor4;

struct fwd_problem {
    tensor4 q, k, v;
    out4 o;     // (batch, q_heads, q_len, head_dim)
    float *lse; // (batch, q_heads, q_len) fp32, contiguous: natural-log sum of exp of the scaled scores
    int *task_counter; // 2 ints of device memory, zero at launch, that the blocks draw tasks from; left zero again
    int batch, q_heads, kv_heads, q_len, kv_len, head_dim;
    band window; // causal is {WINDOW_UNLIMITED, 0}
    float scale;
    float softcap; // 0: none
    dtype type;
    // Packed documents: batch 1, q_len / kv_len the total rows, lse (q_heads, total rows); the layout prepared.
    bool varlen = false;
    varlen_layout docs{};
};

// Launches the forward for a supported head_dim (the caller checked everything else).
cudaError_t forward(const fwd_problem &p, cudaStream_t stream);
// The forward for one head dimension D (defined in attention_fwd_launch.cuh, instantiated in attention_fwd_d<D>.cu).
template <int D> cudaError_t forward_for(const fwd_problem &p, cudaStream_t stream);

// Row tiles of the backward's per-query-row buffers: lse2 and delta are (batch, q_heads, bwd_scratch().rows), each
// sequence (packed: each document) padded to whole tiles.
constexpr int BWD_ROW_PAD = 128;
inline int padded_q_len(int q_len) { return (q_len + BWD_ROW_PAD - 1) / BWD_ROW_PAD * BWD_ROW_PAD; }

struct bwd_problem {
    tensor4 q, k, v;         // as given to the forward
    tensor4 o, dout;         // (batch, q_heads, q_len, head_dim)
    const float *lse;        // the forward's (batch, q_heads, q_len), contiguous
    float *lse2, *delta;     // scratch: bwd_scratch(*this).row_floats each, written by the preparation
    float *dq_accum;         // fp32 scratch: bwd_scratch(*this).dq_floats, zeroed by the preparation
    out4 dk, dv;             // (batch, kv_heads, kv_len, head_dim), in the input dtype
    int batch, q_heads, kv_heads, q_len, kv_len, head_dim;
    band window;
    float scale;
    float softcap;
    dtype type;
    // Packed documents, as in fwd_problem (o and dout packed like q); the layout prepared with BWD_ROW_PAD-row query
    // blocks and bwd_block_k(head_dim)-key blocks.
    bool varlen = false;
    varlen_layout docs{};
    // Optional, for dQ converted inside the main kernel: the output, and bwd_scratch(*this).ints ints of scratch
    // that the preparation zeroes. Without them (sync null) backward_convert_dq converts all of dQ.
    out4 dq{};
    int *sync = nullptr;
};

// The backward's fp32 dQ accumulator is dense: (batch, q_heads, head_dim, padded_q_len) where the kernel computes
// dQ transposed (attention_configs.cuh), else (batch, q_heads, padded_q_len, head_dim). It holds dQ / scale:
// backward_convert_dq applies the softmax scale.
constexpr bool dq_accum_transposed(int head_dim) { return bwd_config_for(head_dim).dq_transposed; }

// dQ goes from the accumulator to the output in items of BWD_CONVERT_ROWS query rows of one head. Where the main
// kernel converts (rows of the untransposed accumulator, one float4 per lane of a warp), its blocks that run out of
// tasks convert the items of every (batch, kv head) whose tasks have all finished, flagging each;
// backward_convert_dq then converts the items left unflagged.
constexpr int BWD_CONVERT_ROWS = 64;
constexpr bool bwd_kernel_converts_dq(int head_dim) { return bwd_config_for(head_dim).converts_dq; }
// Keys per backward task. Causal tasks go heaviest first across heads when a head's key blocks fill a round and the
// heads are few (attention_bwd_kernel.cuh's get_task).
constexpr int bwd_block_k(int head_dim) { return bwd_config_for(head_dim).block_k(); }
inline bool bwd_heaviest_first(const bwd_problem &p) {
    const int block_k = bwd_block_k(p.head_dim);
    return p.window.causal() && (p.kv_len + block_k - 1) / block_k >= 64 && p.batch * p.kv_heads < 32;
}
// Whether this call converts dQ in the main kernel (scratch given). Not in heaviest-first order: every head's last
// task then runs in the final round, so nothing is complete before the end and counting the tasks only costs.
inline bool bwd_converts_in_kernel(const bwd_problem &p) {
    return bwd_kernel_converts_dq(p.head_dim) && p.sync && p.dq.ptr && !bwd_heaviest_first(p) && !p.varlen;
}

// Sizes of the backward's scratch buffers, and where each part of the int scratch (`sync`) sits. The int scratch
// serves the in-kernel dQ conversion: one completion count per (batch, kv head), the next unclaimed item, and one
// flag per item.
struct bwd_scratch_layout {
    int rows;                // query rows per head in the row buffers and the accumulator: padded_q_len(q_len), plus
                             // (packed documents) a block per document for each one's own padding
    int64_t row_floats;      // lse2 and delta, each: (batch, q_heads, rows)
    int64_t dq_floats;       // the dQ accumulator: (batch, q_heads, rows, head_dim), transposed or not
    int64_t convert_items;   // dQ conversion items: batch * q_heads * rows / BWD_CONVERT_ROWS
    int items_per_head;      // rows / BWD_CONVERT_ROWS
    int64_t done, next_item, converted; // int offsets: counts [batch * kv_heads], one int, flags [convert_items]
    int64_t ints;            // the int scratch in all
};
inline bwd_scratch_layout bwd_scratch(int batch, int q_heads, int kv_heads, int q_len, int head_dim,
                                      int documents = 0) {
    bwd_scratch_layout s{};
    s.rows = padded_q_len(q_len) + documents * BWD_ROW_PAD;
    s.row_floats = int64_t(batch) * q_heads * s.rows;
    s.dq_floats = s.row_floats * head_dim;
    s.items_per_head = s.rows / BWD_CONVERT_ROWS;
    s.convert_items = int64_t(batch) * q_heads * s.items_per_head;
    s.done = 0;
    s.next_item = s.done + int64_t(batch) * kv_heads;
    s.converted = s.next_item + 1;
    s.ints = s.converted + s.convert_items;
    return s;
}
inline bwd_scratch_layout bwd_scratch(const bwd_problem &p) {
    return bwd_scratch(p.batch, p.q_heads, p.kv_heads, p.q_len, p.head_dim, p.varlen ? p.docs.count : 0);
}
// The sizes binding.cpp allocates by.
inline int64_t dq_accum_floats(const bwd_problem &p) { return bwd_scratch(p).dq_floats; }
inline int64_t bwd_sync_ints(const bwd_problem &p) { return bwd_scratch(p).ints; }

// The int scratch as typed pointers (null where the call does not convert in the kernel).
struct bwd_sync {
    int *done = nullptr;      // per (batch, kv head): consumer-task completions (2 per task)
    int *next_item = nullptr; // the next conversion item to claim
    int *converted = nullptr; // per item: 1 once written
};
inline bwd_sync bwd_sync_of(const bwd_problem &p) {
    if (!bwd_converts_in_kernel(p)) return {};
    const bwd_scratch_layout s = bwd_scratch(p);
    return {p.sync + s.done, p.sync + s.next_item, p.sync + s.converted};
}

// Prepares lse2 / delta, then runs the backward kernel for a supported head_dim (dQ lands in dq_accum).
cudaError_t backward(const bwd_problem &p, cudaStream_t stream);
cudaError_t backward_prepare(const bwd_problem &p, cudaStream_t stream);
// Writes dQ = scale * dq_accum in the input dtype, (batch, q_heads, q_len, head_dim) with the given strides.
cudaError_t backward_convert_dq(const bwd_problem &p, out4 dq, cudaStream_t stream);
// The backward's main kernel for one head dimension D (defined in attention_bwd_launch.cuh, instantiated in
// attention_bwd_d<D>.cu).
template <int D> cudaError_t backward_for(const bwd_problem &p, cudaStream_t stream);

} // namespace tk_attention
