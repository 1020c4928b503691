// The dt pass's launch (mamba2_scan_launch.cuh), in a translation unit of its own: the forward and the backward both
// run it.
#include "mamba2_prepare_kernel.cuh"
#include "mamba2_scan_launch.cuh"

namespace tk_mamba2 {

cudaError_t launch_prepare(const fwd_problem &p, const workspace_layout &w, cudaStream_t stream) {
    using S = prepare_shape<configs::prepare()>;
    float *ws = static_cast<float *>(p.workspace);
    prep_args a{p.dt, p.A, p.dt_bias, p.seq_idx, ws, ws + w.vec_elems, p.seq_idx ? ws + w.seq_offset : nullptr,
                p.batch, p.len, p.heads, w.padded_len, w.chunks, p.dt_softplus ? 1 : 0, p.dt_min, p.dt_max};
    const dim3 grid(unsigned(p.batch) * unsigned(w.chunks), (p.heads + S::HEADS - 1) / S::HEADS);
    prepare_dt<S><<<grid, S::THREADS, 0, stream>>>(a);
    return cudaGetLastError();
}

} // namespace tk_mamba2
