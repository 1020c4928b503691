#!/usr/bin/env bash
# One device call: build, run the GEMM tests, then time every TK_OPS_GEMM_VARIANT against cuBLAS.
set -uo pipefail
OUT=${OUT:-/tmp/tk_out}; mkdir -p "$OUT"
export MAX_JOBS=16 PYTHONUNBUFFERED=1
start=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
echo "extension build: $(( $(date +%s) - start )) s"
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gemm.py 2>&1 | tee "$OUT/tests.log" | tail -4
for v in ${VARIANTS:-0 1 2 3}; do TK_OPS_GEMM_VARIANT=$v python3 tools/gemm_sweep.py "$@" 2>&1 | tee -a "$OUT/sweep.log"; done
