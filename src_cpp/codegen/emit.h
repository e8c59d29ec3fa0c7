// Stage 8a: spec -> CUDA C++ source. One emitter per kernel kind
// (emit_pointwise.cpp, emit_reduction.cpp, emit_norm.cpp, emit_cast_group.cpp,
// emit_pool.cpp, emit_transpose.cpp); the parts that do not vary live in
// device/*.cuh, which every program gets as headers.
//
// Note [Kernel ABI]
// Each entry point is extern "C" (its name is the symbol the runtime looks
// up) and takes, in order, the parameters listed in KernelEntry::params:
// device pointers, then scalar arguments (double for floating scalars,
// int64 for the rest), then sizes as int64, then shapes and strides as
// mb::Dims<R> (R int64 values, passed by value), then plain structs passed
// by value (a cast group's table). Loops are grid-stride, so any grid size
// is correct; the runtime picks one for occupancy.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "spec/kernel_spec.h"
#include "spec/transpose_spec.h"

namespace mybackend {

struct KernelParam {
  enum class Kind : std::int8_t { Pointer, Int64, Float64, Dims, Bytes };
  Kind kind = Kind::Pointer;
  std::string name;       // "in0", "out1", "scalar2", "numel", "shape", "stride_in1", ...
  int rank = 0;           // Dims only
  std::size_t bytes = 0;  // Bytes only: the struct's size, a multiple of 8

  std::size_t size_bytes() const;
};

struct KernelEntry {
  std::string name;  // the extern "C" symbol
  std::vector<KernelParam> params;
  int block_x = 256;
  int block_y = 1;
  // Elements one thread handles per loop step (the vector width): the
  // runtime divides by it when sizing the grid.
  int elements_per_thread = 1;
  // Row-wise forward norms: elements of a row one thread holds in
  // registers (Note [Rows in registers] in device/mb_norm.cuh); the runtime
  // derives rows per block from it. 0: a block per row.
  int row_elements_per_thread = 0;
};

struct EmittedKernel {
  std::string source;
  std::vector<KernelEntry> entries;
};

// Each throws InternalError when validate(spec) reports a problem: the
// planner asks validate() first, so an invalid spec here is a bug.
EmittedKernel emit_pointwise(const PointwiseSpec& spec);
EmittedKernel emit_reduction(const ReductionSpec& spec);
EmittedKernel emit_norm(const NormSpec& spec);
EmittedKernel emit_cast_group(const CastGroupSpec& spec);
EmittedKernel emit_pool(const PoolSpec& spec);
EmittedKernel emit_transpose(const TransposeSpec& spec);

}  // namespace mybackend
