// The quadratic Based forward (based_quad_fwd_kernel.cuh): its launch per dtype and value tile width, and the length
// up to which the dispatch takes it.
#include "based_launch_maps.cuh"
#include "based_quad.h"
#include "based_quad_fwd_kernel.cuh"

#include <atomic>

namespace tk_based {

namespace {

std::atomic<int> quadratic_limit{DEFAULT_QUADRATIC_MAX_LEN};

template <typename T, int DV> cudaError_t launch_quadratic_forward(const fwd_problem &p, cudaStream_t stream) {
    using K = based_quad_fwd<T, DV>;
    const int blocks = (p.len + QUAD_BLOCK - 1) / QUAD_BLOCK;
    const typename K::globals g{input_map<typename K::qk_gl>(p.q, p.batch, p.heads, p.len, K::DK),
                                input_map<typename K::qk_gl>(p.k, p.batch, p.heads, p.len, K::DK),
                                input_map<typename K::v_gl>(p.v, p.batch, p.heads, p.len, p.value_dim),
                                output_map<typename K::v_gl>(p.o, p.batch, p.heads, p.len, p.value_dim),
                                p.den, p.heads, p.len, blocks, p.batch * p.heads * blocks, p.scale, p.eps,
                                p.normalize ? 1 : 0, quadratic_heads_per_group(p.len, DV), p.task_counter};
    return kittens::lcsf::launch<K>(g, g.num_tasks, stream);
}

template <typename T> cudaError_t quadratic_forward_in(const fwd_problem &p, cudaStream_t stream) {
    if (quad_value_width(p.value_dim) == 64) return launch_quadratic_forward<T, 64>(p, stream);
    return launch_quadratic_forward<T, 128>(p, stream);
}

} // namespace

int quadratic_max_len() { return quadratic_limit.load(std::memory_order_relaxed); }
void set_quadratic_max_len(int len) { quadratic_limit.store(len, std::memory_order_relaxed); }

namespace {
// The quadratic kernels number their tasks (batch x heads x blocks of 128 rows) with 32-bit integers, and their
// blocks draw ids up to one grid past the last task.
bool tasks_fit(int batch, int heads, int len) {
    return int64_t(batch) * heads * ((len + QUAD_BLOCK - 1) / QUAD_BLOCK) < (int64_t(1) << 31) - (1 << 16);
}
} // namespace

bool takes_quadratic(const fwd_problem &p) {
    return p.len <= p.quadratic_max_len && !p.kv0 && !p.kv_final && p.task_counter && tasks_fit(p.batch, p.heads, p.len);
}
bool takes_quadratic(const bwd_problem &p) {
    return p.len <= p.quadratic_max_len && !p.kv0 && !p.d_kv_final && !p.d_kv0 && p.task_counter &&
           tasks_fit(p.batch, p.heads, p.len);
}

cudaError_t quadratic_forward(const fwd_problem &p, cudaStream_t stream) {
    if (p.type == dtype::bf16) return quadratic_forward_in<kittens::bf16>(p, stream);
    return quadratic_forward_in<kittens::half>(p, stream);
}

} // namespace tk_based
