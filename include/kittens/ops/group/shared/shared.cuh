// Included inside struct group<N_WARPS> (see group.cuh): no pragma once, no namespaces.
// Collaborative shared-tile and shared-vector ops; the bodies live in ops/warp/shared/detail.cuh.
#include "maps.cuh"
#include "tile.cuh"
