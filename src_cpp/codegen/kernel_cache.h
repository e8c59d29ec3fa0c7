// Compiled kernels, cached in memory and on disk.
//
// The key is (source hash, target architecture, NVRTC version, a driver /
// runtime version string the caller supplies). The source hash covers the
// kernel source, every header it was compiled with and the NVRTC options, so
// editing a device/*.cuh file or flipping -lineinfo is a new key.
// See docs/design/0002-kernel-cache.md.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "codegen/compile_pool.h"
#include "codegen/nvrtc.h"

namespace mybackend {

enum class KernelCacheMode : std::int8_t {
  MemoryAndDisk,
  MemoryOnly,
  Disabled,  // always compile: the bypass switch for debugging a stale cache
};

struct KernelCacheOptions {
  KernelCacheMode mode = KernelCacheMode::MemoryAndDisk;
  // Explicit root directory; empty: $MYBACKEND_CACHE_DIR (where "", "0" or
  // "off" mean no disk cache), else $XDG_CACHE_HOME/mybackend, else
  // ~/.cache/mybackend.
  std::string directory;
  // Part of every key, e.g. "driver=13000 torch=2.11": what the caller knows
  // changes how an image loads or runs.
  std::string driver_version;
};

// Reads one environment variable; injectable so tests need not setenv.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_environment();

// The root directory the disk cache uses, or nullopt with the reason in
// *why (none can be found, or MYBACKEND_CACHE_DIR turns the disk cache off).
std::optional<std::string> resolve_cache_directory(const KernelCacheOptions& options,
                                                   const EnvLookup& env, std::string* why);

// Creates (mode 0700) and checks the entries directory under `root`
// (Permissions in docs/design/0002-kernel-cache.md); nullopt with the
// reason in *why when it is unusable.
std::optional<std::string> open_entries_directory(const std::string& root, std::string* why);

struct KernelCacheStats {
  std::uint64_t memory_hits = 0;
  std::uint64_t disk_hits = 0;
  std::uint64_t compiles = 0;
  std::uint64_t disk_rejects = 0;         // entries found but not used (corrupt, foreign, ...)
  std::uint64_t disk_write_failures = 0;  // entries that could not be stored
  // Microseconds: NVRTC compiles summed over threads, and the wall time of
  // get_all batches (Note [Compile-time counters]).
  std::uint64_t compile_us = 0;
  std::uint64_t batch_wall_us = 0;
};

class KernelCache {
 public:
  explicit KernelCache(KernelCacheOptions options, const EnvLookup& env = process_environment());
  KernelCache(const KernelCache&) = delete;
  KernelCache& operator=(const KernelCache&) = delete;

  // From memory, else disk, else NVRTC. Throws Error when compiling fails.
  std::shared_ptr<const CompiledKernel> get(const CompileRequest& request) {
    return get(request, directory_);
  }
  // Many at once: misses compile in parallel on `pool`; requests with equal
  // keys compile once. Outcomes come back in request order.
  std::vector<CompileOutcome> get_all(const std::vector<CompileRequest>& requests,
                                      const CompilePool& pool) {
    return get_all(requests, pool, directory_);
  }
  // The same with the disk half in `entries_directory` (from
  // open_entries_directory; empty: memory only) instead of directory():
  // one process-wide memory cache can serve compiles whose disk cache
  // lives in different places (option kernel_cache_dir).
  std::shared_ptr<const CompiledKernel> get(const CompileRequest& request,
                                            const std::string& entries_directory);
  std::vector<CompileOutcome> get_all(const std::vector<CompileRequest>& requests,
                                      const CompilePool& pool,
                                      const std::string& entries_directory);

  // The full key text (Note [Cache entry format] stores and compares it).
  std::string key(const CompileRequest& request) const;
  // Where the entry for `request` lives on disk; empty without a disk cache.
  std::string entry_path(const CompileRequest& request) const;
  // The entries directory; empty without a disk cache.
  const std::string& directory() const { return directory_; }
  // Why there is no disk cache although one was asked for; else empty.
  const std::string& disk_problem() const { return disk_problem_; }
  KernelCacheStats stats() const;

 private:
  std::shared_ptr<const CompiledKernel> find_in_memory(const std::string& key);
  std::shared_ptr<const CompiledKernel> compile_counted(const CompileRequest& request);
  std::shared_ptr<const CompiledKernel> load_from_disk(const std::string& key,
                                                       const std::string& directory);
  void store_to_disk(const std::string& key, const CompiledKernel& kernel,
                     const std::string& directory);

  KernelCacheOptions options_;
  std::string nvrtc_version_;
  std::string directory_;
  std::string disk_problem_;
  std::mutex mutex_;  // guards memory_
  std::unordered_map<std::string, std::shared_ptr<const CompiledKernel>> memory_;
  std::atomic<std::uint64_t> memory_hits_{0};
  std::atomic<std::uint64_t> disk_hits_{0};
  std::atomic<std::uint64_t> compiles_{0};
  std::atomic<std::uint64_t> disk_rejects_{0};
  std::atomic<std::uint64_t> disk_write_failures_{0};
  std::atomic<std::uint64_t> compile_us_{0};
  std::atomic<std::uint64_t> batch_wall_us_{0};
};

}  // namespace mybackend
