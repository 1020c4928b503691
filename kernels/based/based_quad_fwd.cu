// The quadratic Based forward's entry point (based_quad_fwd_launch.cuh), which forward() takes for short sequences
// without a state.
#include "based.h"
#include "based_quad_fwd_launch.cuh"

namespace tk_based {

cudaError_t quadratic_forward(const fwd_problem &p, cudaStream_t stream) {
    if (p.type == dtype::bf16) return quadratic_forward_in<kittens::bf16>(p, stream);
    return quadratic_forward_in<kittens::half>(p, stream);
}

} // namespace tk_based
