// Included inside struct group<N_WARPS> (see group.cuh): no pragma once, no namespaces.
// Collaborative data movement; the namespace-level bodies live in ops/warp/memory.
#include "tile.cuh"
#include "vec.cuh"
