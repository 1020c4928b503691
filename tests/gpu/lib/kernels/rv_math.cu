// Register vectors: named unary and binary maps, and whole-vector reductions (result in every
// lane).
#include "harness.cuh"
#include "map_ops.cuh"
#include "reg_cases.cuh"
#include "rt_io.cuh"

using namespace kittens;

namespace {

template <typename T, typename L, int N> __global__ void unary_kernel(const T *in, T *out, int op) {
    rv<T, N, L> x, y;
    rt_io::load(x, in);
    map_ops::unary(y, x, op);
    rt_io::store_replicas(out, y);
}
template <typename T, typename L, int N> int run_unary(void **b, const long long *a) {
    unary_kernel<T, L, N><<<1, 32>>>((const T *)b[0], (T *)b[1], int(a[0]));
    return 0;
}

// Ops as in map_ops.cuh. scalar == 0: vector-vector (in place); scalar == 1: vector-scalar
// with s[0].
template <typename T, typename L, int N>
__global__ void binary_kernel(const T *a_in, const T *b_in, const T *s, T *out, int op, int scalar) {
    rv<T, N, L> a, b;
    rt_io::load(a, a_in);
    rt_io::load(b, b_in);
    const T v = s[0];
    if (!scalar) map_ops::binary(a, a, b, op);
    else map_ops::binary(a, a, v, op);
    rt_io::store_replicas(out, a);
}
template <typename T, typename L, int N> int run_binary(void **b, const long long *a) {
    binary_kernel<T, L, N><<<1, 32>>>((const T *)b[0], (const T *)b[1], (const T *)b[2], (T *)b[3], int(a[0]), int(a[1]));
    return 0;
}

// op: 0 max, 1 min, 2 sum, 3 prod; with_acc: result = op(acc[0], reduction). out: one value per
// lane (32), all of which must agree.
template <typename T, typename L, int N>
__global__ void reduce_kernel(const T *in, const T *acc, T *out, int op, int with_acc) {
    rv<T, N, L> x;
    rt_io::load(x, in);
    T r = acc[0];
    if (with_acc) {
        switch (op) {
        case 0: max(r, x, r); break;
        case 1: min(r, x, r); break;
        case 2: sum(r, x, r); break;
        default: prod(r, x, r); break;
        }
    } else {
        switch (op) {
        case 0: max(r, x); break;
        case 1: min(r, x); break;
        case 2: sum(r, x); break;
        default: prod(r, x); break;
        }
    }
    out[laneid()] = r;
}
template <typename T, typename L, int N> int run_reduce(void **b, const long long *a) {
    reduce_kernel<T, L, N><<<1, 32>>>((const T *)b[0], (const T *)b[1], (T *)b[2], int(a[0]), int(a[1]));
    return 0;
}

template <typename T, typename L, int N> void add_one() {
    const std::string tag = tk_test::case_tag<T, L>(std::to_string(N));
    tk_test::add("rv_unary/" + tag, &run_unary<T, L, N>);
    tk_test::add("rv_binary/" + tag, &run_binary<T, L, N>);
    tk_test::add("rv_reduce/" + tag, &run_reduce<T, L, N>);
}
template <typename T, typename L> void add_lengths() {
    add_one<T, L, 16>();
    add_one<T, L, 48>();
    add_one<T, L, 128>();
}
template <typename T> void add_layouts() {
    add_lengths<T, naive_l>();
    add_lengths<T, ortho_l>();
    add_lengths<T, align_l>();
}

} // namespace

TK_TEST_REGISTER(rv_math) {
    add_layouts<float>();
    add_layouts<bf16>();
    add_layouts<half>();
}
