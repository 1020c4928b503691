#pragma once

#include "base_types.cuh"
#include "base_ops.cuh"
#include "util.cuh"
