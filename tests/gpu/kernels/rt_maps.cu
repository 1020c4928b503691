// Register tiles: named unary and binary maps (tile-tile and tile-scalar). One kernel per tile
// type; the op is picked at run time so every op is covered without one kernel per op.
#include "harness.cuh"
#include "rt_io.cuh"

using namespace kittens;

namespace {

// op: 0 exp, 1 exp2, 2 log, 3 log2, 4 abs, 5 relu, 6 neg, 7 sqrt, 8 rsqrt.
template <typename T, int R, int C, typename L> __global__ void unary_kernel(const T *in, T *out, int op) {
    rt<T, R, C, L> x, y;
    rt_io::load(x, in);
    switch (op) {
    case 0: exp(y, x); break;
    case 1: exp2(y, x); break;
    case 2: log(y, x); break;
    case 3: log2(y, x); break;
    case 4: abs(y, x); break;
    case 5: relu(y, x); break;
    case 6: neg(y, x); break;
    case 7: sqrt(y, x); break;
    default: rsqrt(y, x); break;
    }
    rt_io::store(out, y);
}
template <typename T, int R, int C, typename L> int run_unary(void **b, const long long *a) {
    unary_kernel<T, R, C, L><<<1, 32>>>((const T *)b[0], (T *)b[1], int(a[0]));
    return 0;
}

// op: 0 add, 1 sub, 2 mul, 3 div, 4 max, 5 min.
// scalar == 0: out = op(a, b), computed in place into a's registers (dst aliases a).
// scalar == 1: out = op(a, s[0]) into a separate tile.
template <typename T, int R, int C, typename L>
__global__ void binary_kernel(const T *a_in, const T *b_in, const T *s, T *out, int op, int scalar) {
    rt<T, R, C, L> a;
    rt_io::load(a, a_in);
    if (!scalar) {
        rt<T, R, C, L> b;
        rt_io::load(b, b_in);
        switch (op) {
        case 0: add(a, a, b); break;
        case 1: sub(a, a, b); break;
        case 2: mul(a, a, b); break;
        case 3: div(a, a, b); break;
        case 4: max(a, a, b); break;
        default: min(a, a, b); break;
        }
        rt_io::store(out, a);
    } else {
        rt<T, R, C, L> y;
        const T v = s[0];
        switch (op) {
        case 0: add(y, a, v); break;
        case 1: sub(y, a, v); break;
        case 2: mul(y, a, v); break;
        case 3: div(y, a, v); break;
        case 4: max(y, a, v); break;
        default: min(y, a, v); break;
        }
        rt_io::store(out, y);
    }
}
template <typename T, int R, int C, typename L> int run_binary(void **b, const long long *a) {
    binary_kernel<T, R, C, L><<<1, 32>>>((const T *)b[0], (const T *)b[1], (const T *)b[2], (T *)b[3], int(a[0]),
                                         int(a[1]));
    return 0;
}

template <typename T, typename L, int R, int C> void add_one() {
    const std::string tag =
        std::string(tk_test::dtype_name<T>()) + "/" + tk_test::layout_name<L>() + "/" + tk_test::shape(R, C);
    tk_test::add("rt_unary/" + tag, &run_unary<T, R, C, L>);
    tk_test::add("rt_binary/" + tag, &run_binary<T, R, C, L>);
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
}

} // namespace

TK_TEST_REGISTER(rt_maps) {
    add_layout<row_l>();
    add_layout<col_l>();
}
