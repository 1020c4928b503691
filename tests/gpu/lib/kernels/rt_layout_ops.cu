// Register tiles: swap_layout (same matrix, other lane distribution) and transpose_sep.
// swap_layout is checked by storing the result through the OTHER layout's documented order: the
// matrix must come back unchanged.
#include "harness.cuh"
#include "reg_cases.cuh"
#include "rt_io.cuh"

using namespace kittens;

namespace {

template <typename T, int R, int C, typename L> __global__ void swap_kernel(const T *in, T *out) {
    rt<T, R, C, L> s;
    rt<T, R, C, ducks::rt_layout::transpose<L>> d;
    rt_io::load(s, in);
    swap_layout(d, s);
    rt_io::store(out, d);
}
template <typename T, int R, int C, typename L> int run_swap(void **b, const long long *) {
    swap_kernel<T, R, C, L><<<1, 32>>>((const T *)b[0], (T *)b[1]);
    return 0;
}

// in: R x C, out: C x R.
template <typename T, int R, int C, typename L> __global__ void transpose_kernel(const T *in, T *out) {
    rt<T, R, C, L> s;
    rt<T, C, R, L> d;
    rt_io::load(s, in);
    transpose_sep(d, s);
    rt_io::store(out, d);
}
template <typename T, int R, int C, typename L> int run_transpose(void **b, const long long *) {
    transpose_kernel<T, R, C, L><<<1, 32>>>((const T *)b[0], (T *)b[1]);
    return 0;
}

} // namespace

TK_TEST_REGISTER(rt_layout_ops) {
    tk_test::for_each_rt_case<float, bf16, half, fp8e4m3>([]<typename T, typename L, int R, int C>(const std::string &tag) {
        tk_test::add("rt_swap/" + tag, &run_swap<T, R, C, L>);
        tk_test::add("rt_transpose/" + tag, &run_transpose<T, R, C, L>);
    });
}
