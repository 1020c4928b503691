// The Based kernels' configurations, each number with its reason, and the choices made per problem: which algorithm
// computes a call (chunked or quadratic: docs/based.md, "Two algorithms") and how the value dimension is cut into
// tasks. The kernel structs read their numbers from here; the launches and entry points choose through the
// functions here.
//
// Plain C++ over based.h's types (no kittens): host code reads it without the kernels.
#pragma once

#include "based.h"

#include <cstdint>

namespace tk_based {

// ---------------------------------------------------------------- the kernels' blocks

// A kernel on the LCSF template: a producer warpgroup streams the inputs through a ring of shared-memory stages to
// consumer warpgroups of consumer_rows rows each (a block of consumers * consumer_rows rows: a chunk, or a query or
// key block); at start the warpgroups trade registers (setmaxnreg) to the counts below.
struct lcsf_config {
    int consumers;          // consumer warpgroups
    int consumer_rows;      // rows per consumer: one wgmma row slab
    int input_stages;       // depth of the ring
    int producer_registers; // per thread
    int consumer_registers; // per thread
    constexpr int block_rows() const { return consumers * consumer_rows; }
};

// The numbers LCSF reads from a kernel struct (kittens/pipeline/lcsf.cuh), from the kernel's configuration: the
// kernel structs derive from it.
template <const lcsf_config &C> struct lcsf_numbers {
    static constexpr int NUM_CONSUMERS = C.consumers;
    static constexpr int INPUT_STAGES = C.input_stages;
    static constexpr int PRODUCER_REGISTERS = C.producer_registers;
    static constexpr int CONSUMER_REGISTERS = C.consumer_registers;
};

// Every Based kernel's block: two consumers of 64 rows (a chunk or block of 128 tokens) and a producer, 384 threads,
// for which ptxas fits each thread in 168 registers. The producer only issues TMA, so it keeps 24 and the consumers,
// which hold the accumulators (and in the chunked kernels the fp32 state), take the rest: 240 each
// (2 x 128 x 240 + 128 x 24 = 64,512 of the 65,536). The kernels differ in the depth of their ring.
constexpr lcsf_config based_block(int input_stages) {
    return {.consumers = 2,
            .consumer_rows = 64,
            .input_stages = input_stages,
            .producer_registers = 24,
            .consumer_registers = 240};
}

// The chunked forward: each consumer takes 64 query rows of a chunk and part of the fp32 state (feature rows x value
// columns). Two stages (Q, K, V of a chunk, 8 KB + 16 KB at Dv = 64): the next chunk arrives while this one
// computes; the shared memory past them holds the feature tiles and the state's images of both parities (212 KB at
// Dv = 64, docs/based.md).
inline constexpr lcsf_config CHUNKED_FORWARD = based_block(2);

// The chunked backward's two passes: the forward's chunks and state split. Two stages of 41 KB (q, k, v, dO halves,
// rinv and dD at Dv = 64); the passes' feature tiles and images take 125 - 136 KB more (208 - 222 KB in all).
inline constexpr lcsf_config CHUNKED_BACKWARD = based_block(2);

// The quadratic forward: a task is 128 query rows walking the key tiles. A stage is one key tile (K, V and room for
// the task's Q: 40 KB at a value tile of 128), and nothing but the output staging shares the shared memory, so three
// stages fit (152 KB) and TMA runs two tiles ahead of consumers that spend little time on each.
inline constexpr lcsf_config QUADRATIC_FORWARD = based_block(3);

// The quadratic backward's two passes: a stage carries a tile of the walked side and, with a task's first tile, the
// task's own rows (73 KB at a value tile of 128), so two stages fit beside the output staging (up to 36 KB).
inline constexpr lcsf_config QUADRATIC_BACKWARD = based_block(2);

// Tokens per chunk of the chunked backward (its scratch rows are padded to whole chunks).
inline constexpr int BWD_CHUNK = CHUNKED_BACKWARD.block_rows();
// Rows per task (a query or key block) and keys per tile of the quadratic kernels, forward and backward alike.
inline constexpr int QUAD_BLOCK = QUADRATIC_FORWARD.block_rows();
static_assert(QUADRATIC_BACKWARD.block_rows() == QUAD_BLOCK, "Based: one block size for the quadratic kernels");

// ---------------------------------------------------------------- value columns per task

// The chunked kernels keep the fp32 state in registers, 2.5 values per thread per value column over the two
// consumers' feature rows, so a task takes at most 64 value columns.
inline constexpr int CHUNKED_MAX_VALUE_COLUMNS = 64;

// The chunked forward's value columns per task: the value dimension split into as few blocks of at most 64 as
// possible, each rounded up to a multiple of 16 (the last block's extra columns are zero-filled and never stored), so
// that no task computes a zero-filled block of 64 where a narrower one covers Dv.
constexpr int forward_value_block(int value_dim) {
    const int blocks = (value_dim + CHUNKED_MAX_VALUE_COLUMNS - 1) / CHUNKED_MAX_VALUE_COLUMNS;
    return ((value_dim + blocks - 1) / blocks + 15) / 16 * 16;
}

// The chunked backward's value columns per task: up to 64, one task per (batch, head) with its own tile width; past
// 64, two tasks of 64 columns (value splits) whose shares of dq and dk meet in fp32 accumulators (docs/based.md,
// "Value splits").
constexpr bool backward_splits_values(int value_dim) { return value_dim > CHUNKED_MAX_VALUE_COLUMNS; }
constexpr int backward_value_block(int value_dim) {
    return backward_splits_values(value_dim) ? CHUNKED_MAX_VALUE_COLUMNS : value_dim;
}

// The quadratic kernels' value tile: they hold no state, so a task takes the whole value dimension (its pair weights
// are computed once for every column), rounded up to one of the two widths compiled, 64 or 128 (TMA zero-fills the
// columns past Dv and clips them on the way out).
constexpr int quad_value_width(int value_dim) { return value_dim <= 64 ? 64 : 128; }

// Heads per group of the quadratic kernels' task order (quad_task_at): as many as keep their K and V tiles within a
// share of L2 that leaves room for the rest.
inline int quadratic_heads_per_group(int len, int value_width) {
    constexpr long long L2_SHARE = 8ll << 20;
    const long long head_bytes = (long long)len * (FEATURE_DIM + value_width) * 2;
    return int(head_bytes >= L2_SHARE ? 1 : L2_SHARE / head_bytes);
}

// ---------------------------------------------------------------- the algorithm

// Sequences up to this length without a state take the quadratic kernels: the measured crossover (docs/based.md, "Two
// algorithms"), below which forming the N x N pair weights costs less than carrying the 160-feature state, for both
// directions and every Dv.
inline constexpr int QUADRATIC_MAX_LEN = 1024;

// The quadratic kernels number their tasks (batch x heads x blocks of 128 rows) with 32-bit integers, and their
// blocks draw ids up to one grid past the last task.
inline bool quadratic_tasks_fit(int batch, int heads, int len) {
    return int64_t(batch) * heads * ((len + QUAD_BLOCK - 1) / QUAD_BLOCK) < (int64_t(1) << 31) - (1 << 16);
}

// Whether the quadratic kernels can compute a problem at all: no state enters or leaves (the quadratic form has none
// to read or write), a task counter for their dynamic schedule, and task ids that fit 32 bits.
inline bool quadratic_possible(const fwd_problem &p) {
    return !p.kv0 && !p.kv_final && p.task_counter && quadratic_tasks_fit(p.batch, p.heads, p.len);
}
inline bool quadratic_possible(const bwd_problem &p) {
    return !p.kv0 && !p.d_kv_final && !p.d_kv0 && p.task_counter && quadratic_tasks_fit(p.batch, p.heads, p.len);
}

// Whether a problem takes the quadratic kernels: by shape, those it can take up to QUADRATIC_MAX_LEN; or as forced
// (the entry points refuse a forced quadratic problem that quadratic_possible rejects).
template <typename Problem> bool takes_quadratic(const Problem &p) {
    switch (p.algorithm) {
    case algorithm_choice::chunked: return false;
    case algorithm_choice::quadratic: return true;
    default: return p.len <= QUADRATIC_MAX_LEN && quadratic_possible(p);
    }
}
// A forced choice the problem cannot take.
template <typename Problem> bool impossible_choice(const Problem &p) {
    return p.algorithm == algorithm_choice::quadratic && !quadratic_possible(p);
}

} // namespace tk_based
