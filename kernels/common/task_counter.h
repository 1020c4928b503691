// The counter that kernels with dynamic task scheduling (LCSF's DYNAMIC_TASKS) draw their tasks from, shared by the
// bindings of the families that launch such kernels.
#pragma once

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <map>
#include <mutex>
#include <utility>

namespace tk_kernels {

// 2 ints, zero at launch; the kernels leave them zero. Launches on one stream run in order, so each (device, stream)
// keeps one, zeroed once when it is made (never freed: a few bytes per stream, and no CUDA call at process exit).
// While a CUDA graph is captured, the graph gets its own, zeroed inside the graph; the caller holds it until the
// launch is recorded.
inline at::Tensor task_counter(const c10::Device &device) {
    const auto zeroed = [&] { return at::zeros({2}, at::TensorOptions().dtype(at::kInt).device(device)); };
    if (c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None) return zeroed();
    const c10::StreamId stream = at::cuda::getCurrentCUDAStream(device.index()).id();
    static std::mutex mutex;
    static auto *counters = new std::map<std::pair<int, c10::StreamId>, at::Tensor>();
    const std::lock_guard<std::mutex> lock(mutex);
    at::Tensor &counter = (*counters)[{int(device.index()), stream}];
    if (!counter.defined()) counter = zeroed();
    return counter;
}

} // namespace tk_kernels
