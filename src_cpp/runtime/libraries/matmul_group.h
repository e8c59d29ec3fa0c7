// Matmul groups at run time (CUDA engine II): one cuBLASLt call per group
// (libs/cublaslt_gemm.h) with the planned epilogue, on the current stream.
//
// Note [Matmul fallback]
// Same policy as generated kernels (Note [Never an error to the user]): a
// call whose tensors cuBLASLt cannot take as they are (strides that are no
// matrix, an empty product, a dtype or device the plan did not expect), for
// which the heuristic has no algorithm, or where a cuBLASLt call fails, runs
// the group's nodes as ATen calls instead; problem() keeps the last reason
// and ExecutionStats counts matmul_fallbacks. Nothing is disabled for good:
// the next call (other shapes, other strides) tries cuBLASLt again, and the
// algorithm cache remembers "no algorithm" per signature.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "runtime/libraries/library_group.h"
#include "spec/matmul_spec.h"

namespace mybackend {

// Nothing touches the GPU here: cuBLASLt's handle and algorithm come on
// the first run.
RunnerResult make_matmul_runner(const Graph& graph, std::shared_ptr<const MatmulSpec> spec);

// The counters of the process's cuBLASLt algorithm cache (hits, misses,
// entries); all zero without CUDA.
std::vector<std::pair<std::string, std::uint64_t>> matmul_algo_cache_counters();

// The process's last timed algorithm choices (Note [Timed algorithm choice];
// signatures with one candidate are not timed), oldest first: the
// signature, each candidate's configuration and mean ms (negative: it failed
// to launch), and the index kept. Empty without CUDA.
struct MatmulTimedChoice {
  std::string signature;
  std::vector<std::pair<std::string, float>> candidates;
  int chosen = -1;
};
std::vector<MatmulTimedChoice> matmul_timed_choices();

}  // namespace mybackend
