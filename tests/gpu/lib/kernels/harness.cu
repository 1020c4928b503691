// The registry behind harness.cuh and the C entry points that tests/gpu/lib/tklib.py calls.
#include <map>
#include <vector>

#include "harness.cuh"

namespace tk_test {
static std::map<std::string, entry_fn> &registry() {
    static std::map<std::string, entry_fn> r;
    return r;
}
void add(const std::string &name, entry_fn fn) {
    if (!registry().emplace(name, fn).second) {
        std::fprintf(stderr, "tk_test: duplicate test entry %s\n", name.c_str());
        std::abort();
    }
}
} // namespace tk_test

extern "C" {
int tk_test_count() { return int(tk_test::registry().size()); }

const char *tk_test_name(int i) {
    static std::vector<std::string> names;
    if (names.size() != tk_test::registry().size()) {
        names.clear();
        for (auto &kv : tk_test::registry()) names.push_back(kv.first);
    }
    return (i >= 0 && i < int(names.size())) ? names[i].c_str() : nullptr;
}

// Returns -1 for an unknown name, else the CUDA error of the launch and of the synchronisation.
int tk_test_run(const char *name, void **bufs, const long long *args) {
    auto it = tk_test::registry().find(name);
    if (it == tk_test::registry().end()) return -1;
    int launch = it->second(bufs, args);
    if (launch != 0) return launch;
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return int(e);
    return int(cudaDeviceSynchronize());
}

const char *tk_test_error_string(int code) { return cudaGetErrorString(cudaError_t(code)); }
}
