#include "runtime/host_times.h"

#include <algorithm>

namespace mybackend {

std::size_t HostTimes::slot(const std::string& label) {
  for (std::size_t k = 0; k < slots_.size(); ++k)
    if (slots_[k]->label == label) return k;
  slots_.push_back(std::make_unique<Slot>());
  slots_.back()->label = label;
  return slots_.size() - 1;
}

void HostTimes::record(std::size_t slot, std::chrono::steady_clock::duration elapsed) const {
  const Slot& s = *slots_[slot];
  s.calls.fetch_add(1, std::memory_order_relaxed);
  s.nanoseconds.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count(),
                          std::memory_order_relaxed);
}

std::vector<HostTimeRow> HostTimes::rows() const {
  std::vector<HostTimeRow> out;
  for (const auto& s : slots_) {
    const std::int64_t calls = s->calls.load(std::memory_order_relaxed);
    if (calls == 0) continue;
    out.push_back(HostTimeRow{s->label, calls, s->nanoseconds.load(std::memory_order_relaxed)});
  }
  std::stable_sort(out.begin(), out.end(), [](const HostTimeRow& a, const HostTimeRow& b) {
    auto rank = [](const HostTimeRow& row) {
      return row.label == kBoundaryLabel ? 0 : row.label == kRunLabel ? 1 : 2;
    };
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    return a.nanoseconds > b.nanoseconds;
  });
  return out;
}

}  // namespace mybackend
