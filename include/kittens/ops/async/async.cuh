// Hopper's asynchronous machinery: mbarrier semaphores and the TMA engine. (wgmma, the
// asynchronous tensor-core path, is warpgroup scoped and lives in ops/group/wgmma.)
#pragma once

#include "../../common/common.cuh"
#include "semaphore.cuh"
#include "tma/tma.cuh"
