#!/usr/bin/env bash
# One device call: build the extension, run the GEMM and LCSF tests, then the GEMM bench.
# Usage: bash tools/device_gemm.sh [--quick]   (logs under $OUT when set)
set -uo pipefail
OUT=${OUT:-/tmp/tk_out}; mkdir -p "$OUT"
export MAX_JOBS=16 PYTHONUNBUFFERED=1
start=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "extension build: $(( $(date +%s) - start )) s"
TK_TEST_FILES=lcsf_toy python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gemm.py tests/gpu/test_lcsf.py -x 2>&1 | tee "$OUT/tests.log" | tail -25
python3 -m tk_ops.bench gemm --out "$OUT" ${1:-} 2>&1 | tee "$OUT/bench.log" | tail -30
