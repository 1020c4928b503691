// The quadratic Based backward's entry point (based_quad_bwd_launch.cuh), which backward() takes for short sequences
// without a state once the preparation has run.
#include "based.h"
#include "based_quad_bwd_launch.cuh"

namespace tk_based {

cudaError_t quadratic_backward(const bwd_problem &p, const float *rinv, const float *dd, int padded_len,
                               cudaStream_t stream) {
    if (p.type == dtype::bf16) return quadratic_backward_in<kittens::bf16>(p, rinv, dd, padded_len, stream);
    return quadratic_backward_in<kittens::half>(p, rinv, dd, padded_len, stream);
}

} // namespace tk_based
