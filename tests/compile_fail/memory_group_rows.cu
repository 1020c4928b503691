// expect-error: the shared tile must have N times the register tile's rows
// group<4> slices a shared tile among its warps, so the tile needs 4x the register rows.
#include "kittens.cuh"
using namespace kittens;
__global__ void k() {
    __shared__ st_bf<16, 64> s;
    rt_fl<16, 64> r;
    warpgroup::load(r, s);
}
