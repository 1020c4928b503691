// The Python module tk_ops._C.
//
// Kernel families register their ops with torch themselves (kernels/<family>/binding.cpp, through
// TORCH_LIBRARY_FRAGMENT), so loading this shared library is what makes torch.ops.tk_ops.* appear.
// This file only tells Python what the build contains and how its ops word device errors. It includes
// pybind11 alone, not the whole torch extension header, because it needs nothing else and compiles in a
// fraction of the time.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cuda_runtime_api.h>
#include <torch/version.h>

#include <string>
#include <vector>

#include "common/error_phrases.h"

#ifndef TK_OPS_FAMILIES
#error "TK_OPS_FAMILIES (the comma-separated kernel families in this build) is set by setup.py"
#endif

namespace {

std::vector<std::string> selected_families() {
    const std::string all = TK_OPS_FAMILIES;
    std::vector<std::string> names;
    size_t start = 0;
    while (start < all.size()) {
        size_t end = all.find(',', start);
        if (end == std::string::npos) end = all.size();
        if (end > start) names.push_back(all.substr(start, end - start));
        start = end + 1;
    }
    return names;
}

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.doc() = "Compiled tk_ops kernels; the ops themselves are under torch.ops.tk_ops.";
    m.def("families", &selected_families, "The kernel families compiled into this build (configs.py KERNELS).");
    m.def("build_info", [] {
        pybind11::dict info;
        info["families"] = selected_families();
        info["arch"] = "sm_90a";
        info["cuda_runtime"] = CUDART_VERSION; // e.g. 13000 for CUDA 13.0
        info["torch"] = TORCH_VERSION;
        return info;
    }, "What this build was compiled for and against.");
    m.def("error_phrases", [] {
        pybind11::dict phrases;
        for (const auto &[phrase, error] : tk_kernels::ERROR_PHRASES) phrases[phrase] = error;
        return phrases;
    }, "{phrase: tk_ops exception name}: an op's error whose message holds the phrase is that exception.");
}
