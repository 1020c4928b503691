// expect-error: only a tile one swizzle chunk wide stores its rows contiguously
// A 128-column bf16 tile is two 128-byte column chunks, each holding every row: its first rows are not a prefix.
#include "kittens.cuh"
using namespace kittens;
__global__ void k(float *out) {
    __shared__ st_bf<64, 128> s;
    out[0] = float(s.top_rows<32>()(0, 0));
}
