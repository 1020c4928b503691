// Per-warp data movement between global memory, shared memory and registers (and, in raw.cuh, per-thread words and
// the memory-model operations of a handshake between blocks):
//   global <-> register   tile/global_to_register.cuh, vec/global_to_register.cuh
//   global <-> shared     tile/global_to_shared.cuh,   vec/global_to_shared.cuh (sync and cp.async)
//   shared <-> register   tile/shared_to_register.cuh, vec/shared_to_register.cuh
// Every load and store is bounds-safe at ragged tensor edges. Operations that write shared
// memory end with __syncwarp(), so the same warp may read the result right away; other warps
// need a block or group barrier first.
#pragma once

#include "../../../common/common.cuh"
#include "../../../types/types.cuh"
#include "util.cuh"
#include "raw.cuh"
#include "tile/global_to_register.cuh"
#include "tile/global_to_shared.cuh"
#include "tile/shared_to_register.cuh"
#include "vec/lanes.cuh"
#include "vec/global_to_register.cuh"
#include "vec/global_to_shared.cuh"
#include "vec/shared_to_register.cuh"
