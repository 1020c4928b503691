#!/usr/bin/env bash
# One-process A/B of the attention backward's main kernel: the kernel at a git revision (A, default HEAD) against
# the working tree's (B), both on the same inputs, timed in the order A B B A B A A B after a 300 ms warm-up. dK,
# dV and dQ are compared by relative L2 difference (0 when bit-identical; dQ is added in nondeterministic order).
#   bash tools/attn_bwd_ab.sh [REV]                builds /tmp/attn_bwd_ab here (nvcc, no GPU needed)
#   /tmp/attn_bwd_ab [N ...]                        on the GPU machine (carry the binary, or build it there)
# OUT_BIN=path names the binary; NVCC_FLAGS adds flags (e.g. -DATTN_BWD_DEFER_DQ=0 to time the other dQ schedule).
# Only attn_bwd_kernel.cuh is taken from REV: a change elsewhere (the library, LCSF) shows up on both sides.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:-HEAD}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The old kernel in a namespace of its own, so that both versions link into one program.
git show "$rev:kernels/attention/attn_bwd_kernel.cuh" |
    sed -e 's/^namespace tk_attention {/namespace tk_rev { using namespace tk_attention;/' \
        -e 's/^} \/\/ namespace tk_attention/} \/\/ namespace tk_rev/' > "$work/attn_bwd_rev.cuh"
grep -q "namespace tk_rev" "$work/attn_bwd_rev.cuh" || { echo "could not rename the kernel's namespace at $rev"; exit 1; }
nvcc ${NVCC_FLAGS:-} -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -diag-suppress=20012 \
    -Iinclude/kittens -Ikernels -Ikernels/attention -Itools -I"$work" -o "${OUT_BIN:-/tmp/attn_bwd_ab}" \
    tools/attn_bwd_ab.cu kernels/attention/attn_bwd_prep.cu kernels/attention/attn_fwd_d64.cu kernels/attention/attn_fwd_d128.cu
echo "built ${OUT_BIN:-/tmp/attn_bwd_ab} (A = $rev, B = working tree)"
