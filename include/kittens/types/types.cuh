#pragma once

#include "register/rt_layout.cuh"
#include "register/rv_layout.cuh"
#include "register/rv.cuh"
#include "register/rt.cuh"
#include "shared/st.cuh"
#include "shared/sv.cuh"
#include "global/coord.cuh"
#include "global/tma_desc.cuh"
#include "global/gl.cuh"
