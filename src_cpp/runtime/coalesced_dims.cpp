#include "runtime/coalesced_dims.h"

#include <cstddef>

namespace mybackend {

int coalesce_dims(std::vector<std::int64_t>& shape,
                  std::vector<std::vector<std::int64_t>>& strides) {
  const std::size_t rank = shape.size();
  const std::size_t tensors = strides.size();
  // Merged dims, outermost first; tensor k's stride of merged dim j at
  // merged[j * tensors + k] (the stride of the dim's innermost member).
  std::vector<std::int64_t> sizes;
  std::vector<std::int64_t> merged;
  for (std::size_t d = 0; d < rank; ++d) {
    if (shape[d] == 1) continue;
    bool joins = !sizes.empty();
    const std::size_t last = sizes.empty() ? 0 : (sizes.size() - 1) * tensors;
    for (std::size_t k = 0; joins && k < tensors; ++k)
      joins = merged[last + k] == strides[k][d] * shape[d];
    if (joins) {
      sizes.back() *= shape[d];
      for (std::size_t k = 0; k < tensors; ++k) merged[last + k] = strides[k][d];
    } else {
      sizes.push_back(shape[d]);
      for (std::size_t k = 0; k < tensors; ++k) merged.push_back(strides[k][d]);
    }
  }
  const std::size_t kept = sizes.size();
  if (kept == 0) return 0;
  // Position of merged dim j: the outermost first (when there are several),
  // the rest innermost.
  auto position = [&](std::size_t j) { return j == 0 && kept > 1 ? 0 : rank - kept + j; };
  shape.assign(rank, 1);
  for (auto& s : strides) s.assign(rank, 0);
  for (std::size_t j = 0; j < kept; ++j) {
    shape[position(j)] = sizes[j];
    for (std::size_t k = 0; k < tensors; ++k) strides[k][position(j)] = merged[j * tensors + k];
  }
  return static_cast<int>(kept);
}

}  // namespace mybackend
