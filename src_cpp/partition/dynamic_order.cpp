#include "partition/dynamic_order.h"

#include "common/error.h"

namespace mybackend {
namespace {

// relabel_all() spreads the labels over [kLow, kHigh]; the room below and
// above is the gap before the first and after the last cluster.
constexpr std::uint64_t kLow = std::uint64_t{1} << 32;
constexpr std::uint64_t kHigh = std::uint64_t{1} << 62;

}  // namespace

DynamicOrder::DynamicOrder(int n)
    : label_(n), prev_(n), next_(n), head_(n > 0 ? 0 : kNone), size_(n) {
  for (int i = 0; i < n; ++i) {
    prev_[i] = i - 1;
    next_[i] = i + 1 < n ? i + 1 : kNone;
  }
  relabel_all();
}

void DynamicOrder::unlink(int x) {
  if (prev_[x] != kNone) {
    next_[prev_[x]] = next_[x];
  } else {
    head_ = next_[x];
  }
  if (next_[x] != kNone) prev_[next_[x]] = prev_[x];
  prev_[x] = next_[x] = kNone;
}

void DynamicOrder::link_after(int x, int prev) {
  const int next = prev == kNone ? head_ : next_[prev];
  prev_[x] = prev;
  next_[x] = next;
  if (prev != kNone) {
    next_[prev] = x;
  } else {
    head_ = x;
  }
  if (next != kNone) prev_[next] = x;
}

void DynamicOrder::remove(int x) {
  unlink(x);
  --size_;
}

void DynamicOrder::move_before(const std::vector<int>& run, int anchor) {
  if (run.empty()) return;
  for (int x : run) unlink(x);
  place_between(run, prev_[anchor], anchor);
}

void DynamicOrder::move_after(const std::vector<int>& run, int anchor) {
  if (run.empty()) return;
  for (int x : run) unlink(x);
  place_between(run, anchor, next_[anchor]);
}

// Links `run` between two adjacent clusters (kNone: an end of the list) and
// labels it evenly inside their gap.
void DynamicOrder::place_between(const std::vector<int>& run, int prev, int next) {
  int at = prev;
  for (int x : run) {
    link_after(x, at);
    at = x;
  }
  const std::uint64_t lo = prev == kNone ? 0 : label_[prev];
  const std::uint64_t hi = next == kNone ? kHigh + kLow : label_[next];
  const std::uint64_t step = (hi - lo) / (run.size() + 1);
  if (step == 0) {
    relabel_all();
    return;
  }
  std::uint64_t value = lo;
  for (int x : run) label_[x] = value += step;
}

void DynamicOrder::relabel_all() {
  const std::uint64_t step = (kHigh - kLow) / static_cast<std::uint64_t>(size_ + 1);
  MB_ASSERT(step > 0, "dynamic order: too many clusters to label");
  std::uint64_t value = kLow;
  for (int x = head_; x != kNone; x = next_[x]) label_[x] = value += step;
}

}  // namespace mybackend
