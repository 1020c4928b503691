// Per-warp operations on shared tiles and vectors:
//   tile/maps.cuh         initialisers, copy, unary / binary maps, row / column broadcasts
//   tile/reductions.cuh   row / column reductions into shared vectors
//   vec/maps.cuh          initialisers, copy, unary / binary maps on shared vectors
// The work is split over the warp's 32 lanes in 16-byte units; each op ends with __syncwarp().
// Other warps reading the result need a block or group barrier first.
#pragma once

#include "../../../common/common.cuh"
#include "../../../types/types.cuh"
#include "detail.cuh"
#include "tile/maps.cuh"
#include "tile/reductions.cuh"
#include "vec/maps.cuh"
