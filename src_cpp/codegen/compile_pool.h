// Compiles many NVRTC programs at once. A graph yields tens of kernels and
// each NVRTC compile takes 0.1-1 s of one core, so compiling them side by
// side is most of the compile-time win.
//
// Workers are started per batch and joined before the call returns: no
// thread outlives a compile, nothing is global, and results come back in
// request order whatever the scheduling (determinism).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "codegen/nvrtc.h"

namespace mybackend {

// A failure is a value here: one bad kernel does not hide the others'
// results, and the caller decides (fallback or raise).
struct CompileOutcome {
  std::shared_ptr<const CompiledKernel> kernel;  // set on success
  std::string error;                             // NVRTC's message and log otherwise
  bool ok() const { return kernel != nullptr; }
};

class CompilePool {
 public:
  // 0: one thread per hardware thread. Never more threads than work items.
  explicit CompilePool(int max_threads = 0);

  int max_threads() const { return max_threads_; }

  // Runs fn(i) for every i < count; returns when all have finished. If any
  // throw, rethrows the exception of the lowest i once all are done.
  void parallel_for(std::size_t count, const std::function<void(std::size_t)>& fn) const;

  std::vector<CompileOutcome> compile(const std::vector<CompileRequest>& requests) const;

 private:
  int max_threads_;
};

}  // namespace mybackend
