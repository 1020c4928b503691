// Which shipped configuration (gemm_configs.cuh) a problem runs with: the heuristics of both entry points
// (gemm_select.cu). The split-K count (matmul_bf16_splits) and the debugging switch that overrides the choice
// (force_config) are declared in gemm.h.
#pragma once

#include "gemm_configs.cuh"

namespace tk_gemm {

enum class config_id { big, hinted, resident, small, tiny };

// The 16-bit GEMM's configuration for an M x N x K problem, whatever the operands' memory order.
config_id pick_bf16(int M, int N, int K);
// The fp8 GEMM's block size for an M x N problem: big, small or tiny (fp32_out: the output is fp32, whose big blocks
// are narrower).
config_id pick_fp8(int M, int N, bool fp32_out);

} // namespace tk_gemm
