// expect-error: setmaxnreg takes a register count in 24..256, a multiple of 8
#include "kittens.cuh"
using namespace kittens;
__global__ void k() { warpgroup::increase_registers<250>(); }
