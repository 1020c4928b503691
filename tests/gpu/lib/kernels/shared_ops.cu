// Shared-tile and shared-vector ops at warp scope (the free functions); see shared_ops.cuh.
#include "shared_ops.cuh"

using shared_ops_test::add_shared_ops;
using kittens::bf16;
using kittens::half;

TK_TEST_REGISTER(shared_ops) {
    add_shared_ops<float, 16, 16, 1>();
    add_shared_ops<float, 32, 64, 1>();
    add_shared_ops<float, 64, 128, 1>();
    add_shared_ops<bf16, 16, 16, 1>();
    add_shared_ops<bf16, 32, 64, 1>();
    add_shared_ops<bf16, 64, 128, 1>();
    add_shared_ops<half, 16, 16, 1>();
    add_shared_ops<half, 32, 64, 1>();
    add_shared_ops<half, 64, 128, 1>();
    add_shared_ops<bf16, 128, 64, 1>();
    add_shared_ops<kittens::fp8e4m3, 32, 64, 1>();
}
