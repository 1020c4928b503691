// Register tiles: for_each_pair's (row, column) and `half`, lane_row and leads_row, checked against the
// documented fragment order (rt_io.cuh loads and stores from rt_layout.cuh, not from the visitor).
#include "harness.cuh"
#include "reg_cases.cuh"
#include "rt_io.cuh"

using namespace kittens;

namespace {

// index: the tile whose every element holds its own row-major index row * C + col, as for_each_pair reports it.
// half: the tile whose elements hold the `half` of their pair. x + 1: each pair of x, plus one, visited together
// with the index tile (two tiles zipped). mismatches: lanes that found lane_row / leads_row disagreeing with the
// visitor's rows (row layout).
template <typename L, int R, int C>
__global__ void elements_kernel(const float *x_in, float *index_out, float *half_out, float *x_out, int *mismatches) {
    rt<float, R, C, L> x, index, half;
    rt_io::load(x, x_in);
    int bad = 0;
    for_each_pair(
        [&](pair_pos p, float2 &xv, float2 &iv, float2 &hv) {
            const bool row_pairs = std::same_as<L, row_l>;
            const int second = row_pairs ? p.row * C + p.col + 1 : (p.row + 1) * C + p.col;
            iv = float2{float(p.row * C + p.col), float(second)};
            hv = float2{float(p.half), float(p.half)};
            xv = float2{xv.x + 1.f, xv.y + 1.f};
            if constexpr (row_pairs) bad += p.row != lane_row(p.i, p.half);
        },
        x, index, half);
    // Exactly one lane of each group of four leads its rows.
    const int leaders = __popc(__ballot_sync(0xffffffffu, leads_row()));
    if (leaders != 8 || (leads_row() && (laneid() % 4) != 0 && std::same_as<L, row_l>)) bad++;
    rt_io::store(index_out, index);
    rt_io::store(half_out, half);
    rt_io::store(x_out, x);
    atomicAdd(mismatches, bad);
}
template <typename L, int R, int C> int run_elements(void **b, const long long *) {
    elements_kernel<L, R, C><<<1, 32>>>((const float *)b[0], (float *)b[1], (float *)b[2], (float *)b[3], (int *)b[4]);
    return 0;
}

} // namespace

TK_TEST_REGISTER(rt_elements) {
    tk_test::for_each_rt_case<float>([]<typename T, typename L, int R, int C>(const std::string &tag) {
        tk_test::add("rt_elements/" + tag, &run_elements<L, R, C>);
    });
}
