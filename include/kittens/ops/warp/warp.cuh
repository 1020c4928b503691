// Per-warp operations: every function here is called by all 32 lanes of exactly one warp.
#pragma once

#include "register/register.cuh"
#include "shared/shared.cuh"
#include "memory/memory.cuh"
