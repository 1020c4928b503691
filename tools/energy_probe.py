"""Energy per call next to time per call, tk_ops against its peer, on the bench's cases: each implementation runs
back to back on one input set for about a second and a half while NVML's energy counter and the SM clock are read.
A call that holds the GPU at its power limit runs at whatever clock the limit leaves, so under that limit the faster
side is the one that spends fewer joules per call.

    python tools/energy_probe.py [--seconds 1.5]
"""
import argparse
import ctypes
import threading
import time

import torch

from tk_ops.bench import attention, gemm


class Nvml:
    def __init__(self):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        if self.lib.nvmlInit_v2():
            raise RuntimeError("nvmlInit failed")
        self.handle = ctypes.c_void_p()
        if self.lib.nvmlDeviceGetHandleByIndex_v2(torch.cuda.current_device(), ctypes.byref(self.handle)):
            raise RuntimeError("nvmlDeviceGetHandleByIndex failed")

    def energy_j(self) -> float:
        mj = ctypes.c_ulonglong()
        self.lib.nvmlDeviceGetTotalEnergyConsumption(self.handle, ctypes.byref(mj))
        return mj.value / 1000

    def sm_mhz(self) -> int:
        mhz = ctypes.c_uint()
        self.lib.nvmlDeviceGetClockInfo(self.handle, 1, ctypes.byref(mhz))  # NVML_CLOCK_SM
        return mhz.value


def measure(nvml: Nvml, fn, args, seconds: float):
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn(*args)
    torch.cuda.synchronize()
    reps = max(5, int(seconds / max(time.perf_counter() - t0, 1e-6)))
    clocks, done = [], threading.Event()

    def sample():
        while not done.is_set():
            clocks.append(nvml.sm_mhz())
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    e0, t0 = nvml.energy_j(), time.perf_counter()
    sampler.start()
    for _ in range(reps):
        fn(*args)
    torch.cuda.synchronize()
    t1, e1 = time.perf_counter(), nvml.energy_j()
    done.set()
    sampler.join()
    clocks.sort()
    return (t1 - t0) / reps * 1e3, (e1 - e0) / reps, (e1 - e0) / (t1 - t0), clocks[len(clocks) // 2] if clocks else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.5)
    args = parser.parse_args()
    nvml = Nvml()
    cases = [attention.attention_case(n, 128, causal, backward=True) for causal in (False, True) for n in (2048, 8192)]
    cases += [c for c in gemm.cases() if c.name in ("8192x8192x8192", "16384x16384x16384")]
    print(f"{'case':40s} {'impl':18s} {'ms':>8s} {'J/call':>8s} {'W':>6s} {'SM MHz':>7s}")
    for case in cases:
        inputs = case.make_inputs()
        for impl in case.impls:
            fn_args = impl.setup(*inputs) if impl.setup else inputs
            ms, joules, watts, mhz = measure(nvml, impl.fn, fn_args, args.seconds)
            print(f"{case.group + ' ' + case.name:40s} {impl.name:18s} {ms:8.3f} {joules:8.3f} {watts:6.0f} {mhz:7d}")
            del fn_args
        del inputs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
