// expect-error: row reductions write the tile's col_vec
// A row reduction gives one value per row: the col_vec, not the row_vec.
#include "kittens.cuh"
using namespace kittens;

__global__ void k(float *out) {
    rt_fl<16, 32> a;
    rt_fl<16, 32>::row_vec v;
    zero(a);
    row_max(v, a);
    out[threadIdx.x] = v.data[0][0].x;
}
