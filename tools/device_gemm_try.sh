#!/usr/bin/env bash
# Try a forced GEMM configuration: its correctness on the GEMM tests, then timing against others.
# CFG=tiny CONFIGS="small tiny" bash tools/device_gemm_try.sh 1024x1024x1024 ...
set -uo pipefail
OUT=${OUT:-/tmp/tk_out}; mkdir -p "$OUT"
export MAX_JOBS=16 PYTHONUNBUFFERED=1
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
TK_OPS_GEMM_CONFIG=$CFG timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gemm.py -k "matmul or linear" 2>&1 | tail -2
for v in ${CONFIGS:-big $CFG}; do TK_OPS_GEMM_CONFIG=$v timeout 120 python3 tools/gemm_sweep.py "$@" 2>&1 | tee -a "$OUT/sweep.log"; done
