#!/usr/bin/env bash
# One device call for a GEMM change: build, the GEMM and LCSF GPU tests (auto configuration, then with the resident-B
# configuration forced wherever K allows it), compute-sanitizer memcheck / racecheck / synccheck on tools/sanitize_gemm.py.
OUT=${OUT:-/tmp/tk_out}; mkdir -p "$OUT"
set -uo pipefail
export MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
TK_TEST_FILES=lcsf_toy python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gemm.py tests/gpu/test_lcsf.py > $OUT/tests_auto.log 2>&1; echo "auto: $(tail -1 $OUT/tests_auto.log)"
TK_OPS_GEMM_CONFIG=resident python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gemm.py -k "matmul or linear" > $OUT/tests_res.log 2>&1; echo "forced resident: $(tail -1 $OUT/tests_res.log)"
grep -E "^(FAILED|ERROR)" $OUT/tests_*.log | head
for tool in memcheck racecheck synccheck; do
  compute-sanitizer --tool $tool --error-exitcode 9 python3 tools/sanitize_gemm.py > $OUT/san_$tool.log 2>&1; echo "sanitize $tool: exit $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san_$tool.log | tail -1)"
done
echo "elapsed $(( $(date +%s) - t0 )) s"
