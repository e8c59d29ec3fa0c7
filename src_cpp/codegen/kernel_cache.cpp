#include "codegen/kernel_cache.h"

#include <chrono>
#include <cstdlib>

#include "codegen/cache_file.h"
#include "common/error.h"
#include "common/hash.h"

namespace mybackend {
namespace {

// Larger files are not kernels of ours; refusing them bounds the read.
constexpr std::size_t kMaxEntryBytes = std::size_t{256} << 20;
// A second, independent seed: two 64-bit FNV passes make source
// collisions (which would load the wrong kernel) practically impossible.
constexpr std::uint64_t kSecondSeed = 0x6d7962636b656e64ULL;  // "mybckend"

std::string hex(std::uint64_t value) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int d = 15; d >= 0; --d, value >>= 4)
    out[static_cast<std::size_t>(d)] = kDigits[value & 0xf];
  return out;
}

// Feeds length-prefixed pieces to two hashes, so that ("ab", "c") and
// ("a", "bc") differ.
struct SourceHasher {
  std::uint64_t a = kFnvOffsetBasis;
  std::uint64_t b = kSecondSeed;
  std::uint64_t bytes = 0;

  void add(std::string_view piece) {
    const std::string length = std::to_string(piece.size()) + ":";
    a = fnv1a64(piece, fnv1a64(length, a));
    b = fnv1a64(piece, fnv1a64(length, b));
    bytes += piece.size();
  }
  std::string text() const { return hex(a) + hex(b) + "-" + std::to_string(bytes); }
};

// Payload: one byte of ImageKind, then the image.
std::string encode_payload(const CompiledKernel& kernel) {
  return std::string(1, static_cast<char>(kernel.kind)) + kernel.image;
}

std::string path_for_key(const std::string& key, const std::string& directory) {
  return directory.empty() ? std::string() : directory + "/" + hex(fnv1a64(key)) + ".mbk";
}

std::optional<CompiledKernel> decode_payload(const std::string& payload) {
  if (payload.size() < 2) return std::nullopt;
  const auto kind = static_cast<ImageKind>(payload[0]);
  if (kind != ImageKind::Ptx && kind != ImageKind::Cubin) return std::nullopt;
  return CompiledKernel{kind, payload.substr(1), ""};
}

}  // namespace

EnvLookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

std::optional<std::string> resolve_cache_directory(const KernelCacheOptions& options,
                                                   const EnvLookup& env, std::string* why) {
  if (!options.directory.empty()) return options.directory;
  auto non_empty = [&env](const char* name) -> std::optional<std::string> {
    std::optional<std::string> value = env(name);
    if (value && value->empty()) return std::nullopt;
    return value;
  };
  // Set but empty, "0" or "off": no disk cache (unset falls through).
  if (std::optional<std::string> dir = env("MYBACKEND_CACHE_DIR")) {
    if (!dir->empty() && *dir != "0" && *dir != "off") return dir;
    if (why != nullptr) *why = "the disk cache is off (MYBACKEND_CACHE_DIR=\"" + *dir + "\")";
    return std::nullopt;
  }
  // The XDG spec says to ignore relative paths here.
  if (auto xdg = non_empty("XDG_CACHE_HOME"); xdg && xdg->front() == '/')
    return *xdg + "/mybackend";
  if (auto home = non_empty("HOME")) return *home + "/.cache/mybackend";
  if (why != nullptr) *why = "no cache directory: set MYBACKEND_CACHE_DIR, XDG_CACHE_HOME or HOME";
  return std::nullopt;
}

std::optional<std::string> open_entries_directory(const std::string& root, std::string* why) {
  // Entries live one level down, so that other caches can share the root.
  const std::string entries = root + "/kernels";
  if (!cache_file::ensure_private_directory(entries, why)) return std::nullopt;
  return entries;
}

KernelCache::KernelCache(KernelCacheOptions options, const EnvLookup& env)
    : options_(std::move(options)), nvrtc_version_(nvrtc_version()) {
  if (options_.mode != KernelCacheMode::MemoryAndDisk) return;
  std::string why;
  std::optional<std::string> root = resolve_cache_directory(options_, env, &why);
  std::optional<std::string> entries = root ? open_entries_directory(*root, &why) : std::nullopt;
  if (entries) {
    directory_ = *entries;
  } else {
    disk_problem_ = why;
  }
}

