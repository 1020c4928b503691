// A toy kernel on the LCSF template: out[r, :] = sum over column blocks j of x[r, 64j : 64j + 64].
// Each task is a 128-row band; the producer streams its 64x64 column blocks through a 3-stage ring (so the
// ring wraps inside a task and across tasks), two consumer warpgroups each sum 64 rows in registers, and
// finish writes them out. More tasks than SMs exercises the persistent grid; ragged shapes exercise the
// TMA zero fill. The dynamic variant draws tasks from a counter (DYNAMIC_TASKS).
#include "harness.cuh"

using namespace kittens;

template <bool DYNAMIC> struct toy {
    static constexpr bool DYNAMIC_TASKS = DYNAMIC;
    static constexpr int NUM_CONSUMERS = 2, INPUT_STAGES = 3;
    static constexpr int PRODUCER_REGISTERS = 40, CONSUMER_REGISTERS = 232;
    using tile = st_fl<64, 64>;
    using x_gl = gl<float, 1, 1, -1, -1, tile>;
    using out_gl = gl<float, 1, 1, -1, 64>;
    struct globals {
        x_gl x;
        out_gl out;
        int bands, blocks;
        int *task_counter;
    };
    struct input_block {
        tile part[NUM_CONSUMERS];
    };
    struct output_block {};
    struct consumer_state {
        float acc[tile::num_elements / WARPGROUP_THREADS];
    };
    struct task {
        int band, iters;
    };

    __device__ static bool get_task(const globals &g, int id, task &t) {
        if (id >= g.bands) return false;
        t.band = id;
        t.iters = g.blocks;
        return true;
    }
    __device__ static void load(lcsf::producer_args<toy> &p) {
        tma::expect_bytes(p.arrived, NUM_CONSUMERS * tma::transfer_bytes<tile>::value);
        for (int c = 0; c < NUM_CONSUMERS; c++)
            tma::load_async(p.input.part[c], p.g.x, {p.task.band * NUM_CONSUMERS + c, p.iter}, p.arrived);
    }
    __device__ static void setup(lcsf::consumer_args<toy> &c) {
        for (float &v : c.state.acc) v = 0.f;
    }
    __device__ static void compute(lcsf::consumer_args<toy> &c) {
        const tile &s = c.input.part[c.consumer];
        const int tid = warpgroup::laneid();
#pragma unroll
        for (int j = 0; j < tile::num_elements / WARPGROUP_THREADS; j++) {
            int i = tid + j * WARPGROUP_THREADS;
            c.state.acc[j] += s(i / tile::cols, i % tile::cols);
        }
    }
    __device__ static void finish(lcsf::consumer_args<toy> &c) {
        const int tid = warpgroup::laneid();
        const int row0 = (c.task.band * NUM_CONSUMERS + c.consumer) * tile::rows;
#pragma unroll
        for (int j = 0; j < tile::num_elements / WARPGROUP_THREADS; j++) {
            int i = tid + j * WARPGROUP_THREADS, r = row0 + i / tile::cols;
            if (r < c.g.out.rows()) c.g.out[{0, 0, r, i % tile::cols}] = c.state.acc[j];
        }
    }
};

// bufs: x (rows x cols fp32), out (rows x 64 fp32), and for the dynamic variant two zeroed int32 (left zero); args: rows, cols.
template <bool DYNAMIC> static int run_toy(void **b, const long long *a) {
    using K = toy<DYNAMIC>;
    const int rows = int(a[0]), cols = int(a[1]);
    typename K::globals g{typename K::x_gl((float *)b[0], 1, 1, rows, cols), typename K::out_gl((float *)b[1], 1, 1, rows, 64),
                          (rows + 127) / 128, (cols + 63) / 64, DYNAMIC ? (int *)b[2] : nullptr};
    return int(lcsf::launch<K>(g, g.bands, 0));
}

TK_TEST_REGISTER(lcsf_toy) {
    tk_test::add("lcsf_toy/block_sum", &run_toy<false>);
    tk_test::add("lcsf_toy/block_sum_dynamic", &run_toy<true>);
}
