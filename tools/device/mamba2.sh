#!/usr/bin/env bash
# One device call for Mamba-2: build only the families it needs (mamba2, and gemm for the module's projections),
# run the Mamba-2 GPU tests (scan forward and backward, step, nn.Mamba2), then the forward and backward benches against
# mamba_ssm (PYTHONPATH must reach its Triton sources, docs/mamba2.md; its first calls autotune for minutes); with
# SANITIZE=1 also compute-sanitizer over tools/check/sanitize_mamba2.py, with TRAIN=1 the training example (--quick
# unless TRAIN_ARGS says otherwise).
# Usage: [SANITIZE=1] [TRAIN=1] bash tools/device/mamba2.sh [bench arguments, e.g. --quick]   (logs under $OUT)
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/device/common.sh
cp configs.py "$OUT/configs.py.orig" && trap 'cp "$OUT/configs.py.orig" configs.py' EXIT
sed -i 's/^KERNELS = .*/KERNELS = ["gemm", "mamba2"]/' configs.py  # the build only (restored on exit)
install_extension || exit 1
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/ops/test_mamba2.py tests/gpu/ops/test_mamba2_bwd.py \
    tests/gpu/ops/test_mamba2_step.py tests/gpu/ops/test_nn_mamba2.py 2>&1 | tee "$OUT/tests.log" | tail -25
[ "${TRAIN:-0}" = 1 ] && timeout 300 python3 examples/train_mamba2.py ${TRAIN_ARGS:---quick} 2>&1 | tee "$OUT/train_mamba2.log" | tail -30
timeout 300 python3 -m tk_ops.bench mamba2 --out "$OUT" "$@" 2>&1 | tee "$OUT/bench.log" | tail -20
timeout 400 python3 -m tk_ops.bench mamba2 --backward --out "$OUT" "$@" 2>&1 | tee "$OUT/bench_bwd.log" | tail -20
[ "${SANITIZE:-0}" = 1 ] && sanitize_family mamba2
exit 0
