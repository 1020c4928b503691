// Per-warp operations on shared tiles and vectors:
//   maps.cuh              initialisers, copy, unary / binary maps on shared tiles and vectors
//   tile/broadcast.cuh    row / column broadcasts of a shared vector onto a tile
//   tile/reductions.cuh   row / column reductions into shared vectors
// The work is split over the warp's 32 lanes in 16-byte units; each op ends with __syncwarp().
// Other warps reading the result need a block or group barrier first.
#pragma once

#include "../../../common/common.cuh"
#include "../../../types/types.cuh"
#include "detail.cuh"
#include "maps.cuh"
#include "tile/broadcast.cuh"
#include "tile/reductions.cuh"
