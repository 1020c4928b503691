#!/usr/bin/env bash
# One device call that times two builds side by side: the current tree against an older one, so that a change meant to
# leave the kernels' speed alone can show it. The older tree is a copy of its sources in an ignored folder that travels
# with the call (e.g. `git archive <commit> include kernels python setup.py configs.py | tar -x -C .ab_base`).
# Both extensions are built in place (nothing is installed), then each bench runs once per build, alternating
# base / new ROUNDS times so that drift in clocks or temperature falls on both.
# Usage: BASE=.ab_base [BENCHES="attention attention:--backward"] [ROUNDS=2] [QUICK=--quick] bash tools/device/ab.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/device/common.sh
BASE=${BASE:?name the older tree, e.g. BASE=.ab_base}
ROUNDS=${ROUNDS:-2}
half=$(( ${MAX_JOBS:-16} / 2 > 0 ? ${MAX_JOBS:-16} / 2 : 1 ))

build_in_place() { # $1: tree, $2: log name
    (cd "$1" && MAX_JOBS=$half python3 setup.py build_ext --inplace > "$OUT/$2.log" 2>&1) \
        || { echo "build of $1 failed:"; grep -E "error" "$OUT/$2.log" | head -20; return 1; }
}
start=$(date +%s)
build_in_place "$BASE" build_base & base_pid=$!
build_in_place . build_new & new_pid=$!
wait $base_pid || exit 1
wait $new_pid || exit 1
echo "both builds: $(( $(date +%s) - start )) s"

for round in $(seq "$ROUNDS"); do
    for bench in ${BENCHES:-attention attention:--backward}; do
        family=${bench%%:*}; flags=""
        [ "$bench" != "$family" ] && flags=${bench#*:}
        for side in base new; do
            tree=$([ $side = base ] && echo "$BASE" || echo .)
            tag="${family}${flags//-/_}_${side}_$round"
            PYTHONPATH="$tree/python" python3 -m tk_ops.bench "$family" $flags ${QUICK:-} --out "$OUT/$tag" \
                > "$OUT/bench_$tag.log" 2>&1
            status=$?; record "bench $tag" $status; echo "bench $family $flags ($side, round $round): exit $status"
        done
    done
done
# One line per case: the new build's time over the base build's, per round (below 1: the new build is faster).
python3 - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
runs = {}
for path in sorted(out.glob("*_*_*/*.json")):
    family_flags, side, round_ = path.parent.name.rsplit("_", 2)
    for row in json.loads(path.read_text())["rows"]:
        ours = row["results"][row["ours"]]
        if ours.get("ms"):
            runs.setdefault((family_flags, row["group"], row["name"]), {}).setdefault(round_, {})[side] = ours["ms"]
print(f"{'bench':<24} {'case':<44} new/base per round")
for (bench, group, label), rounds in runs.items():
    ratios = [f"{r['new'] / r['base']:.3f}" for _, r in sorted(rounds.items()) if "new" in r and "base" in r]
    print(f"{bench:<24} {(group + ' ' + label)[:44]:<44} {' '.join(ratios)}")
EOF
finish
