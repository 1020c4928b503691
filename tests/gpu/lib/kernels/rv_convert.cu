// Register vectors: initialisers, and copy() across element types and across the naive, ortho
// and align layouts. Results are stored once per replica lane so that every copy is checked.
#include "harness.cuh"
#include "rt_io.cuh"

using namespace kittens;

namespace {

// which: 0 zero, 1 one, 2 pos_infty, 3 neg_infty.
template <typename T, typename L, int N> __global__ void init_kernel(T *out, int which) {
    rv<T, N, L> v;
    switch (which) {
    case 0: zero(v); break;
    case 1: one(v); break;
    case 2: pos_infty(v); break;
    default: neg_infty(v); break;
    }
    rt_io::store_replicas(out, v);
}
template <typename T, typename L, int N> int run_init(void **b, const long long *a) {
    init_kernel<T, L, N><<<1, 32>>>((T *)b[0], int(a[0]));
    return 0;
}

template <typename TS, typename LS, typename TD, typename LD, int N> __global__ void copy_kernel(const TS *in, TD *out) {
    rv<TS, N, LS> s;
    rv<TD, N, LD> d;
    rt_io::load(s, in);
    copy(d, s);
    rt_io::store_replicas(out, d);
}
template <typename TS, typename LS, typename TD, typename LD, int N> int run_copy(void **b, const long long *) {
    copy_kernel<TS, LS, TD, LD, N><<<1, 32>>>((const TS *)b[0], (TD *)b[1]);
    return 0;
}

template <typename TS, typename LS, typename TD, typename LD, int N> void add_copy() {
    tk_test::add(std::string("rv_copy/") + tk_test::dtype_name<TS>() + "_" + tk_test::layout_name<LS>() + "_to_" +
                     tk_test::dtype_name<TD>() + "_" + tk_test::layout_name<LD>() + "/" + std::to_string(N),
                 &run_copy<TS, LS, TD, LD, N>);
}
// Every layout pair, same dtype, on lengths that leave the last naive slot full (128), half
// full (48), and a vector smaller than a warp (16).
template <typename T, typename LS, typename LD> void add_layout_pair() {
    add_copy<T, LS, T, LD, 16>();
    add_copy<T, LS, T, LD, 48>();
    add_copy<T, LS, T, LD, 128>();
}
template <typename T, typename LS> void add_layout_pairs_from() {
    add_layout_pair<T, LS, naive_l>();
    add_layout_pair<T, LS, ortho_l>();
    add_layout_pair<T, LS, align_l>();
}
// dtype conversions within one layout.
template <typename L> void add_dtype_pairs() {
    add_copy<float, L, bf16, L, 64>();
    add_copy<bf16, L, float, L, 64>();
    add_copy<float, L, half, L, 64>();
    add_copy<half, L, float, L, 64>();
    add_copy<float, L, fp8e4m3, L, 64>();
    add_copy<fp8e4m3, L, float, L, 64>();
}
template <typename T, typename L> void add_init() {
    tk_test::add(std::string("rv_init/") + tk_test::dtype_name<T>() + "/" + tk_test::layout_name<L>() + "/16",
                 &run_init<T, L, 16>);
    tk_test::add(std::string("rv_init/") + tk_test::dtype_name<T>() + "/" + tk_test::layout_name<L>() + "/48",
                 &run_init<T, L, 48>);
}
template <typename T> void add_init_layouts() {
    add_init<T, naive_l>();
    add_init<T, ortho_l>();
    add_init<T, align_l>();
}

} // namespace

TK_TEST_REGISTER(rv_convert) {
    add_layout_pairs_from<float, naive_l>();
    add_layout_pairs_from<float, ortho_l>();
    add_layout_pairs_from<float, align_l>();
    add_layout_pairs_from<bf16, naive_l>();
    add_layout_pairs_from<bf16, ortho_l>();
    add_layout_pairs_from<bf16, align_l>();
    add_dtype_pairs<naive_l>();
    add_dtype_pairs<ortho_l>();
    add_dtype_pairs<align_l>();
    // dtype and layout at once
    add_copy<float, naive_l, bf16, align_l, 64>();
    add_copy<bf16, align_l, float, ortho_l, 64>();
    add_copy<half, ortho_l, float, naive_l, 64>();
    add_copy<fp8e4m3, naive_l, bf16, ortho_l, 64>();
    add_init_layouts<float>();
    add_init_layouts<bf16>();
    add_init_layouts<half>();
}
