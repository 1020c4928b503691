// Host entry points of the quadratic-form Based kernels (based_quad_*_kernel.cuh), which the forward and backward
// dispatch take for short sequences without a recurrent state (docs/based.md, "Two algorithms").
#pragma once

#include "based.h"

namespace tk_based {

// The longest sequence the quadratic kernels take (from the measured crossover with the chunked kernels). A process
// setting, for tests and tuning: 0 sends every call to the chunked kernels. The binding copies it into each problem
// (fwd_problem::quadratic_max_len), which is what the dispatch reads.
inline constexpr int DEFAULT_QUADRATIC_MAX_LEN = 1024;
int quadratic_max_len();
void set_quadratic_max_len(int len);

// Whether a problem takes the quadratic kernels: no longer than its quadratic_max_len, no state enters or leaves (the
// quadratic form has none to read or write), a task counter for their dynamic schedule, and task ids that fit 32 bits.
bool takes_quadratic(const fwd_problem &p);
bool takes_quadratic(const bwd_problem &p);

// Heads per group of the quadratic kernels' task order (quad_task_at): as many as keep their K and V tiles within a
// share of L2 that leaves room for the rest.
inline int quadratic_heads_per_group(int len, int value_width) {
    constexpr long long L2_SHARE = 8ll << 20;
    const long long head_bytes = (long long)len * (FEATURE_DIM + value_width) * 2;
    return int(head_bytes >= L2_SHARE ? 1 : L2_SHARE / head_bytes);
}

cudaError_t quadratic_forward(const fwd_problem &p, cudaStream_t stream);
// The two passes, given the preparation's rinv and dD ((batch, heads, padded_len) fp32 each, padded_len a multiple of
// 128, zero past the end).
cudaError_t quadratic_backward(const bwd_problem &p, const float *rinv, const float *dd, int padded_len,
                               cudaStream_t stream);

} // namespace tk_based
