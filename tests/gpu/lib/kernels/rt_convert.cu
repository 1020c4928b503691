// Register tiles: round trip through the documented layout, initialisers, and copy() across
// element types.
#include "harness.cuh"
#include "rt_io.cuh"

using namespace kittens;

namespace {

template <typename T, int R, int C, typename L> __global__ void io_roundtrip(const T *in, T *out) {
    rt<T, R, C, L> t;
    rt_io::load(t, in);
    rt_io::store(out, t);
}
template <typename T, int R, int C, typename L> int run_io(void **b, const long long *) {
    io_roundtrip<T, R, C, L><<<1, 32>>>((const T *)b[0], (T *)b[1]);
    return 0;
}

// which: 0 zero, 1 one, 2 pos_infty, 3 neg_infty.
template <typename T, int R, int C, typename L> __global__ void init_kernel(T *out, int which) {
    rt<T, R, C, L> t;
    switch (which) {
    case 0: zero(t); break;
    case 1: one(t); break;
    case 2: pos_infty(t); break;
    default: neg_infty(t); break;
    }
    rt_io::store(out, t);
}
template <typename T, int R, int C, typename L> int run_init(void **b, const long long *a) {
    init_kernel<T, R, C, L><<<1, 32>>>((T *)b[0], int(a[0]));
    return 0;
}

template <typename TD, typename TS, int R, int C, typename L> __global__ void copy_kernel(const TS *in, TD *out) {
    rt<TS, R, C, L> s;
    rt<TD, R, C, L> d;
    rt_io::load(s, in);
    copy(d, s);
    rt_io::store(out, d);
}
template <typename TD, typename TS, int R, int C, typename L> int run_copy(void **b, const long long *) {
    copy_kernel<TD, TS, R, C, L><<<1, 32>>>((const TS *)b[0], (TD *)b[1]);
    return 0;
}

template <typename T, int R, int C, typename L> std::string tag() {
    return std::string(tk_test::dtype_name<T>()) + "/" + tk_test::layout_name<L>() + "/" + tk_test::shape(R, C);
}

template <typename T, typename L, int R, int C> void add_io_init() {
    tk_test::add("rt_io/" + tag<T, R, C, L>(), &run_io<T, R, C, L>);
    if constexpr (!base_types::fp8<T>) tk_test::add("rt_init/" + tag<T, R, C, L>(), &run_init<T, R, C, L>);
}
template <typename T, typename L> void add_io_init_shapes() {
    add_io_init<T, L, 16, 16>();
    add_io_init<T, L, 32, 64>();
    add_io_init<T, L, 64, 32>();
    add_io_init<T, L, 16, 128>();
}

template <typename TD, typename TS, typename L, int R, int C> void add_copy() {
    tk_test::add(std::string("rt_copy/") + tk_test::dtype_name<TS>() + "_to_" + tk_test::dtype_name<TD>() + "/" +
                     tk_test::layout_name<L>() + "/" + tk_test::shape(R, C),
                 &run_copy<TD, TS, R, C, L>);
}
// Every conversion pair on two shapes (fp32 -> bf16 on all four, below).
template <typename TD, typename TS, typename L> void add_copy_pair() {
    add_copy<TD, TS, L, 16, 16>();
    add_copy<TD, TS, L, 64, 32>();
}

template <typename L> void add_layout() {
    add_io_init_shapes<float, L>();
    add_io_init_shapes<bf16, L>();
    add_io_init_shapes<half, L>();
    add_io_init_shapes<fp8e4m3, L>();
    add_copy_pair<bf16, float, L>();
    add_copy_pair<float, bf16, L>();
    add_copy_pair<half, float, L>();
    add_copy_pair<float, half, L>();
    add_copy_pair<bf16, half, L>();
    add_copy_pair<half, bf16, L>();
    add_copy_pair<fp8e4m3, float, L>();
    add_copy_pair<float, fp8e4m3, L>();
    add_copy_pair<fp8e5m2, bf16, L>();
    add_copy_pair<bf16, fp8e5m2, L>();
    add_copy_pair<fp8e4m3, fp8e5m2, L>();
    add_copy<bf16, float, L, 32, 64>();
    add_copy<bf16, float, L, 16, 128>();
}

} // namespace

TK_TEST_REGISTER(rt_convert) {
    add_layout<row_l>();
    add_layout<col_l>();
}
