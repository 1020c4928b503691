// expect-error: add_row: the vector must be the tile's col_vec
// add_row adds one value per row, held in the col_vec.
#include "kittens.cuh"
using namespace kittens;

__global__ void k(float *out) {
    rt_fl<16, 32> a;
    rt_fl<16, 32>::row_vec v;
    zero(a);
    zero(v);
    add_row(a, a, v);
    out[threadIdx.x] = a.tiles[0][0].data[0].x;
}
