#include "spec/kernel_kind.h"

namespace mybackend {
namespace {

// Indexed by KernelKind; a name is part of the Python surface (explain()).
constexpr std::string_view kNames[] = {"aten_sequence", "pointwise", "reduction", "norm",
                                       "matmul",        "attention", "conv",      "cast_group",
                                       "pool",          "transpose"};
static_assert(sizeof(kNames) / sizeof(kNames[0]) == kKernelKindCount,
              "every kernel kind needs a name");

}  // namespace

std::string_view kernel_kind_name(KernelKind kind) {
  const std::size_t index = kind_index(kind);
  return index < kKernelKindCount ? kNames[index] : "unknown";
}

}  // namespace mybackend
