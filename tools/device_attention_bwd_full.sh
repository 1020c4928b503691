#!/usr/bin/env bash
# One device call for the attention backward's acceptance: build, the attention GPU tests (forward, backward,
# nn.Attention), the training example, and the backward bench. Logs and bench files under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/tk_out}; mkdir -p "$OUT"
export MAX_JOBS=16 PYTHONUNBUFFERED=1
start=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "extension build: $(( $(date +%s) - start )) s"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_attention.py tests/gpu/test_attention_bwd.py \
    tests/gpu/test_nn_attention.py 2>&1 | tee "$OUT/tests.log" | tail -15
timeout 200 python3 examples/train_gpt.py "$@" 2>&1 | tee "$OUT/train_gpt.log" | tail -30
timeout 300 python3 -m tk_ops.bench attention --backward --out "$OUT" 2>&1 | tee "$OUT/bench_bwd.log" | tail -30
