// Register tiles: swap_layout (same matrix, other lane distribution) and transpose_sep.
// swap_layout is checked by storing the result through the OTHER layout's documented order: the
// matrix must come back unchanged.
#include "harness.cuh"
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

template <typename T, typename L, int R, int C> void add_one() {
    const std::string tag =
        std::string(tk_test::dtype_name<T>()) + "/" + tk_test::layout_name<L>() + "/" + tk_test::shape(R, C);
    tk_test::add("rt_swap/" + tag, &run_swap<T, R, C, L>);
    tk_test::add("rt_transpose/" + tag, &run_transpose<T, R, C, L>);
}
template <typename T, typename L> void add_shapes() {
    add_one<T, L, 16, 16>();
    add_one<T, L, 32, 64>();
    add_one<T, L, 64, 32>();
    add_one<T, L, 16, 128>();
}
template <typename L> void add_layout() {
    add_shapes<float, L>();
    add_shapes<bf16, L>();
    add_shapes<half, L>();
    add_shapes<fp8e4m3, L>();
}

} // namespace

TK_TEST_REGISTER(rt_layout_ops) {
    add_layout<row_l>();
    add_layout<col_l>();
}
