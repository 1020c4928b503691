// The Based backward's entry points: its scratch, and its dispatch over empty sequences, dtypes and value dimensions
// (based_bwd_launch.cuh).
#include "based.h"
#include "based_bwd_launch.cuh"
#include "based_configs.cuh"

namespace tk_based {

namespace {

// d kv0 and d k_sum0 when there is no token: the final state is the initial one.
cudaError_t initial_state_gradient_of_empty(const bwd_problem &p, cudaStream_t stream) {
    const size_t heads = size_t(p.batch) * p.heads;
    const size_t kv_bytes = heads * p.value_dim * STATE_FEATURES * sizeof(float), sum_bytes = heads * STATE_FEATURES * sizeof(float);
    cudaError_t e = cudaSuccess;
    if (p.d_kv0)
        e = p.d_kv_final ? cudaMemcpyAsync(p.d_kv0, p.d_kv_final, kv_bytes, cudaMemcpyDeviceToDevice, stream)
                         : cudaMemsetAsync(p.d_kv0, 0, kv_bytes, stream);
    if (e == cudaSuccess && p.d_k_sum0)
        e = p.d_k_sum_final ? cudaMemcpyAsync(p.d_k_sum0, p.d_k_sum_final, sum_bytes, cudaMemcpyDeviceToDevice, stream)
                            : cudaMemsetAsync(p.d_k_sum0, 0, sum_bytes, stream);
    return e;
}

} // namespace

size_t backward_workspace_bytes(const bwd_problem &p) {
    if (p.batch <= 0 || p.heads <= 0 || p.len <= 0) return 0;
    return bwd_scratch_of(p).bytes();
}

cudaError_t backward(const bwd_problem &p, cudaStream_t stream) {
    if (p.batch <= 0 || p.heads <= 0) return cudaSuccess;
    if (!supported_value_dim(p.value_dim) || (p.normalize && p.len > 0 && !p.den) || impossible_choice(p))
        return cudaErrorInvalidValue;
    if (p.len <= 0) return initial_state_gradient_of_empty(p, stream);
    const bwd_scratch s = bwd_scratch_of(p);
    void *scratch = p.workspace;
    if (!scratch)
        if (cudaError_t e = cudaMallocAsync(&scratch, s.bytes(), stream); e != cudaSuccess) return e;
    float *f = static_cast<float *>(scratch);
    cudaError_t e = cudaSuccess;
    if (s.split) e = cudaMemsetAsync(f + 2 * s.row_floats, 0, 2 * s.acc_floats * sizeof(float), stream);
    if (e == cudaSuccess)
        e = p.type == dtype::bf16 ? launch_backward<kittens::bf16>(p, s, f, stream) : launch_backward<kittens::half>(p, s, f, stream);
    if (p.workspace) return e;
    const cudaError_t freed = cudaFreeAsync(scratch, stream);
    return e != cudaSuccess ? e : freed;
}

} // namespace tk_based