std::string KernelCache::key(const CompileRequest& request) const {
  SourceHasher hasher;
  hasher.add(request.source);
  for (const auto& header : request.headers) {
    hasher.add(header.name);
    hasher.add(header.text);
  }
  for (const auto& option : request.options.to_strings()) hasher.add(option);
  return "mybackend kernel v1\nsource=" + hasher.text() +
         "\ntarget=" + request.options.target.name() + "\nnvrtc=" + nvrtc_version_ +
         "\ndriver=" + options_.driver_version + "\n";
}

std::string KernelCache::entry_path(const CompileRequest& request) const {
  return path_for_key(key(request), directory_);
}

KernelCacheStats KernelCache::stats() const {
  return {memory_hits_.load(),  disk_hits_.load(),           compiles_.load(),
          disk_rejects_.load(), disk_write_failures_.load(), compile_us_.load(),
          batch_wall_us_.load()};
}

// Note [Compile-time counters]
// A cold compile's wall time in the executor is mostly NVRTC's batches.
// Whether a batch is long because of many kernels or a few slow ones decides
// what would shorten it: the summed compile time over the batch's wall time
// says how many threads were busy on average.
std::shared_ptr<const CompiledKernel> KernelCache::compile_counted(const CompileRequest& request) {
  ++compiles_;
  const auto start = std::chrono::steady_clock::now();
  auto kernel = std::make_shared<const CompiledKernel>(compile_cuda(request));
  const auto us = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                                 std::chrono::steady_clock::now() - start)
                                                 .count());
  compile_us_ += us;
  return kernel;
}

std::shared_ptr<const CompiledKernel> KernelCache::find_in_memory(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = memory_.find(key);
  return it == memory_.end() ? nullptr : it->second;
}

std::shared_ptr<const CompiledKernel> KernelCache::load_from_disk(const std::string& key,
                                                                  const std::string& directory) {
  if (directory.empty()) return nullptr;
  std::string why;
  std::optional<std::string> bytes =
      cache_file::read(path_for_key(key, directory), kMaxEntryBytes, &why);
  if (!bytes) {
    if (!why.empty()) ++disk_rejects_;  // present but unreadable; absent is a plain miss
    return nullptr;
  }
  std::optional<std::string> payload = cache_file::decode(*bytes, key, &why);
  std::optional<CompiledKernel> kernel = payload ? decode_payload(*payload) : std::nullopt;
  if (!kernel) {
    ++disk_rejects_;
    return nullptr;
  }
  return std::make_shared<const CompiledKernel>(std::move(*kernel));
}

void KernelCache::store_to_disk(const std::string& key, const CompiledKernel& kernel,
                                const std::string& directory) {
  if (directory.empty()) return;
  std::string why;
  // A failed write costs only a recompile next time: count it, carry on.
  if (!cache_file::write_atomically(path_for_key(key, directory),
                                    cache_file::encode(key, encode_payload(kernel)), &why)) {
    ++disk_write_failures_;
  }
}

std::shared_ptr<const CompiledKernel> KernelCache::get(const CompileRequest& request,
                                                       const std::string& entries_directory) {
  if (options_.mode == KernelCacheMode::Disabled) return compile_counted(request);
  const std::string k = key(request);
  if (auto hit = find_in_memory(k)) {
    ++memory_hits_;
    return hit;
  }
  std::shared_ptr<const CompiledKernel> kernel = load_from_disk(k, entries_directory);
  if (kernel) {
    ++disk_hits_;
  } else {
    kernel = compile_counted(request);
    store_to_disk(k, *kernel, entries_directory);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  // Another thread may have got there first; keep one copy.
  return memory_.emplace(k, kernel).first->second;
}

std::vector<CompileOutcome> KernelCache::get_all(const std::vector<CompileRequest>& requests,
                                                 const CompilePool& pool,
                                                 const std::string& entries_directory) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<CompileOutcome> outcomes(requests.size());
  // first[i]: the earliest request with request i's key.
  std::vector<std::size_t> first(requests.size());
  std::vector<std::size_t> unique;
  std::unordered_map<std::string, std::size_t> seen;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    auto [it, inserted] = seen.emplace(key(requests[i]), i);
    first[i] = it->second;
    if (inserted) unique.push_back(i);
  }
  pool.parallel_for(unique.size(), [&](std::size_t u) {
    const std::size_t i = unique[u];
    try {
      outcomes[i].kernel = get(requests[i], entries_directory);
    } catch (const std::exception& e) {
      outcomes[i].error = e.what();
    }
  });
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (first[i] == i) continue;
    outcomes[i] = outcomes[first[i]];
    if (outcomes[i].ok()) ++memory_hits_;
  }
  batch_wall_us_ +=
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                     std::chrono::steady_clock::now() - start)
                                     .count());
  return outcomes;
}

}  // namespace mybackend
