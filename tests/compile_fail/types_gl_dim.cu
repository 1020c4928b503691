// expect-error: each gl dimension is a positive constant or -1
// 0 is neither a fixed size nor the "known at run time" marker.
#include "kittens.cuh"
using namespace kittens;

using bad_layout = gl<bf16, 0, 1, -1, -1>;

void make(bf16 *ptr) { bad_layout g{ptr, 1, 1, 64, 64}; }
