#!/usr/bin/env bash
# Correctness of a forced GEMM configuration on the GEMM tests, then big vs that configuration.
set -uo pipefail
OUT=${OUT:-/tmp/tk_out}; mkdir -p "$OUT"
export MAX_JOBS=16 PYTHONUNBUFFERED=1
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
TK_OPS_GEMM_CONFIG=${CFG:-paired} timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gemm.py -k "matmul or linear" 2>&1 | tail -4
for rep in ${REPS:-1 2}; do for v in big ${CFG:-paired}; do TK_OPS_GEMM_CONFIG=$v timeout 120 python3 tools/gemm_sweep.py "$@" 2>&1 | tee -a "$OUT/sweep.log"; done; done
