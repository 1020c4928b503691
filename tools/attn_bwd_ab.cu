// One-process A/B of the attention backward's main kernel (tools/attn_bwd_ab.sh builds it): A is the kernel of a
// git revision (namespace tk_rev), B the working tree's, on the same inputs (B = 16384 / N, 16 heads, random bf16
// in [-1, 1), O and LSE from the forward). Per configuration: both times, the ratio B / A, and the relative L2
// difference of dK, dV and dQ (0 when bit-identical; dQ is added in nondeterministic order, so ~1e-7 at best).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "attn_bwd_launch.cuh"
#include "attn_bwd_rev.cuh"
#include "timeline.cuh"

using namespace tk_attention;
using kittens::bf16;

#define CHECK(...)                                                                                                     \
    do {                                                                                                               \
        if (cudaError_t e_ = (__VA_ARGS__); e_ != cudaSuccess) {                                                       \
            std::printf("%s: %s\n", #__VA_ARGS__, cudaGetErrorString(e_));                                            \
            std::exit(1);                                                                                              \
        }                                                                                                              \
    } while (0)

template <typename T> T *device_alloc(size_t n) {
    T *p = nullptr;
    CHECK(cudaMalloc(&p, n * sizeof(T)));
    return p;
}

template <typename T> std::vector<T> to_host(const T *p, size_t n) {
    std::vector<T> h(n);
    CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

struct gradients {
    std::vector<bf16> dk, dv;
    std::vector<float> dq;
};

template <int D, bool CAUSAL> void compare(int n, int reps) {
    const int b = 16384 / n, h = 16;
    const size_t elems = size_t(b) * h * n * D, rows = size_t(b) * h * padded_q_len(n);
    const int64_t sb = int64_t(h) * n * D, sh = int64_t(n) * D, sn = D; // dense (B, H, N, D)
    bf16 *q = device_alloc<bf16>(elems), *k = device_alloc<bf16>(elems), *v = device_alloc<bf16>(elems);
    bf16 *o = device_alloc<bf16>(elems), *dout = device_alloc<bf16>(elems);
    bf16 *dk = device_alloc<bf16>(elems), *dv = device_alloc<bf16>(elems);
    float *lse = device_alloc<float>(size_t(b) * h * n), *lse2 = device_alloc<float>(rows);
    const size_t acc_elems = rows * D; // the dense accumulator, padded rows included
    float *delta = device_alloc<float>(rows), *dq = device_alloc<float>(acc_elems);
    int *counter = device_alloc<int>(1);
    uint32_t seed = 1;
    for (bf16 *t : {q, k, v, dout}) timeline::fill_random<<<1024, 256>>>(t, elems, seed++);

    const float scale = 1.f / std::sqrt(float(D));
    auto in = [&](const bf16 *t) { return tensor4{t, sb, sh, sn}; };
    auto out = [&](void *t) { return out4{t, sb, sh, sn}; };
    const fwd_problem f{in(q), in(k), in(v), out(o), lse, counter, b, h, h, n, n, D, CAUSAL, scale, dtype::bf16};
    CHECK(D == 64 ? forward_d64(f, 0) : forward_d128(f, 0));
    const bwd_problem p{in(q), in(k), in(v), in(o), in(dout), lse, lse2, delta, dq, out(dk), out(dv),
                        b, h, h, n, n, D, CAUSAL, scale, dtype::bf16};
    CHECK(backward_prepare(p, 0));
    auto run_a = [&] { CHECK(launch_backward<tk_rev::attn_bwd<bf16, D, CAUSAL>>(p, 0)); };
    auto run_b = [&] { CHECK(launch_backward<attn_bwd<bf16, D, CAUSAL>>(p, 0)); };

    // dQ as (b, h, padded row, d) whichever layout the kernel adds in.
    const int padded = padded_q_len(n);
    auto grads_of = [&](auto launch, bool transposed, bool scaled) {
        CHECK(cudaMemset(dq, 0, acc_elems * sizeof(float)));
        launch();
        CHECK(cudaDeviceSynchronize());
        std::vector<float> acc = to_host(dq, acc_elems), rowwise(acc_elems);
        for (size_t head = 0; head < size_t(b) * h; head++)
            for (int i = 0; i < padded; i++)
                for (int d = 0; d < D; d++)
                    rowwise[(head * padded + i) * D + d] = (scaled ? 1.f : scale) *
                        (transposed ? acc[(head * D + d) * padded + i] : acc[(head * padded + i) * D + d]);
        return gradients{to_host(dk, elems), to_host(dv, elems), rowwise};
    };
    using KA = tk_rev::attn_bwd<bf16, D, CAUSAL>;
    using KB = attn_bwd<bf16, D, CAUSAL>;
    const gradients ga = grads_of(run_a, dq_transposed<KA>(), dq_scaled<KA>()),
                    gb = grads_of(run_b, dq_transposed<KB>(), dq_scaled<KB>());
    // Relative L2 difference, 0 exactly when bit-identical.
    auto rel = [](const auto &a, const auto &b) {
        double diff = 0, norm = 0;
        for (size_t i = 0; i < a.size(); i++) {
            const double x = float(a[i]), y = float(b[i]);
            diff += (x - y) * (x - y);
            norm += x * x;
        }
        return std::sqrt(diff / norm);
    };
    const double dk_rel = rel(ga.dk, gb.dk), dv_rel = rel(ga.dv, gb.dv), dq_rel = rel(ga.dq, gb.dq);

    // 300 ms of warm-up so the clocks settle, then A and B in a symmetric order.
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    CHECK(cudaEventRecord(e0));
    for (float ms = 0; ms < 300;) {
        for (int i = 0; i < 5; i++) run_a();
        CHECK(cudaEventRecord(e1));
        CHECK(cudaEventSynchronize(e1));
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
    }
    double ta = 0, tb = 0;
    for (char which : {'A', 'B', 'B', 'A', 'B', 'A', 'A', 'B'}) {
        if (which == 'A') ta += timeline::time_us(run_a, reps) / 4;
        else tb += timeline::time_us(run_b, reps) / 4;
    }
    const double flops = 2.5 * 4.0 * b * h * double(n) * n * D / (CAUSAL ? 2 : 1);
    std::printf("D=%3d causal=%d N=%5d  A %8.1f us (%4.0f TF)  B %8.1f us (%4.0f TF)  time B / A %.3f  rel. diff dK %.1e dV %.1e dQ %.1e\n",
                D, int(CAUSAL), n, ta, flops / ta / 1e6, tb, flops / tb / 1e6, tb / ta, dk_rel, dv_rel, dq_rel);
    for (void *t : {(void *)q, (void *)k, (void *)v, (void *)o, (void *)dout, (void *)dk, (void *)dv, (void *)lse,
                    (void *)lse2, (void *)delta, (void *)dq, (void *)counter})
        CHECK(cudaFree(t));
}

int main(int argc, char **argv) {
    std::vector<int> lens = {1024, 2048, 4096, 8192, 16384};
    if (argc > 1) {
        lens.clear();
        for (int i = 1; i < argc; i++) lens.push_back(std::atoi(argv[i]));
    }
    auto reps = [](int n) { return n >= 8192 ? 5 : 20; };
    for (int n : lens) compare<64, false>(n, reps(n));
    for (int n : lens) compare<64, true>(n, reps(n));
    for (int n : lens) compare<128, false>(n, reps(n));
    for (int n : lens) compare<128, true>(n, reps(n));
}
