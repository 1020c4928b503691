// Argument checks for the torch bindings (host code only, no torch headers).
//
// A failed check throws std::invalid_argument (torch raises it in Python as ValueError). The message is
// assembled with std::string and std::to_string, never through std::ostream (which TORCH_CHECK uses): on the
// device image, number formatting through a stream inside this library crashed the process, apparently a
// mismatch between the libstdc++ headers built against and the one loaded at run time.
#pragma once

#include <stdexcept>
#include <string>
#include <type_traits>

namespace tk_kernels {

inline std::string text(const char *s) { return s; }
inline std::string text(const std::string &s) { return s; }
template <typename T>
    requires std::is_arithmetic_v<T>
std::string text(T v) { return std::to_string(v); }

// require(cond, "message parts ", 42, ...): throws the concatenated message unless cond holds.
template <typename... Parts> void require(bool ok, const Parts &...parts) {
    if (ok) return;
    throw std::invalid_argument((std::string() + ... + text(parts)));
}

} // namespace tk_kernels
