#!/usr/bin/env bash
# One device call for the attention backward: build the extension, check gradients against float64, time the
# backward next to SDPA, and (SANITIZE=1) run compute-sanitizer over a small case.
# Usage: [SANITIZE=1] bash tools/device_attention_bwd.sh [extra args for tools/attn_bwd_check.py]
set -uo pipefail
OUT=${OUT:-/tmp/tk_out}; mkdir -p "$OUT"
export MAX_JOBS=16 PYTHONUNBUFFERED=1
start=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "extension build: $(( $(date +%s) - start )) s"
timeout 400 python3 tools/attn_bwd_check.py "$@" 2>&1 | tee "$OUT/bwd.log"
if [ "${SANITIZE:-0}" = 1 ]; then
    for tool in memcheck racecheck synccheck; do
        timeout 120 compute-sanitizer --tool $tool --print-limit 5 python3 - <<'PY' 2>&1 | tail -4 | tee -a "$OUT/sanitize.log"
import sys; sys.path.insert(0, 'tools')
import torch, attn_bwd_check  # noqa: F401  (loads the kernels, defines the op where the package does not)
for d in (64, 128):
    for causal in (False, True):
        q = torch.randn(1, 2, 300, d, device="cuda", dtype=torch.bfloat16); k = torch.randn(1, 1, 200, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k); o, lse = torch.ops.tk_ops.attention_fwd(q, k, v, causal, 0.1)
        torch.ops.tk_ops.attention_bwd(q, k, v, o, torch.randn_like(o), lse, causal, 0.1)
torch.cuda.synchronize(); print("sanitized run finished")
PY
    done
fi
