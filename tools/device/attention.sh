#!/usr/bin/env bash
# One device call for attention: build the extension, run the attention tests (forward, backward, nn.Attention and
# the CPU-side API checks), then the forward and backward benches; with SANITIZE=1 also compute-sanitizer over
# tools/check/sanitize_attention.py, with TRAIN=1 the training example.
# Usage: [SANITIZE=1] [TRAIN=1] bash tools/device/attention.sh [bench arguments, e.g. --quick]   (logs under $OUT)
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/device/common.sh
install_extension || exit 1
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/ops/test_attention.py tests/gpu/ops/test_attention_bwd.py \
    tests/gpu/ops/test_nn_attention.py tests/cpu/test_attention_api.py --maxfail=5 2>&1 | tee "$OUT/tests.log" | tail -25
record tests $?
if [ "${TRAIN:-0}" = 1 ]; then
    timeout 200 python3 examples/train_gpt.py 2>&1 | tee "$OUT/train_gpt.log" | tail -30; record train $?
fi
timeout 300 python3 -m tk_ops.bench attention --out "$OUT" "$@" 2>&1 | tee "$OUT/bench.log" | tail -40; record bench $?
timeout 300 python3 -m tk_ops.bench attention --backward --out "$OUT" "$@" 2>&1 | tee "$OUT/bench_bwd.log" | tail -40; record "bench --backward" $?
if [ "${SANITIZE:-0}" = 1 ]; then sanitize_family attention; fi
finish
