// Register tile loads and stores where the register element type differs from the memory one
// (a float tile stored into a bf16 tensor, an fp8 tensor read into float registers, ...).
// Same kernel and paths as mem_register.cu; see mem_rt_paths.cuh.
#include "mem_rt_paths.cuh"

using namespace kittens;
using mem_rt_test::add_paths;

namespace {

template <typename L> void add_layout() {
    add_paths<float, bf16, L, 16, 16>();
    add_paths<float, bf16, L, 32, 64>();
    add_paths<float, bf16, L, 64, 32>();
    add_paths<float, half, L, 16, 16>();
    add_paths<float, half, L, 32, 64>();
    add_paths<bf16, float, L, 16, 16>();
    add_paths<bf16, float, L, 64, 32>();
    add_paths<float, fp8e4m3, L, 32, 64>();
    add_paths<float, fp8e4m3, L, 64, 32>();
    add_paths<half, fp8e4m3, L, 32, 32>();
}

} // namespace

TK_TEST_REGISTER(mem_register_convert) {
    add_layout<row_l>();
    add_layout<col_l>();
}
