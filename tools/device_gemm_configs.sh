#!/usr/bin/env bash
# Compare the GEMM block configurations (TK_OPS_GEMM_CONFIG) on chosen sizes, each config twice, interleaved.
set -uo pipefail
OUT=${OUT:-/tmp/tk_out}; mkdir -p "$OUT"
export MAX_JOBS=16 PYTHONUNBUFFERED=1
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
for rep in 1 2; do for v in ${CONFIGS:-big small}; do TK_OPS_GEMM_CONFIG=$v python3 tools/gemm_sweep.py "$@" 2>&1 | tee -a "$OUT/sweep.log"; done; done
