#!/usr/bin/env bash
# One device call that profiles a family's kernels with Nsight Compute: builds only the families it needs, runs the
# family's quick benchmark under ncu for the kernels whose demangled names match KERNEL, and prints each profiled
# launch's summary (duration, SM and memory throughput, occupancy, registers, shared memory, issue activity and the
# main warp stall reasons). The full report stays under $OUT for `ncu --import`.
# Usage: [FAMILIES="gemm mamba2"] [KERNEL=regex] [SKIP=3] [COUNT=2] bash tools/device/ncu.sh <family> [bench arguments]
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/device/common.sh
family=${1:?usage: [FAMILIES=...] [KERNEL=regex] bash tools/device/ncu.sh <family> [bench arguments]}
shift
families=${FAMILIES:-$family}
cp configs.py "$OUT/configs.py.orig" && trap 'cp "$OUT/configs.py.orig" configs.py' EXIT
list=$(printf '"%s", ' $families)
sed -i "s/^KERNELS = .*/KERNELS = [${list%, }]/" configs.py  # the build only (restored on exit)
install_extension || exit 1
# The benchmark's first calls of each case are warm-ups: SKIP passes over them.
timeout 540 ncu --target-processes all --kernel-name-base demangled -k "regex:${KERNEL:-$family}" \
    --launch-skip "${SKIP:-3}" --launch-count "${COUNT:-2}" --set full -f -o "$OUT/profile" \
    python3 -m tk_ops.bench "$family" --quick --reps 2 --out "$OUT" "$@" > "$OUT/ncu_run.log" 2>&1
status=$?; record ncu $status; echo "ncu: exit $status (log: $OUT/ncu_run.log)"
ncu --import "$OUT/profile.ncu-rep" --page details --print-units base > "$OUT/ncu_details.txt" 2>&1
grep -E "^  [A-Za-z_].*\(|Duration|Compute \(SM\) Throughput|^    Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per Thread|Dynamic Shared Memory Per Block|Issue Slots Busy|No Eligible|Warp Cycles Per Issued Instruction" \
    "$OUT/ncu_details.txt" | cut -c1-160 | head -80
finish
