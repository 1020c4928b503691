#!/usr/bin/env python3
"""Writes include/kittens/ops/group/wgmma/instructions.cuh: one inline-PTX wrapper per wgmma
shape we use (m64nNk16 for bf16/fp16, m64nNk32 for fp8, N = 16, 32, ..., 256).

The accumulator operand list is what makes these wrappers long (N/2 registers per thread), and it
is pure bookkeeping, so it is generated rather than written by hand. Each wrapper binds the
registers of one 16-row block of a per-warp accumulator rt_fl<16*H, N> (tiles[h][0..N/16-1]) in
the order of the PTX ISA's wgmma D fragment: d[8j + 2p + q] = tiles[h][j].data[p].{x,y}[q].

Run from the repository root:  python3 tools/gen/gen_wgmma.py   (a CPU test checks that the header
is up to date:  python3 tools/gen/gen_wgmma.py --check).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[2] / "include" / "kittens" / "ops" / "group" / "wgmma" / "instructions.cuh"
NS = list(range(16, 257, 16))

# (C++ element type, PTX type name) for the 16-bit inputs.
HALF_TYPES = [("bf16", "bf16"), ("half", "f16")]
FP8_TYPES = [("fp8e4m3", "e4m3"), ("fp8e5m2", "e5m2")]


def acc_regs(n: int) -> str:
    return ", ".join(f"%{i}" for i in range(n // 2))


def acc_operands(n: int) -> str:
    ops = []
    for j in range(n // 16):
        for p in range(4):
            for q in "xy":
                ops.append(f'"+f"(d[{j}].data[{p}].{q})')
    lines = []
    for i in range(0, len(ops), 4):
        lines.append(", ".join(ops[i:i + 4]))
    return (",\\\n    ").join(lines)


def asm_block(instr: str, tail_ops: str, inputs: str, scale_index: int, indent: int = 12) -> str:
    """One asm statement; operand `scale_index` is the scale-d flag, turned into a predicate."""
    pad = " " * indent
    cont = pad + " " * len("asm volatile(")
    return (
        f'{pad}asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{scale_index}, 0;\\n"\n'
        f'{cont}"{instr} {{ACC}}, {tail_ops};\\n}}\\n"\n'
        f'{cont}: KITTENS_WGMMA_ACC\n'
        f'{cont}: {inputs});\n'
    )


def shape_struct(n: int) -> str:
    r = n // 2  # first operand index after the accumulators
    out = [f"#define KITTENS_WGMMA_ACC \\\n    {acc_operands(n)}\n"]
    out.append(f"template <> struct mma_shape<{n}> {{\n")
    out.append(f"    using acc_row = rt_base<float, row_l>[{n // 16}];\n\n")

    # A and B from shared memory, 16-bit inputs, optional transposes.
    out.append("    template <typename T, int trans_a, int trans_b>\n")
    out.append("    __device__ static inline void ss(acc_row &d, uint64_t a, uint64_t b, int scale_d) {\n")
    for i, (ct, pt) in enumerate(HALF_TYPES):
        kw = "if" if i == 0 else "} else if"
        out.append(f"        {kw} constexpr (std::same_as<T, {ct}>) {{\n")
        instr = f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{pt}.{pt}"
        tail = f"%{r}, %{r + 1}, p, 1, 1, %{r + 3}, %{r + 4}"
        inputs = '"l"(a), "l"(b), "r"(scale_d), "n"(trans_a), "n"(trans_b)'
        out.append(asm_block(instr, tail, inputs, r + 2))
    out.append("        } else {\n            static_assert(sizeof(T) == 0, \"16-bit wgmma takes bf16 or half\");\n        }\n    }\n\n")

    # A from registers (4 x 32-bit per thread), B from shared memory.
    out.append("    template <typename T, int trans_b>\n")
    out.append("    __device__ static inline void rs(acc_row &d, const uint32_t (&a)[4], uint64_t b, int scale_d) {\n")
    for i, (ct, pt) in enumerate(HALF_TYPES):
        kw = "if" if i == 0 else "} else if"
        out.append(f"        {kw} constexpr (std::same_as<T, {ct}>) {{\n")
        instr = f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{pt}.{pt}"
        tail = f"{{%{r}, %{r + 1}, %{r + 2}, %{r + 3}}}, %{r + 4}, p, 1, 1, %{r + 6}"
        inputs = '"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d), "n"(trans_b)'
        out.append(asm_block(instr, tail, inputs, r + 5))
    out.append("        } else {\n            static_assert(sizeof(T) == 0, \"16-bit wgmma takes bf16 or half\");\n        }\n    }\n\n")

    # fp8: both operands K-major in shared memory (the hardware has no fp8 transpose).
    out.append("    template <typename TA, typename TB>\n")
    out.append("    __device__ static inline void ss_fp8(acc_row &d, uint64_t a, uint64_t b, int scale_d) {\n")
    first = True
    for ca, pa in FP8_TYPES:
        for cb, pb in FP8_TYPES:
            kw = "if" if first else "} else if"
            first = False
            out.append(f"        {kw} constexpr (std::same_as<TA, {ca}> && std::same_as<TB, {cb}>) {{\n")
            instr = f"wgmma.mma_async.sync.aligned.m64n{n}k32.f32.{pa}.{pb}"
            tail = f"%{r}, %{r + 1}, p, 1, 1"
            inputs = '"l"(a), "l"(b), "r"(scale_d)'
            out.append(asm_block(instr, tail, inputs, r + 2))
    out.append("        } else {\n            static_assert(sizeof(TA) == 0, \"fp8 wgmma takes e4m3 or e5m2\");\n        }\n    }\n")
    out.append("};\n#undef KITTENS_WGMMA_ACC\n\n")
    text = "".join(out)
    return text.replace("{ACC}", "{" + acc_regs(n) + "}")


HEADER = """\
// GENERATED by tools/gen/gen_wgmma.py -- do not edit by hand; change the script and rerun it.
//
// Raw wgmma.mma_async wrappers, one struct per N (the instruction's n dimension). Each member
// issues ONE instruction for one 64-row slab of the warpgroup's output; the warpgroup-level
// operations in wgmma.cuh loop over K steps and row slabs and own the fence / commit / wait.
//   ss<T, trans_a, trans_b>: A and B from shared memory descriptors (16-bit inputs, k16)
//   rs<T, trans_b>:          A from four 32-bit registers per thread (k16)
//   ss_fp8<TA, TB>:          A and B K-major from shared memory (fp8 inputs, k32)
// scale_d = 0 makes the instruction ignore the accumulator's old value (D = A*B).
#pragma once

#include <cstdint>

#include "../../../common/common.cuh"
#include "../../../types/register/rt.cuh"

namespace kittens {
namespace wgmma {
namespace detail {

template <int N> struct mma_shape {
    static_assert(N % 16 == 0 && N >= 16 && N <= 256, "wgmma N must be a multiple of 16 between 16 and 256");
};

"""

FOOTER = """\
} // namespace detail
} // namespace wgmma
} // namespace kittens
"""


def generate() -> str:
    return HEADER + "".join(shape_struct(n) for n in NS) + FOOTER


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if the checked-in header is stale")
    args = ap.parse_args()
    text = generate()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is out of date: run python3 tools/gen/gen_wgmma.py", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
