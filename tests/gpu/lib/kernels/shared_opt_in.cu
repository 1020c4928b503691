// kittens::opt_in_shared (common/shared_opt_in.cuh): a kernel given more than 48 KB of dynamic shared memory launches
// after the opt-in, and the opt-in reaches the driver once per device. (kittens.cuh includes the header.)
#include "harness.cuh"

using namespace kittens;

namespace {

// Every thread writes a pattern over the whole dynamic buffer, then checks what other threads wrote.
// out[0] += the words that read back wrong (zero when the whole buffer was usable).
template <int INSTANCE> __global__ void big_shared_kernel(int *out, int words) {
    extern __shared__ uint32_t buffer[];
    for (int i = threadIdx.x; i < words; i += blockDim.x) buffer[i] = uint32_t(i) * 2654435761u + 1;
    __syncthreads();
    int wrong = 0;
    for (int i = words - 1 - int(threadIdx.x); i >= 0; i -= blockDim.x) wrong += buffer[i] != uint32_t(i) * 2654435761u + 1;
    if (wrong) atomicAdd(out, wrong);
}

// Instance 0 is opted in through kittens::opt_in_shared, instance 1 never is (the launch that shows the opt-in is
// what makes the size legal).
// args: bytes to opt in for (0: no opt-in call), bytes to launch with.
// out[0]: wrong words; out[1]: the kernel's dynamic shared-memory limit after the call (cudaFuncGetAttributes).
template <int INSTANCE> int run_big_shared(void **b, const long long *a) {
    const int opt_in = int(a[0]), launch = int(a[1]);
    int *out = static_cast<int *>(b[0]);
    int device = 0;
    if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return int(e);
    if (opt_in > 0)
        if (cudaError_t e = opt_in_shared<big_shared_kernel<INSTANCE>>(device, opt_in); e != cudaSuccess) return int(e);
    cudaFuncAttributes attributes{};
    if (cudaError_t e = cudaFuncGetAttributes(&attributes, big_shared_kernel<INSTANCE>); e != cudaSuccess) return int(e);
    if (cudaError_t e = cudaMemcpy(out + 1, &attributes.maxDynamicSharedSizeBytes, sizeof(int), cudaMemcpyHostToDevice);
        e != cudaSuccess)
        return int(e);
    big_shared_kernel<INSTANCE><<<1, 256, launch>>>(out, launch / int(sizeof(uint32_t)));
    return 0;
}

} // namespace

TK_TEST_REGISTER(shared_opt_in) {
    tk_test::add("shared_opt_in/opted_in", &run_big_shared<0>);
    tk_test::add("shared_opt_in/never_opted_in", &run_big_shared<1>);
}
