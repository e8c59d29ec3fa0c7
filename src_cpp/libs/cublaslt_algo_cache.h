// cuBLASLt's heuristic algorithm choice, cached per problem signature.
// CUDA builds only.
//
// Note [Algorithm cache key]
// cublasLtMatmulAlgoGetHeuristic costs tens of microseconds, more than a
// small matmul, so its answer is kept per signature: device, compute and
// scale types, epilogue, batch count, and for each of A, B, C, D its data
// type, operation, rows, cols, leading dimension, batch stride and pointer
// alignment (alignment changes which kernels are legal), plus the bias
// pointer's alignment and whether C is D. "No algorithm" is cached too, so a
// problem cuBLASLt cannot run falls back to ATen without asking again.
// The cache is process-wide and thread-safe (a shared mutex: lookups in
// parallel, inserts alone); it never evicts (one entry per shape seen).
#pragma once

#include <cublasLt.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace mybackend::cublaslt {

// One matrix as cuBLASLt sees it: column-major, before its operation.
struct Operand {
  cudaDataType_t type = CUDA_R_32F;
  cublasOperation_t op = CUBLAS_OP_N;
  std::uint64_t rows = 0, cols = 0;
  std::int64_t ld = 0;
  std::int64_t batch_stride = 0;
  std::uint32_t alignment = 0;  // bytes the pointer is aligned to, at most 256
  bool operator==(const Operand& o) const {
    return type == o.type && op == o.op && rows == o.rows && cols == o.cols && ld == o.ld &&
           batch_stride == o.batch_stride && alignment == o.alignment;
  }
};

// Everything the algorithm choice depends on (Note [Algorithm cache key]).
struct Signature {
  int device = 0;
  std::int32_t batch = 1;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  std::uint32_t bias_alignment = 0;
  bool c_is_d = true;
  Operand a, b, c, d;
  std::string key() const;
  bool operator==(const Signature& o) const {
    return device == o.device && batch == o.batch && compute == o.compute && scale == o.scale &&
           epilogue == o.epilogue && bias_alignment == o.bias_alignment && c_is_d == o.c_is_d &&
           a == o.a && b == o.b && c == o.c && d == o.d;
  }
};

struct AlgoChoice {
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace_bytes = 0;
};

// What one timed choice compared (Note [Timed algorithm choice]): each
// candidate's configuration ("algo 66 tile 24 stages 35 ... workspace 4")
// and its mean time per launch in ms (negative: it failed to launch), in the
// heuristic's order (those with workspace, then those without), and the
// index of the one kept.
struct TimedChoiceRecord {
  std::string signature;
  std::vector<std::string> candidates;
  std::vector<float> ms;
  int chosen = -1;
};

struct AlgoCacheStats {
  std::uint64_t hits = 0, misses = 0, entries = 0;
  std::uint64_t timed = 0;   // signatures whose choice was timed (Note [Timed algorithm choice])
  std::uint64_t reused = 0;  // calls that reused a prepared product (Note [Prepared products])
};

class AlgoCache {
 public:
  // Absent: never asked. Present but empty: cuBLASLt had no algorithm.
  std::optional<std::optional<AlgoChoice>> find(const std::string& key) const;
  void insert(const std::string& key, std::optional<AlgoChoice> choice);
  AlgoCacheStats stats() const;
  void count_timed() { timed_.fetch_add(1, std::memory_order_relaxed); }
  // The last kKeptTimedChoices timed choices, oldest first.
  static constexpr std::size_t kKeptTimedChoices = 64;
  void record_timed(TimedChoiceRecord record);
  std::vector<TimedChoiceRecord> timed_choices() const;
  void count_reused() { reused_.fetch_add(1, std::memory_order_relaxed); }

 private:
  mutable std::shared_mutex mutex_;
  std::unordered_map<std::string, std::optional<AlgoChoice>> entries_;
  mutable std::atomic<std::uint64_t> hits_{0}, misses_{0};
  std::atomic<std::uint64_t> timed_{0}, reused_{0};
  std::vector<TimedChoiceRecord> timed_choices_;  // guarded by mutex_
};

// The process's cache.
AlgoCache& algo_cache();

// The largest power of two (at most 256) that divides `address`.
std::uint32_t pointer_alignment(const void* address);

}  // namespace mybackend::cublaslt
