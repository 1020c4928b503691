# Sourced by the device runners: the log folder and the extension build they all start with.
OUT=${OUT:-/tmp/tk_out}; mkdir -p "$OUT"
export MAX_JOBS=${MAX_JOBS:-16} PYTHONUNBUFFERED=1

# Steps that failed (tests, sanitizers, benches); the runners end with `finish`, which exits non-zero if there was one,
# so that a runner never reports success over a failed step.
FAILED_STEPS=()
# record STEP STATUS: remember STEP if STATUS is non-zero; returns STATUS.
record() {
    [ "$2" -ne 0 ] && FAILED_STEPS+=("$1 (exit $2)")
    return "$2"
}
finish() {
    if [ ${#FAILED_STEPS[@]} -gt 0 ]; then
        echo "FAILED: ${FAILED_STEPS[*]}"
        exit 1
    fi
    echo "all steps passed"
    exit 0
}

# Builds and installs the extension as the README does (setup.py takes its flags from python/tk_ops/_build_config.py);
# prints the build time, or the errors and returns 1.
install_extension() {
    local start=$(date +%s)
    if ! python3 -m pip install --no-build-isolation --no-deps --no-index -q . > "$OUT/build.log" 2>&1; then
        grep -E "error" "$OUT/build.log" | head -30 || tail -40 "$OUT/build.log"
        return 1
    fi
    echo "extension build: $(( $(date +%s) - start )) s"
}

# compute-sanitizer's memcheck, racecheck and synccheck over tools/check/sanitize_<family>.py, racecheck with the
# script's --small cases where it has them. One summary line per tool; logs under $OUT.
sanitize_family() {
    local family=$1 script="tools/check/sanitize_$1.py" tool args log
    for tool in memcheck racecheck synccheck; do
        args=""
        [ "$tool" = racecheck ] && grep -q -- "--small" "$script" && args="--small"
        log="$OUT/sanitize_${family}_$tool.log"
        timeout 600 compute-sanitizer --tool $tool --error-exitcode 9 python3 "$script" $args > "$log" 2>&1
        local status=$?
        record "compute-sanitizer $family $tool" $status
        echo "compute-sanitizer $family $tool: exit $status $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)"
    done
}
