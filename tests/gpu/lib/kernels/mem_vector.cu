// Register vector loads and stores, per warp, for the naive, ortho and align layouts. A vector
// is `length` elements along one tensor row; block (x, y) moves chunk x of row y.
//   load path  0: load(rv, gl)            1: load(sv, gl) then load(rv, sv)
//   store path 0: store(gl, rv)           1: store(sv, rv) then store(gl, sv)
//              2: every lane writes every element it holds into its own row of a dump
//                 (lane, element), following rv_layout.cuh, so replicas are checked too.
#include "harness.cuh"

using namespace kittens;

namespace {

template <typename S> using gl_of = gl<S, 1, 1, -1, -1>;
template <typename S> __host__ gl_of<S> strided(S *p, int rows, int cols, long long stride) {
    return gl_of<S>(p, 1, 1, rows, cols, rows * stride, rows * stride, stride);
}

// rv_layout.cuh, restated: naive lane l holds 32s + l at slot s; ortho holds g and g+8 of each
// 16 (g = lane / 4); align holds pairs (2t, 2t+1) and (2t+8, 2t+9) of each 16 (t = lane % 4).
template <typename RV, typename T> __device__ void dump_lanes(T *dump, const RV &v) {
    using E = typename RV::T;
    const int lane = laneid(), g = lane / 4, t = lane % 4;
    T *mine = dump + lane * RV::length;
    if constexpr (std::same_as<typename RV::layout, naive_l>) {
        for (int s = 0; s < RV::outer_dim; s++)
            if (s * 32 + lane < RV::length) mine[s * 32 + lane] = convert<T>(v.data[s][0]);
    } else if constexpr (std::same_as<typename RV::layout, ortho_l>) {
        for (int k = 0; k < RV::tiles; k++) {
            mine[16 * k + g] = convert<T>(v.data[k][0]);
            mine[16 * k + g + 8] = convert<T>(v.data[k][1]);
        }
    } else {
        for (int k = 0; k < RV::tiles; k++)
            for (int h = 0; h < 2; h++) {
                const E *e = reinterpret_cast<const E *>(&v.data[k][h]);
                mine[16 * k + 2 * t + 8 * h] = convert<T>(e[0]);
                mine[16 * k + 2 * t + 8 * h + 1] = convert<T>(e[1]);
            }
    }
}

template <typename RV, typename S>
__global__ void rv_paths(gl_of<S> in, gl_of<S> out, S *dump, int load_path, int store_path) {
    extern __shared__ alignment_dummy shm[];
    shared_allocator al(shm);
    using SV = sv<S, RV::length>;
    SV &s = al.allocate<SV>();
    const coord idx{0, 0, int(blockIdx.y), int(blockIdx.x)};
    RV v;
    if (load_path == 0) {
        load(v, in, idx);
    } else {
        load(s, in, idx);
        load(v, s);
    }
    if (store_path == 0) {
        store(out, v, idx);
    } else if (store_path == 1) {
        store(s, v);
        store(out, s, idx);
    } else {
        dump_lanes(dump + (blockIdx.y * gridDim.x + blockIdx.x) * 32 * RV::length, v);
    }
}

// args: rows, cols, in_stride, in_offset, out_stride, out_offset, load_path, store_path
template <typename RV, typename S> int run_rv_paths(void **b, const long long *a) {
    constexpr int smem = 2048;
    const int rows = int(a[0]), cols = int(a[1]);
    const dim3 grid((cols + RV::length - 1) / RV::length, rows);
    auto in = strided((S *)b[0] + a[3], rows, cols, a[2]);
    auto out = strided((S *)b[1] + a[5], rows, cols, a[4]);
    rv_paths<RV, S><<<grid, 32, smem>>>(in, out, (S *)b[2], int(a[6]), int(a[7]));
    return 0;
}

template <typename R, typename S, typename L, int N> void add_one() {
    tk_test::add(std::string("mem_rv/") + tk_test::dtype_name<R>() + "/" + tk_test::dtype_name<S>() + "/" +
                     tk_test::layout_name<L>() + "/" + std::to_string(N),
                 &run_rv_paths<rv<R, N, L>, S>);
}
template <typename R, typename S, typename L> void add_lengths() {
    add_one<R, S, L, 16>();
    add_one<R, S, L, 48>(); // naive: a partly filled second slot
    add_one<R, S, L, 64>();
}
template <typename L> void add_layout() {
    add_lengths<float, float, L>();
    add_lengths<bf16, bf16, L>();
    add_lengths<half, half, L>();
    add_lengths<float, bf16, L>();
    add_lengths<bf16, float, L>();
}

} // namespace

TK_TEST_REGISTER(mem_vector) {
    add_layout<naive_l>();
    add_layout<ortho_l>();
    add_layout<align_l>();
}
