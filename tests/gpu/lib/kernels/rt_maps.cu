// Register tiles: named unary and binary maps (tile-tile and tile-scalar). One kernel per tile
// type; the op is picked at run time (map_ops.cuh) so every op is covered without one kernel
// per op.
#include "harness.cuh"
#include "map_ops.cuh"
#include "reg_cases.cuh"
#include "rt_io.cuh"

using namespace kittens;

namespace {

template <typename T, int R, int C, typename L> __global__ void unary_kernel(const T *in, T *out, int op) {
    rt<T, R, C, L> x, y;
    rt_io::load(x, in);
    map_ops::unary(y, x, op);
    rt_io::store(out, y);
}
template <typename T, int R, int C, typename L> int run_unary(void **b, const long long *a) {
    unary_kernel<T, R, C, L><<<1, 32>>>((const T *)b[0], (T *)b[1], int(a[0]));
    return 0;
}

// scalar == 0: out = op(a, b), computed in place into a's registers (dst aliases a).
// scalar == 1: out = op(a, s[0]) into a separate tile.
template <typename T, int R, int C, typename L>
__global__ void binary_kernel(const T *a_in, const T *b_in, const T *s, T *out, int op, int scalar) {
    rt<T, R, C, L> a;
    rt_io::load(a, a_in);
    if (!scalar) {
        rt<T, R, C, L> b;
        rt_io::load(b, b_in);
        map_ops::binary(a, a, b, op);
        rt_io::store(out, a);
    } else {
        rt<T, R, C, L> y;
        const T v = s[0];
        map_ops::binary(y, a, v, op);
        rt_io::store(out, y);
    }
}
template <typename T, int R, int C, typename L> int run_binary(void **b, const long long *a) {
    binary_kernel<T, R, C, L><<<1, 32>>>((const T *)b[0], (const T *)b[1], (const T *)b[2], (T *)b[3], int(a[0]),
                                         int(a[1]));
    return 0;
}

} // namespace

TK_TEST_REGISTER(rt_maps) {
    tk_test::for_each_rt_case<float, bf16, half>([]<typename T, typename L, int R, int C>(const std::string &tag) {
        tk_test::add("rt_unary/" + tag, &run_unary<T, R, C, L>);
        tk_test::add("rt_binary/" + tag, &run_binary<T, R, C, L>);
    });
}
