#pragma once

#include "lcsf.cuh"
