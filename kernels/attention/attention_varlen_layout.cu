// The packed-document layout of attention_varlen (attention.h's varlen_layout): one block scans the caller's
// cu_seqlens into clamped row offsets and the running counts of query and key blocks per document.
#include <cub/block/block_scan.cuh>

#include "attention.h"

namespace tk_attention {
namespace {

constexpr int THREADS = 512;
using scan_t = cub::BlockScan<int, THREADS>;

struct running_max {
    __device__ int operator()(int a, int b) const { return a > b ? a : b; }
};

// Entries go THREADS at a time; `carry` holds the previous round's last value of each scan. The caller's documents are
// followed by two of ours that cover whatever rows the packed tensors hold past the last offsets: the query rows
// (which see no key: their output is zero, never left unwritten) and the key rows (seen by no query).
__global__ void __launch_bounds__(THREADS) scan_layout(const int *cu_q, const int *cu_k, int docs, int total_q,
                                                       int total_k, int q_block_rows, int k_block_rows, int *out) {
    __shared__ typename scan_t::TempStorage temp;
    __shared__ int carry[4];
    const int n = docs + 3; // offsets of docs + 2 documents
    int *q = out, *k = out + n, *blocks_q = out + 2 * n, *blocks_k = out + 3 * n;
    if (threadIdx.x == 0) carry[0] = carry[1] = carry[2] = carry[3] = 0;
    __syncthreads();
    // Offsets: clamped into [0, total], then made non-decreasing (an inclusive running maximum).
    for (int base = 0; base < n; base += THREADS) {
        const int d = base + threadIdx.x;
        int oq = 0, ok = 0;
        if (d == 0) oq = ok = 0; // the first document starts at row 0 (offsets must), so no row is left without one
        else if (d <= docs) oq = min(max(cu_q[d], 0), total_q), ok = min(max(cu_k[d], 0), total_k);
        else if (d == docs + 1) oq = total_q;                 // the trailing query rows, no keys
        else if (d == docs + 2) oq = total_q, ok = total_k;   // the trailing key rows, no queries
        int aggregate;
        scan_t(temp).InclusiveScan(oq, oq, running_max{}, aggregate);
        __syncthreads();
        scan_t(temp).InclusiveScan(ok, ok, running_max{}, aggregate);
        oq = max(oq, carry[0]);
        ok = max(ok, carry[1]);
        if (d < n) q[d] = oq, k[d] = ok;
        __syncthreads();
        if (threadIdx.x == THREADS - 1) carry[0] = oq, carry[1] = ok; // the round's maximum
        __syncthreads();
    }
    // Blocks before each document: an exclusive sum of the documents' block counts.
    for (int base = 0; base < n; base += THREADS) {
        const int d = base + threadIdx.x;
        const bool doc = d < n - 1;
        const int nq = doc ? (q[d + 1] - q[d] + q_block_rows - 1) / q_block_rows : 0;
        const int nk = doc ? (k[d + 1] - k[d] + k_block_rows - 1) / k_block_rows : 0;
        int sq, sk;
        scan_t(temp).ExclusiveSum(nq, sq);
        __syncthreads();
        scan_t(temp).ExclusiveSum(nk, sk);
        sq += carry[2];
        sk += carry[3];
        if (d < n) blocks_q[d] = sq, blocks_k[d] = sk;
        __syncthreads();
        if (threadIdx.x == THREADS - 1) carry[2] = sq + nq, carry[3] = sk + nk;
        __syncthreads();
    }
}

} // namespace

varlen_layout varlen_layout_at(int *scratch, int docs) {
    const int64_t n = int64_t(docs) + 3;
    return {scratch, scratch + n, scratch + 2 * n, scratch + 3 * n, docs + 2};
}

cudaError_t prepare_varlen(const int *cu_q, const int *cu_k, int docs, int total_q, int total_k, int q_block_rows,
                           int k_block_rows, int *scratch, cudaStream_t stream) {
    scan_layout<<<1, THREADS, 0, stream>>>(cu_q, cu_k, docs, total_q, total_k, q_block_rows, k_block_rows, scratch);
    return cudaGetLastError();
}

} // namespace tk_attention
