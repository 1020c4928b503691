#pragma once

#include "warp/warp.cuh"
#include "group/group.cuh"
#include "async/async.cuh"
