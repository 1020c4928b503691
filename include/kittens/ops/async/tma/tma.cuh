// The TMA engine: asynchronous bulk copies between global tensors and shared tiles / vectors.
#pragma once

#include "ptx.cuh"
#include "sync.cuh"
#include "tile.cuh"
#include "vec.cuh"
