// expect-error: this gl has no TMA map for that shared type
// Tensor maps are built on the host for the shared types listed in the gl; asking for another one
// must not compile (at run time it would be a garbage descriptor).
#include "kittens.cuh"
using namespace kittens;

using layout = gl<bf16, 1, 1, -1, -1, st_bf<64, 64>>;

__global__ void kernel(const __grid_constant__ layout g, const CUtensorMap **out) {
    *out = g.get_tma<st_bf<128, 64>>();
}
