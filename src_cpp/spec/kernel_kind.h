// The kinds of kernel group a fusion plan holds, and their names (explain()'s
// "kind", the fusion plan's text). How the runtime runs each kind is one row
// of the table in runtime/kernel_kinds.cpp (Note [One row per kernel kind]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace mybackend {

enum class KernelKind : std::int8_t {
  AtenSequence,
  Pointwise,
  Reduction,
  Norm,
  Matmul,
  Attention,
  Conv,
  CastGroup,  // Note [Grouped casts] in fusion/cast_groups.h
  Pool,       // Note [Pool groups] in fusion/pool_planner.h
  Transpose   // Note [Tiled transposing copies] in fusion/transposed_copies.h
};

// One more than the last kind: sizes the tables indexed by kind.
constexpr std::size_t kKernelKindCount = static_cast<std::size_t>(KernelKind::Transpose) + 1;

constexpr std::size_t kind_index(KernelKind kind) { return static_cast<std::size_t>(kind); }

std::string_view kernel_kind_name(KernelKind kind);

}  // namespace mybackend
