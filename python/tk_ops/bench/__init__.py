"""Benchmarks: `python -m tk_ops.bench <family> [--backward] [--out DIR] [--quick]`.

Each family has a module here (gemm.py, ...) whose `cases(quick, backward)` lists what to time;
core.py does the timing and reporting. overhead.py (`python -m tk_ops.bench overhead`) times the host's
cost per eager call instead, with its own `main`. Timed runs belong here, not in the tests.
"""
