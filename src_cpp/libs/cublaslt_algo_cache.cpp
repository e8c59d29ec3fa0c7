#include "libs/cublaslt_algo_cache.h"

#include <cstdint>
#include <mutex>

namespace mybackend::cublaslt {
namespace {

void append(std::string& key, std::int64_t value) {
  key += std::to_string(value);
  key += ',';
}

void append(std::string& key, const Operand& m) {
  append(key, static_cast<std::int64_t>(m.type));
  append(key, static_cast<std::int64_t>(m.op));
  append(key, static_cast<std::int64_t>(m.rows));
  append(key, static_cast<std::int64_t>(m.cols));
  append(key, m.ld);
  append(key, m.batch_stride);
  append(key, static_cast<std::int64_t>(m.alignment));
  key += '|';
}

}  // namespace

std::string Signature::key() const {
  std::string out;
  out.reserve(160);
  append(out, device);
  append(out, batch);
  append(out, static_cast<std::int64_t>(compute));
  append(out, static_cast<std::int64_t>(scale));
  append(out, static_cast<std::int64_t>(epilogue));
  append(out, static_cast<std::int64_t>(bias_alignment));
  append(out, c_is_d ? 1 : 0);
  for (const Operand* m : {&a, &b, &c, &d}) append(out, *m);
  return out;
}

std::optional<std::optional<AlgoChoice>> AlgoCache::find(const std::string& key) const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  hits_.fetch_add(1, std::memory_order_relaxed);
  return it->second;
}

void AlgoCache::insert(const std::string& key, std::optional<AlgoChoice> choice) {
  std::unique_lock<std::shared_mutex> lock(mutex_);
  entries_.emplace(key, choice);  // a racing thread's equal answer may already be there
}

AlgoCacheStats AlgoCache::stats() const {
  AlgoCacheStats out;
  out.hits = hits_.load();
  out.misses = misses_.load();
  out.timed = timed_.load();
  out.reused = reused_.load();
  std::shared_lock<std::shared_mutex> lock(mutex_);
  out.entries = entries_.size();
  return out;
}

void AlgoCache::record_timed(TimedChoiceRecord record) {
  std::unique_lock<std::shared_mutex> lock(mutex_);
  if (timed_choices_.size() == kKeptTimedChoices) timed_choices_.erase(timed_choices_.begin());
  timed_choices_.push_back(std::move(record));
}

std::vector<TimedChoiceRecord> AlgoCache::timed_choices() const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  return timed_choices_;
}

AlgoCache& algo_cache() {
  static AlgoCache cache;
  return cache;
}

std::uint32_t pointer_alignment(const void* address) {
  const auto bits = reinterpret_cast<std::uintptr_t>(address);
  std::uint32_t alignment = 1;
  while (alignment < 256 && bits % (alignment * 2) == 0) alignment *= 2;
  return alignment;
}

}  // namespace mybackend::cublaslt
