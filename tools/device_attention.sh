#!/usr/bin/env bash
# One device call: build the extension, run the attention tests, then the attention bench.
# Usage: bash tools/device_attention.sh [--quick]   (logs under $OUT when set)
set -uo pipefail
OUT=${OUT:-/tmp/tk_out}; mkdir -p "$OUT"
export MAX_JOBS=16 PYTHONUNBUFFERED=1
start=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "extension build: $(( $(date +%s) - start )) s"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_attention.py tests/cpu/test_attention_api.py tests/cpu/test_build_config.py --maxfail=5 2>&1 | tee "$OUT/tests.log" | tail -25
timeout 200 python3 -m tk_ops.bench attention --out "$OUT" ${1:-} 2>&1 | tee "$OUT/bench.log" | tail -40
