"""Benchmarks: `python -m tk_ops.bench <family> [--backward] [--out DIR] [--quick]`.

Each family has a module here (gemm.py, ...) whose `cases(quick, backward)` lists what to time;
core.py does the timing and reporting. Timed runs belong here, not in the tests.
"""
