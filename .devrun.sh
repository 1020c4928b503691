#!/usr/bin/env bash
# one device call: build (timed), the GPU op suite and the new library tests, one memcheck
set -uo pipefail
source tools/device/common.sh
deadline=$(( $(date +%s) + ${BUDGET:-420} ))
nvidia-smi --query-gpu=name --format=csv,noheader
[ -n "${FAMILIES:-}" ] && sed -i "s/^KERNELS = .*/KERNELS = [$(printf '\"%s\", ' $FAMILIES)]/" configs.py && grep ^KERNELS configs.py
install_extension || { tail -50 "$OUT/build.log"; exit 1; }
export TK_TEST_FILES=mem_raw,shared_opt_in
for t in "tests/gpu/lib/test_memory_raw.py tests/gpu/lib/test_shared_opt_in.py" \
         "tests/gpu/ops/test_fftconv.py tests/gpu/ops/test_fftconv_bwd.py tests/gpu/ops/test_nn_longconv.py" \
         "tests/gpu/ops/test_gemm.py" "tests/gpu/ops/test_based.py tests/gpu/ops/test_based_bwd.py tests/gpu/ops/test_based_quadratic.py tests/gpu/ops/test_based_step.py tests/gpu/ops/test_nn_based.py" \
         "tests/gpu/ops/test_mamba2.py tests/gpu/ops/test_mamba2_bwd.py tests/gpu/ops/test_mamba2_step.py tests/gpu/ops/test_nn_mamba2.py" \
         "tests/gpu/ops/test_attention.py tests/gpu/ops/test_attention_bwd.py tests/gpu/ops/test_attention_varlen.py tests/gpu/ops/test_attention_masks.py tests/gpu/ops/test_nn_attention.py tests/gpu/ops/test_attention_headdims.py"; do
    left=$(( deadline - $(date +%s) )); [ $left -lt 10 ] && { echo "SKIPPED (time): $t"; continue; }
    name=$(echo $t | awk '{print $1}' | xargs basename)
    s=$(date +%s); timeout $left python3 -m pytest $t -q -p no:cacheprovider -ra > "$OUT/pytest_$name.log" 2>&1; rc=$?
    echo "== $t: exit $rc in $(( $(date +%s) - s )) s: $(tail -1 $OUT/pytest_$name.log)"
    grep -E "^(FAILED|ERROR)" "$OUT/pytest_$name.log" | head -8
done
