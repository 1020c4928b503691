"""Tuning sweep: time tk_ops.matmul (one kernel configuration, picked by TK_OPS_GEMM_CONFIG in the
environment) against cuBLAS for both B layouts, one line per size. Run once per variant."""
import os
import sys

import torch

import tk_ops
from tk_ops.bench.core import rotation_count, tensor_bytes, time_calls

SIZES = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
         (4096, 4096, 256), (4096, 4096, 1024), (8192, 8192, 1024)]
if len(sys.argv) > 1:
    SIZES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[1:]]
variant = os.environ.get("TK_OPS_GEMM_CONFIG", "auto")
l2 = torch.cuda.get_device_properties(0).L2_cache_size
for m, n, k in SIZES:
    for layout in ("b_row", "b_t"):
        def make():
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16) if layout == "b_row" else \
                torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
            return a, b
        first = make()
        sets = [first] + [make() for _ in range(rotation_count(tensor_bytes(first), l2) - 1)]
        ours = time_calls(tk_ops.matmul, sets, reps=30, warmup=5)
        peer = time_calls(torch.matmul, sets, reps=30, warmup=5)
        tf = 2 * m * n * k / 1e9
        print(f"{variant} {m}x{n}x{k:<6} {layout:6} tk {tf / ours:7.1f}  cublas {tf / peer:7.1f}  ratio {peer / ours:5.2f}",
              flush=True)
