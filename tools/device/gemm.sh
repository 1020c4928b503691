#!/usr/bin/env bash
# One device call for the GEMM: build the extension, run the GEMM and LCSF GPU tests, then
#   FORCE="resident small"  the bf16 GEMM tests again with each named configuration forced (tk_ops.gemm.force_config):
#                           a configuration is then checked on every shape of the tests, not only where it is picked;
#   SANITIZE=1              compute-sanitizer (memcheck, racecheck, synccheck) over tools/check/sanitize_gemm.py;
#   the GEMM bench once per configuration in CONFIGS (default "auto": the shape-based choice); BENCH=0 skips it.
# Usage: [FORCE=...] [CONFIGS="auto hinted"] [SANITIZE=1] [BENCH=0] bash tools/device/gemm.sh [bench arguments]
# (e.g. --quick; logs and bench files under $OUT)
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/device/common.sh

# python3 -m MODULE ARGS... (at most 300 s) with the GEMM configuration $1 forced for the whole process ("auto": none).
with_gemm_config() {
    local config=$1
    shift
    timeout 300 python3 -c 'import runpy, sys, tk_ops
tk_ops.gemm.force_config(sys.argv[1])
sys.argv = sys.argv[2:]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)' "$config" "$@"
}

install_extension || exit 1
TK_TEST_FILES=lcsf_toy timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/ops/test_gemm.py \
    tests/gpu/lib/test_lcsf.py > "$OUT/tests.log" 2>&1
echo "GEMM and LCSF tests: $(tail -1 "$OUT/tests.log")"
for config in ${FORCE:-}; do
    with_gemm_config "$config" pytest -q -p no:cacheprovider tests/gpu/ops/test_gemm.py -k "matmul or linear" \
        > "$OUT/tests_$config.log" 2>&1
    echo "GEMM tests with $config forced: $(tail -1 "$OUT/tests_$config.log")"
done
grep -hE "^(FAILED|ERROR)" "$OUT"/tests*.log | head -20
[ "${SANITIZE:-0}" = 1 ] && sanitize_family gemm
if [ "${BENCH:-1}" = 1 ]; then
    for config in ${CONFIGS:-auto}; do
        echo "bench, configuration $config:"
        with_gemm_config "$config" tk_ops.bench gemm --out "$OUT/bench_$config" "$@" 2>&1 \
            | tee "$OUT/bench_$config.log" | tail -30
    done
fi
exit 0
