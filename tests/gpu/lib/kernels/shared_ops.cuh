// The shared-ops test kernel, built by shared_ops.cu (per warp, NW = 1: the free functions) and
// group_shared_ops.cu (NW = 2, 4: group<NW>:: members). One block loads the inputs into shared
// memory, runs the op selected by `op` (ids listed in tests/gpu/lib/test_shared_ops.py) and writes
// the outputs back: D (the tile result), OR / OC (row / column vectors, or a vector op's result).
#pragma once

#include <cstring>

#include "harness.cuh"

using namespace kittens;

namespace shared_ops_test {

template <typename T> using gl_of = gl<T, 1, 1, -1, -1>;

// The same call at warp scope (free function) or group scope (member).
#define SCOPED(fn, ...)                                                                                                \
    do {                                                                                                               \
        if constexpr (NW == 1) ::kittens::fn(__VA_ARGS__);                                                             \
        else ::kittens::group<NW>::fn(__VA_ARGS__);                                                                    \
    } while (0)

template <typename T, int R, int C, int NW> struct io {
    gl_of<T> a, b, vr, vc, v2, d, orow, ocol;
};

template <typename T, int R, int C, int NW> __global__ void shared_ops(const __grid_constant__ io<T, R, C, NW> g, int op, float scalar_f) {
    extern __shared__ alignment_dummy shm[];
    shared_allocator al(shm);
    using ST = st<T, R, C>;
    using SR = sv<T, R>;
    using SC = sv<T, C>;
    ST &a = al.allocate<ST>(), &b = al.allocate<ST>(), &d = al.allocate<ST>();
    st<float, R, C> &f = al.allocate<st<float, R, C>>();
    SR &vr = al.allocate<SR>(), &orow = al.allocate<SR>();
    SC &vc = al.allocate<SC>(), &v2 = al.allocate<SC>(), &ocol = al.allocate<SC>();
    sv<float, C> &vf = al.allocate<sv<float, C>>();
    const T s = convert<T>(scalar_f);

    SCOPED(load, a, g.a, {0, 0});
    SCOPED(load, b, g.b, {0, 0});
    SCOPED(load, vr, g.vr, {0, 0});
    SCOPED(load, vc, g.vc, {0, 0});
    SCOPED(load, v2, g.v2, {0, 0});
    __syncthreads();
    switch (op) {
    // ----- tiles -----
    case 0: SCOPED(zero, d); break;
    case 1: SCOPED(one, d); break;
    case 2: SCOPED(pos_infty, d); break;
    case 3: SCOPED(neg_infty, d); break;
    case 4: SCOPED(copy, d, a); break;
    case 5: SCOPED(copy, f, a); __syncthreads(); SCOPED(copy, d, f); break;
    case 6: SCOPED(exp, d, a); break;
    case 7: SCOPED(exp2, d, a); break;
    case 8: SCOPED(log, d, a); break;
    case 9: SCOPED(abs, d, a); break;
    case 10: SCOPED(relu, d, a); break;
    case 11: SCOPED(neg, d, a); break;
    case 12: SCOPED(add, d, a, b); break;
    case 13: SCOPED(sub, d, a, b); break;
    case 14: SCOPED(mul, d, a, b); break;
    case 15: SCOPED(div, d, a, b); break;
    case 16: SCOPED(max, d, a, b); break;
    case 17: SCOPED(min, d, a, b); break;
    case 18: SCOPED(add, d, a, s); break;
    case 19: SCOPED(sub, d, a, s); break;
    case 20: SCOPED(mul, d, a, s); break;
    case 21: SCOPED(div, d, a, s); break;
    case 22: SCOPED(max, d, a, s); break;
    case 23: SCOPED(min, d, a, s); break;
    case 24: SCOPED(add_row, d, a, vr); break;
    case 25: SCOPED(sub_row, d, a, vr); break;
    case 26: SCOPED(mul_row, d, a, vr); break;
    case 27: SCOPED(div_row, d, a, vr); break;
    case 28: SCOPED(max_row, d, a, vr); break;
    case 29: SCOPED(min_row, d, a, vr); break;
    case 30: SCOPED(add_col, d, a, vc); break;
    case 31: SCOPED(sub_col, d, a, vc); break;
    case 32: SCOPED(mul_col, d, a, vc); break;
    case 33: SCOPED(div_col, d, a, vc); break;
    case 34: SCOPED(max_col, d, a, vc); break;
    case 35: SCOPED(min_col, d, a, vc); break;
    case 36: SCOPED(row_sum, orow, a); break;
    case 37: SCOPED(row_max, orow, a); break;
    case 38: SCOPED(row_min, orow, a); break;
    case 39: SCOPED(col_sum, ocol, a); break;
    case 40: SCOPED(col_max, ocol, a); break;
    case 41: SCOPED(col_min, ocol, a); break;
    case 42: SCOPED(row_sum, orow, a, vr); break;
    case 43: SCOPED(row_max, orow, a, vr); break;
    case 44: SCOPED(row_min, orow, a, vr); break;
    case 45: SCOPED(col_sum, ocol, a, vc); break;
    case 46: SCOPED(col_max, ocol, a, vc); break;
    case 47: SCOPED(col_min, ocol, a, vc); break;
    // in place: destination aliases a source
    case 48: SCOPED(add, a, a, b); __syncthreads(); SCOPED(copy, d, a); break;
    case 49: SCOPED(row_max, vr, a, vr); __syncthreads(); SCOPED(copy, orow, vr); break;
    // ----- vectors (length C) -----
    case 60: SCOPED(zero, ocol); break;
    case 61: SCOPED(one, ocol); break;
    case 62: SCOPED(pos_infty, ocol); break;
    case 63: SCOPED(neg_infty, ocol); break;
    case 64: SCOPED(copy, ocol, vc); break;
    case 65: SCOPED(copy, vf, vc); __syncthreads(); SCOPED(copy, ocol, vf); break;
    case 66: SCOPED(exp, ocol, vc); break;
    case 67: SCOPED(exp2, ocol, vc); break;
    case 68: SCOPED(log, ocol, vc); break;
    case 69: SCOPED(abs, ocol, vc); break;
    case 70: SCOPED(relu, ocol, vc); break;
    case 71: SCOPED(neg, ocol, vc); break;
    case 72: SCOPED(add, ocol, vc, v2); break;
    case 73: SCOPED(sub, ocol, vc, v2); break;
    case 74: SCOPED(mul, ocol, vc, v2); break;
    case 75: SCOPED(div, ocol, vc, v2); break;
    case 76: SCOPED(max, ocol, vc, v2); break;
    case 77: SCOPED(min, ocol, vc, v2); break;
    case 78: SCOPED(add, ocol, vc, s); break;
    case 79: SCOPED(sub, ocol, vc, s); break;
    case 80: SCOPED(mul, ocol, vc, s); break;
    case 81: SCOPED(div, ocol, vc, s); break;
    case 82: SCOPED(max, ocol, vc, s); break;
    case 83: SCOPED(min, ocol, vc, s); break;
    default: break;
    }
    __syncthreads();
    SCOPED(store, g.d, d, {0, 0});
    SCOPED(store, g.orow, orow, {0, 0});
    SCOPED(store, g.ocol, ocol, {0, 0});
}

// bufs: a, b (R x C), vr (R), vc, v2 (C), d (R x C), orow (R), ocol (C); args: op, float bits of the scalar
template <typename T, int R, int C, int NW> int run_shared_ops(void **b, const long long *a) {
    using ST = st<T, R, C>;
    constexpr int smem = shared_bytes_for<ST, ST, ST, st<float, R, C>, sv<T, R>, sv<T, R>, sv<T, C>, sv<T, C>, sv<T, C>, sv<float, C>>();
    if (int e = tk_test::launch_status(shared_ops<T, R, C, NW>, smem)) return e;
    auto mat = [](void *p) { return gl_of<T>((T *)p, 1, 1, R, C); };
    auto row = [](void *p, int n) { return gl_of<T>((T *)p, 1, 1, 1, n); };
    io<T, R, C, NW> g{mat(b[0]), mat(b[1]), row(b[2], R), row(b[3], C), row(b[4], C), mat(b[5]), row(b[6], R), row(b[7], C)};
    const int32_t bits = int32_t(a[1]);
    float scalar;
    std::memcpy(&scalar, &bits, sizeof(scalar));
    shared_ops<T, R, C, NW><<<1, NW * 32, smem>>>(g, int(a[0]), scalar);
    return 0;
}

template <typename T, int R, int C, int NW> void add_shared_ops() {
    const std::string scope = NW == 1 ? "warp" : "group" + std::to_string(NW);
    tk_test::add("shared_ops/" + scope + "/" + tk_test::dtype_name<T>() + "/" + tk_test::shape(R, C), &run_shared_ops<T, R, C, NW>);
}

} // namespace shared_ops_test

#undef SCOPED
