// Per-warp register tile and register vector operations (every function is called by all 32
// lanes of one warp):
//   tile/conversions  copy across dtypes, swap_layout (row <-> col), transpose_sep
//   tile/maps         fill, unary_map, bin_map          vec/maps         the same for vectors
//   named_maps        zero/one/..., exp/log/..., add/sub/mul/div/max/min (tiles and vectors)
//   tile/broadcast    add_row ... div_col, broadcast_row/col
//   tile/reductions   row_/col_ max/min/sum/prod
//   vec/conversions   copy across dtypes and vector layouts
//   vec/reductions    max/min/sum/prod of a whole vector
//   tile/elements     for_each_pair: visit elements with their (row, column); lane_row, leads_row
//   tile/mma          mma_AB, mma_ABt, mma_AtB, mma_AtBt (mma.sync m16n8k16)
#pragma once

#include "../../../common/common.cuh"
#include "../../../types/types.cuh"

#include "lanes.cuh"
#include "tile/maps.cuh"
#include "tile/conversions.cuh"
#include "tile/broadcast.cuh"
#include "tile/reductions.cuh"
#include "tile/elements.cuh"
#include "tile/mma.cuh"
#include "vec/maps.cuh"
#include "vec/conversions.cuh"
#include "vec/reductions.cuh"
#include "named_maps.cuh"
