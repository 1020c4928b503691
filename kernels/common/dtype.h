// The element types of the ops' tensors as the plain-CUDA interfaces of the families name them (no torch types, so
// device code builds without torch); common/checks.h maps torch's dtypes onto them.
#pragma once

namespace tk_kernels {

enum class dtype { bf16, fp16, fp32 };

} // namespace tk_kernels
