// Shared-tile and shared-vector ops at group scope (group<N>:: members); see shared_ops.cuh.
#include "shared_ops.cuh"

using shared_ops_test::add_shared_ops;
using kittens::bf16;
using kittens::half;

TK_TEST_REGISTER(group_shared_ops) {
    add_shared_ops<float, 16, 16, 4>();
    add_shared_ops<float, 128, 64, 4>();
    add_shared_ops<float, 64, 128, 2>();
    add_shared_ops<bf16, 16, 16, 4>();
    add_shared_ops<bf16, 128, 64, 4>();
    add_shared_ops<bf16, 64, 128, 2>();
    add_shared_ops<half, 16, 16, 4>();
    add_shared_ops<half, 128, 64, 4>();
    add_shared_ops<half, 64, 128, 2>();
}
