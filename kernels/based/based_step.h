// Host entry point of the Based decoding step: one new token per (batch, head) sequence, added to the recurrent state
// in place, and that token's output read from the updated state. Plain CUDA types only (binding.cpp includes it,
// based_step.cu implements it).
//
// The step reads and writes the fp32 state (value_dim x STATE_FEATURES per head) once and does a few FLOPs per
// element: it is bound by memory bandwidth, so it is a plain CUDA kernel with 16-byte accesses, not a tile kernel.
#pragma once

#include "based.h"

#include <cstdint>

namespace tk_based {

// A (batch, heads, dim) tensor of one token per sequence, with any strides (in elements): the projections of a
// decoding step hand over slices of one fused output, and copying them would cost more than the step reads.
struct token3 {
    const void *ptr;
    int64_t stride_b, stride_h, stride_d;
};

struct step_problem {
    token3 q, k;       // (batch, heads, FEATURE_DIM)
    token3 v;          // (batch, heads, value_dim)
    void *o;           // (batch, heads, value_dim), contiguous, v's dtype
    float *kv, *k_sum; // the state in based.h's layout, updated in place
    int batch, heads, value_dim;
    float scale;    // multiplies the query only
    bool normalize; // o = num / (den + eps), else num
    float eps;
    dtype type;
};

// kv += v phi(k)^T and k_sum += phi(k), then o = kv phi(scale q) (/ (k_sum . phi(scale q) + eps)): the output sees
// the token itself, as in the forward. For a supported value_dim; the caller checked everything else.
cudaError_t step(const step_problem &p, cudaStream_t stream);

} // namespace tk_based
