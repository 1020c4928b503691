// Registration helpers shared by the per-warp register tile and vector tests: the name suffix
// every entry carries, and the grid of tile cases most of them cover.
#pragma once

#include "harness.cuh"

namespace tk_test {

// "<dtype>/<layout>/<size>", e.g. "bf16/row/32x64" for a tile or "fp32/ortho/48" for a vector.
template <typename T, typename L> std::string case_tag(const std::string &size) {
    return std::string(dtype_name<T>()) + "/" + layout_name<L>() + "/" + size;
}

// Calls add.template operator()<T, L, R, C>(case_tag) for each element type T in Ts, both tile
// layouts, and the tile shapes square (16x16), wide (32x64), tall (64x32) and one long row of
// base tiles (16x128).
template <typename... Ts, typename F> void for_each_rt_case(F &&add) {
    for_each_type<kittens::row_l, kittens::col_l>([&]<typename L>() {
        for_each_type<Ts...>([&]<typename T>() {
            add.template operator()<T, L, 16, 16>(case_tag<T, L>(shape(16, 16)));
            add.template operator()<T, L, 32, 64>(case_tag<T, L>(shape(32, 64)));
            add.template operator()<T, L, 64, 32>(case_tag<T, L>(shape(64, 32)));
            add.template operator()<T, L, 16, 128>(case_tag<T, L>(shape(16, 128)));
        });
    });
}

} // namespace tk_test
