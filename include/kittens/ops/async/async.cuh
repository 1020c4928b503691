#pragma once

#include "../../common/common.cuh"
