// The spec of a tiled transposing copy (Note [Tiled transposing copies] in
// fusion/transposed_copies.h): what each element becomes and the tile the
// kernel stages it through (Note [Transpose tiles] in
// codegen/device/mb_transpose.cuh).
#pragma once

#include <cstdint>
#include <string>

#include "spec/kernel_spec.h"

namespace mybackend {

// A batch of 2-d transposes: the input read as [batch, a, b] with b its
// contiguous run, the output written as [batch, b, a] with a its contiguous
// run. Sizes and strides are kernel arguments (Note [Specs hold no sizes]);
// the tile, which the planner sizes from the static shape, is compiled in,
// so it is part of the spec's text and of the kernel-cache key. Any tile
// is correct for any size: partial tiles are masked.
//
// `body` is what one element becomes: one input, one output, no argument
// scalars (its rank, index64 and threads are ignored). For a copy it is a
// load and the casts of the copy's dtype conversions.
struct TransposeSpec {
  PointwiseSpec body;
  int tile_a = 32;  // rows of a tile: a elements (the output's contiguous side)
  int tile_b = 32;  // columns of a tile: b elements (the input's contiguous side)
  bool index64 = false;
  int threads = 256;  // block size

  DType in_dtype() const { return body.inputs.at(0).dtype; }
  DType out_dtype() const { return body.outputs.at(0).tensor.dtype; }

  std::string to_string() const;
  std::uint64_t hash() const;
};

// Bytes of shared memory a block of `spec`'s kernel holds: the tile in the
// output's compute type, each row padded to an odd number of elements.
std::int64_t transpose_tile_bytes(const TransposeSpec& spec);

// Empty when the spec can be emitted, else why not.
std::string validate(const TransposeSpec& spec);

}  // namespace mybackend
