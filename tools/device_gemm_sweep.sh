#!/usr/bin/env bash
# One device call: build, run the GEMM tests, time each TK_OPS_GEMM_CONFIG in $CONFIGS against cuBLAS, then the bench.
set -uo pipefail
OUT=${OUT:-/tmp/tk_out}; mkdir -p "$OUT"
export MAX_JOBS=16 PYTHONUNBUFFERED=1
start=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
echo "extension build: $(( $(date +%s) - start )) s"
TK_TEST_FILES=lcsf_toy python3 -X faulthandler -m pytest -q -p no:cacheprovider tests/gpu/test_gemm.py tests/gpu/test_lcsf.py -v 2>&1 > "$OUT/tests.log"; grep -E "FAIL|Error|passed|failed|Fatal" "$OUT/tests.log" | head -20; tail -3 "$OUT/tests.log"
for v in ${CONFIGS:-}; do TK_OPS_GEMM_CONFIG=$v python3 tools/gemm_sweep.py "$@" 2>&1 | tee -a "$OUT/sweep.log"; done
[ -n "${BENCH:-}" ] && python3 -m tk_ops.bench gemm --out "$OUT" 2>&1 | tee "$OUT/bench.log" | tail -28
exit 0
