// ThunderKittens-style tile library for Hopper (sm_90a). The single header kernels include.
#pragma once

#include "common/common.cuh"
#include "types/types.cuh"
#include "ops/ops.cuh"
#include "pipeline/pipeline.cuh"
