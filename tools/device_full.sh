#!/usr/bin/env bash
# One device call for the whole project: install exactly as the README says (timed), run the full test
# suite (library unit tests included, their build timed inside pytest), then compute-sanitizer on the GEMM and
# the attention kernels.
set -uo pipefail
OUT=${OUT:-/tmp/tk_out}; mkdir -p "$OUT"
export MAX_JOBS=16 PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
t1=$(date +%s); echo "extension build: $((t1 - t0)) s"
python3 -c "from tests.gpu import tklib; import time; t=time.time(); tklib.build(); print(f'library test kernels build: {time.time()-t:.0f} s')"
timeout 420 python3 -m pytest tests/ -q -p no:cacheprovider -ra ${PYTEST_ARGS:-} > "$OUT/pytest.log" 2>&1; echo "pytest exit $?"
grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -30; tail -3 "$OUT/pytest.log"
if [ -n "${SANITIZE:-}" ]; then
  for script in gemm attention; do
    for tool in memcheck racecheck synccheck; do
      log="$OUT/sanitize_${script}_$tool.log"
      compute-sanitizer --tool $tool --error-exitcode 9 python3 tools/sanitize_$script.py > "$log" 2>&1
      echo "compute-sanitizer $script $tool: exit $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)"
    done
  done
fi
for family in ${BENCH:-}; do
  python3 -m tk_ops.bench $family --out "$OUT" > "$OUT/bench_$family.log" 2>&1; echo "bench $family: exit $?"
done
exit 0
