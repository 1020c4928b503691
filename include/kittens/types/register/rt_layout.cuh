// Register tile layouts.
//
// A 16x16 register tile is spread over the 32 lanes of a warp in the tensor cores' fragment
// order. Let g = lane / 4 and t = lane % 4.
//  * row layout: each lane holds four pairs that are adjacent along a ROW:
//      data[0] = (g,   2t..2t+1)   data[1] = (g+8, 2t..2t+1)
//      data[2] = (g,   2t+8..+9)   data[3] = (g+8, 2t+8..+9)
//    This is the A-operand and accumulator order of mma.sync m16n8k16.
//  * col layout: the transpose; pairs are adjacent along a COLUMN:
//      data[0] = (2t..2t+1,   g)   data[1] = (2t..2t+1,   g+8)
//      data[2] = (2t+8..+9,   g)   data[3] = (2t+8..+9,   g+8)
//    This is the B-operand order of mma.sync (B is K x N with K along pairs).
#pragma once

#include <concepts>

namespace kittens {
namespace ducks {
namespace rt_layout {
struct row {};
struct col {};
template <typename T>
concept all = std::same_as<T, row> || std::same_as<T, col>;
template <all L> struct transpose_t { using type = col; };
template <> struct transpose_t<col> { using type = row; };
template <all L> using transpose = typename transpose_t<L>::type;
} // namespace rt_layout
} // namespace ducks
using row_l = ducks::rt_layout::row;
using col_l = ducks::rt_layout::col;
} // namespace kittens
