// The Based forward: the chunked kernels for each value block width (based_fwd_launch.cuh), and the entry point that
// takes an empty sequence, the quadratic kernels (based_quad_fwd.cu) or the chunked ones (based_configs.cuh decides).
#include "based.h"
#include "based_configs.cuh"
#include "based_fwd_launch.cuh"

namespace tk_based {

template cudaError_t forward_for<16>(const fwd_problem &p, cudaStream_t stream);
template cudaError_t forward_for<32>(const fwd_problem &p, cudaStream_t stream);
template cudaError_t forward_for<48>(const fwd_problem &p, cudaStream_t stream);
template cudaError_t forward_for<64>(const fwd_problem &p, cudaStream_t stream);

cudaError_t forward(const fwd_problem &p, cudaStream_t stream) {
    if (p.batch <= 0 || p.heads <= 0) return cudaSuccess;
    if (p.len <= 0) { // no token: the final state is the initial one
        if (!p.kv_final) return cudaSuccess;
        const size_t heads = size_t(p.batch) * p.heads;
        const size_t kv_bytes = heads * p.value_dim * STATE_FEATURES * sizeof(float);
        const size_t sum_bytes = heads * STATE_FEATURES * sizeof(float);
        cudaError_t e = p.kv0 ? cudaMemcpyAsync(p.kv_final, p.kv0, kv_bytes, cudaMemcpyDeviceToDevice, stream)
                              : cudaMemsetAsync(p.kv_final, 0, kv_bytes, stream);
        if (e != cudaSuccess) return e;
        return p.k_sum0 ? cudaMemcpyAsync(p.k_sum_final, p.k_sum0, sum_bytes, cudaMemcpyDeviceToDevice, stream)
                        : cudaMemsetAsync(p.k_sum_final, 0, sum_bytes, stream);
    }
    if (!supported_value_dim(p.value_dim) || impossible_choice(p)) return cudaErrorInvalidValue;
    if (takes_quadratic(p)) return quadratic_forward(p, stream);
    switch (forward_value_block(p.value_dim)) {
    case 16: return forward_for<16>(p, stream);
    case 32: return forward_for<32>(p, stream);
    case 48: return forward_for<48>(p, stream);
    default: return forward_for<64>(p, stream);
    }
}

} // namespace tk_based
