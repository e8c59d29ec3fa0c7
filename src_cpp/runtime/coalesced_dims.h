// Merging the dims a pointwise kernel walks as one (torch-free, unit-tested
// in tests/cpp/test_coalesced_dims.cpp).
//
// Note [Coalesced dims]
// A generated kernel finds a strided tensor's element by peeling the
// coordinates off the flat index, one runtime div/mod per dim of the
// iteration space (emit::strided_offsets). A per-channel scale beside a
// channels-last activation walks [N, H, W, C] in memory order with strides
// (0, 0, 0, 1), where one mod by C would do: ResNet-50's batch-norm apply
// kernels ran at 62-71% of copy bandwidth with three of each per vector.
// At launch, dims that every tensor of the call walks as one (each stride of
// the outer dim is the inner stride times the inner size) are merged and
// size-1 dims dropped. The rank stays the kernel's: the outermost merged dim
// takes position 0, the others the innermost positions, size-1 dims (stride
// 0) fill the middle, and the generated code skips dims of size 1 (one
// uniform branch each). The per-channel case becomes [N*H*W, 1, 1, C]: one
// mod and one div.
#pragma once

#include <cstdint>
#include <vector>

namespace mybackend {

// Coalesces `shape` and every tensor's `strides` (each of shape's rank) in
// place, as Note [Coalesced dims] says; returns the dims of size > 1 left.
int coalesce_dims(std::vector<std::int64_t>& shape,
                  std::vector<std::vector<std::int64_t>>& strides);

}  // namespace mybackend
