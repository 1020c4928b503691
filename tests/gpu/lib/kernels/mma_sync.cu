// Warp-level mma.sync: the four operand variants on bf16 and fp16 inputs over several shapes.
// Operands are placed in registers by rt_io from the documented fragment order, so a mismatch
// between the documents and what the tensor cores read shows up here as a wrong product.
#include "harness.cuh"
#include "rt_io.cuh"

using namespace kittens;

namespace {

enum variant { AB, ABt, AtB, AtBt };
constexpr const char *variant_name(variant v) {
    return v == AB ? "AB" : v == ABt ? "ABt" : v == AtB ? "AtB" : "AtBt";
}

// Global arrays (row-major): a is M x K (K x M for At*), b is K x N (N x K for *Bt), c and d M x N.
// in_place: accumulate onto d itself (d = a*b + d), otherwise into a separate tile.
template <variant V, typename T, int M, int N, int K, bool in_place>
__global__ void mma_kernel(const T *a_in, const T *b_in, const float *c_in, float *d_out) {
    constexpr bool trans_a = V == AtB || V == AtBt;
    constexpr bool trans_b = V == ABt || V == AtBt;
    using A = std::conditional_t<trans_a, rt<T, K, M, col_l>, rt<T, M, K, row_l>>;
    using B = std::conditional_t<trans_b, rt<T, N, K, row_l>, rt<T, K, N, col_l>>;
    A a;
    B b;
    rt_fl<M, N> c;
    rt_io::load(a, a_in);
    rt_io::load(b, b_in);
    rt_io::load(c, c_in);
    auto run = [&](rt_fl<M, N> &d) {
        if constexpr (V == AB) mma_AB(d, a, b, c);
        else if constexpr (V == ABt) mma_ABt(d, a, b, c);
        else if constexpr (V == AtB) mma_AtB(d, a, b, c);
        else mma_AtBt(d, a, b, c);
    };
    if constexpr (in_place) {
        run(c);
        rt_io::store(d_out, c);
    } else {
        rt_fl<M, N> d;
        run(d);
        rt_io::store(d_out, d);
    }
}
template <variant V, typename T, int M, int N, int K, bool in_place> int run_mma(void **b, const long long *) {
    mma_kernel<V, T, M, N, K, in_place><<<1, 32>>>((const T *)b[0], (const T *)b[1], (const float *)b[2], (float *)b[3]);
    return 0;
}

template <variant V, typename T, int M, int N, int K, bool in_place> void add_one() {
    tk_test::add(std::string("mma/") + variant_name(V) + "/" + tk_test::dtype_name<T>() + "/" + std::to_string(M) + "x" +
                     std::to_string(N) + "x" + std::to_string(K),
                 &run_mma<V, T, M, N, K, in_place>);
}
// Shapes are M x N x K. The larger accumulators run in place (d aliases c), as kernels use it.
template <variant V, typename T> void add_shapes() {
    add_one<V, T, 16, 16, 16, false>();
    add_one<V, T, 32, 64, 32, false>();
    add_one<V, T, 64, 32, 48, true>();
    add_one<V, T, 16, 128, 16, true>();
}
template <variant V> void add_dtypes() {
    add_shapes<V, bf16>();
    add_shapes<V, half>();
}

} // namespace

TK_TEST_REGISTER(mma_sync) {
    add_dtypes<AB>();
    add_dtypes<ABt>();
    add_dtypes<AtB>();
    add_dtypes<AtBt>();
}
