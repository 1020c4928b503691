#!/usr/bin/env bash
# One device call for the whole project: install exactly as the README says (timed), run the full test suite
# (library unit tests included, their build timed first), then with SANITIZE=1 compute-sanitizer over every family's
# tools/check/sanitize_<family>.py, and the benches of the families listed in BENCH.
# Usage: [SANITIZE=1] [BENCH="gemm attention"] [PYTEST_ARGS=...] bash tools/device/full.sh   (logs under $OUT)
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/device/common.sh
install_extension || exit 1
python3 -c "from tests.gpu.lib import tklib; import time; t=time.time(); tklib.build(); print(f'library test kernels build: {time.time()-t:.0f} s')"
timeout 420 python3 -m pytest tests/ -q -p no:cacheprovider -ra --durations=30 ${PYTEST_ARGS:-} > "$OUT/pytest.log" 2>&1
status=$?; record pytest $status; echo "pytest exit $status"
grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -30; tail -3 "$OUT/pytest.log"
if [ "${SANITIZE:-0}" = 1 ]; then
    for script in tools/check/sanitize_*.py; do
        family=$(basename "$script" .py); sanitize_family "${family#sanitize_}"
    done
fi
for family in ${BENCH:-}; do
    python3 -m tk_ops.bench $family --out "$OUT" > "$OUT/bench_$family.log" 2>&1
    status=$?; record "bench $family" $status; echo "bench $family: exit $status"
done
finish
