// Register vector layouts. A register vector is tied to a register tile: it holds one value per
// tile row (a column vector, used to reduce or broadcast across a row) or one per tile column
// (a row vector). Which lanes need which element follows from the tile layout (rt_layout.cuh):
//  * ortho: per 16 elements, each lane holds elements g and g+8 (g = lane / 4), as two scalars.
//    Row-layout tiles use it for col_vec; col-layout tiles for row_vec.
//  * align: per 16 elements, each lane holds the pairs (2t, 2t+1) and (2t+8, 2t+9) (t = lane % 4),
//    as two packed values. Row-layout tiles use it for row_vec; col-layout tiles for col_vec.
//  * naive: element i lives once, in lane i % 32 at slot i / 32: compact, for vector-only math.
#pragma once

#include <concepts>

namespace kittens {
namespace ducks {
namespace rv_layout {
struct naive {};
struct ortho {};
struct align {};
template <typename T>
concept all = std::same_as<T, naive> || std::same_as<T, ortho> || std::same_as<T, align>;
template <typename T>
concept tile_layout = std::same_as<T, ortho> || std::same_as<T, align>;
} // namespace rv_layout
} // namespace ducks
using naive_l = ducks::rv_layout::naive;
using ortho_l = ducks::rv_layout::ortho;
using align_l = ducks::rv_layout::align;
} // namespace kittens
