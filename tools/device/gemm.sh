#!/usr/bin/env bash
# One device call for the GEMM: build the extension, run the GEMM and LCSF GPU tests (the GEMM's in every kernel
# configuration, named through the testing ops), then
#   SANITIZE=1              compute-sanitizer (memcheck, racecheck, synccheck) over tools/check/sanitize_gemm.py;
#   the GEMM bench once per configuration in CONFIGS (default "auto": each shape's own pick; a name runs our forward
#   products in that configuration, python -m tk_ops.bench gemm --config NAME); BENCH=0 skips it.
# Usage: [CONFIGS="auto hinted"] [SANITIZE=1] [BENCH=0] bash tools/device/gemm.sh [bench arguments]
# (e.g. --quick; logs and bench files under $OUT)
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/device/common.sh

install_extension || exit 1
TK_TEST_FILES=lcsf_toy timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/ops/test_gemm.py \
    tests/gpu/lib/test_lcsf.py > "$OUT/tests.log" 2>&1
record tests $?
echo "GEMM and LCSF tests: $(tail -1 "$OUT/tests.log")"
grep -hE "^(FAILED|ERROR)" "$OUT/tests.log" | head -20
if [ "${SANITIZE:-0}" = 1 ]; then sanitize_family gemm; fi
if [ "${BENCH:-1}" = 1 ]; then
    for config in ${CONFIGS:-auto}; do
        echo "bench, configuration $config:"
        option=()
        [ "$config" != auto ] && option=(--config "$config")
        timeout 300 python3 -m tk_ops.bench gemm "${option[@]}" --out "$OUT/bench_$config" "$@" 2>&1 \
            | tee "$OUT/bench_$config.log" | tail -30
        record "bench $config" $?
    done
fi
finish
