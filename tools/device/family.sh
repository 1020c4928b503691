#!/usr/bin/env bash
# One device call for one of the newer kernel families (mamba2, based, fftconv): build only the families it needs, run
# its GPU tests (the op's, its backward's, its decoding step's and its nn module's), then its forward and backward
# benches against the peers (PYTHONPATH must reach them where they are not installed: mamba_ssm's Triton sources,
# the fla-core wheel; see the family's docs); with SANITIZE=1 also compute-sanitizer's memcheck, racecheck and synccheck
# over tools/check/sanitize_<family>.py, with TRAIN=1 the family's training example (--quick unless TRAIN_ARGS says
# otherwise); for fftconv with FLASHFFTCONV=1, FlashFFTConv is built first (tools/device/flashfftconv.sh) and joins the
# benches.
# Usage: [SANITIZE=1] [TRAIN=1] [FLASHFFTCONV=1] bash tools/device/family.sh <mamba2|based|fftconv> [bench arguments]
# (logs under $OUT)
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/device/common.sh
family=${1:?usage: bash tools/device/family.sh <mamba2|based|fftconv> [bench arguments]}
shift
case "$family" in
    mamba2) build="gemm mamba2" tests="test_mamba2*.py test_nn_mamba2.py" example=train_mamba2.py ;;
    based) build="gemm attention based" tests="test_based*.py test_nn_based.py" example=train_based.py ;;
    fftconv) build="gemm fftconv" tests="test_fftconv*.py test_nn_longconv.py" example=train_hyena.py ;;
    *) echo "unknown family $family: mamba2, based or fftconv"; exit 2 ;;
esac
cp configs.py "$OUT/configs.py.orig" && trap 'cp "$OUT/configs.py.orig" configs.py' EXIT
list=$(printf '"%s", ' $build)
sed -i "s/^KERNELS = .*/KERNELS = [${list%, }]/" configs.py  # the build only (restored on exit)
install_extension || exit 1
[ "$family" = fftconv ] && [ "${FLASHFFTCONV:-0}" = 1 ] && source tools/device/flashfftconv.sh .peers/flashfftconv_src
files=$(cd tests/gpu/ops && ls $tests | sed 's|^|tests/gpu/ops/|')
timeout 300 python3 -m pytest -q -p no:cacheprovider $files 2>&1 | tee "$OUT/tests.log" | tail -25; record tests $?
if [ "${TRAIN:-0}" = 1 ]; then
    timeout 300 python3 "examples/$example" ${TRAIN_ARGS:---quick} 2>&1 | tee "$OUT/train.log" | tail -30; record train $?
fi
timeout 300 python3 -m tk_ops.bench "$family" --out "$OUT" "$@" 2>&1 | tee "$OUT/bench.log" | tail -20; record bench $?
timeout 400 python3 -m tk_ops.bench "$family" --backward --out "$OUT" "$@" 2>&1 | tee "$OUT/bench_bwd.log" | tail -20; record "bench --backward" $?
if [ "${SANITIZE:-0}" = 1 ]; then sanitize_family "$family"; fi
finish
