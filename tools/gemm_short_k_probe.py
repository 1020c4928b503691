"""Where the time of a short-K GEMM goes, beside cuBLAS: the kernel's own duration (torch.profiler) against the
event-timed interval the bench reports, warm (one input set, back to back) and cold (the bench's rotation and
spin), next to the plain write rate of the output's size (memset and copy of the same bytes).

    python tools/gemm_short_k_probe.py [4096x4096x256 ...]
"""
import statistics
import sys

import torch

import tk_ops
from tk_ops.bench.core import SPIN_CYCLES, kernel_times, rotation_count, tensor_bytes, time_calls


def back_to_back_us(fn, args, calls=50):
    for _ in range(5):
        fn(*args)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn(*args)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def cold_kernel_us(fn, sets, calls=30):
    """Kernel time per call (profiler) when every call gets a cold input set after a spin, as in the bench."""
    def call(i):
        torch.cuda._sleep(SPIN_CYCLES)
        fn(*sets[i % len(sets)])
    times = kernel_times(call, calls)
    return {name[:60]: t for name, (t, _) in times.items() if "sleep" not in name.lower()}


def main():
    sizes = [tuple(int(x) for x in s.split("x")) for s in sys.argv[1:]] or [(4096, 4096, 256)]
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    for m, n, k in sizes:
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        src = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        mb = out.numel() * 2 / 1e6
        t_zero = back_to_back_us(lambda: out.zero_(), ())
        t_copy = back_to_back_us(lambda: out.copy_(src), ())
        print(f"{m}x{n} output ({mb:.1f} MB): zero_ {t_zero:.1f} us ({mb / t_zero:.2f} TB/s), "
              f"copy_ {t_copy:.1f} us ({2 * mb / t_copy:.2f} TB/s read+write)")
        make = lambda: (torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
                        torch.randn(k, n, device="cuda", dtype=torch.bfloat16))
        first = make()
        sets = [first] + [make() for _ in range(rotation_count(tensor_bytes(first), l2) - 1)]
        tf = 2 * m * n * k / 1e6
        for name, fn in (("tk_ops", tk_ops.matmul), ("cuBLAS", torch.matmul)):
            warm = back_to_back_us(fn, first)
            bench = time_calls(fn, sets, reps=30, warmup=5) * 1e3
            cold = cold_kernel_us(fn, sets)
            kernels = ", ".join(f"{t:.1f} us {n}" for n, t in cold.items())
            print(f"  {name}: warm back-to-back {warm:.1f} us ({tf / warm:.0f} TFLOP/s), bench interval {bench:.1f} us, "
                  f"cold kernels: {kernels}")


if __name__ == "__main__":
    main()
