#pragma once

#include "../../../common/common.cuh"
#include "../../../types/types.cuh"
