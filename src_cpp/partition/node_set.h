// A set of small non-negative ints (cluster ids) for the adjacency lists of
// the contracted graph. Most clusters have a handful of neighbours, so the
// set is a plain vector scanned linearly; a cluster that has absorbed many
// nodes can have thousands, and then an open-addressing index keeps insert,
// erase and lookup O(1) without a heap allocation per element. Iteration
// order depends only on the sequence of operations, which keeps the
// partitioner deterministic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mybackend {

class NodeSet {
 public:
  const std::vector<int>& items() const { return items_; }
  std::size_t size() const { return items_.size(); }
  void reserve(std::size_t n) { items_.reserve(n); }

  bool contains(int x) const { return position(x) >= 0; }

  void insert(int x) {
    if (contains(x)) return;
    items_.push_back(x);
    if (!slots_.empty()) {
      if (2 * items_.size() > slots_.size()) {
        rebuild_index();
      } else {
        claim_slot(x, static_cast<int>(items_.size()) - 1);
      }
    } else if (items_.size() > kLinearLimit) {
      rebuild_index();
    }
  }

  void erase(int x) {
    const int pos = position(x);
    if (pos < 0) return;
    // Swap-with-last: O(1), and still deterministic.
    const int last = items_.back();
    if (!slots_.empty()) {
      release_slot(slot_of(x));
      if (last != x) slots_[slot_of(last)] = pos + 1;
    }
    items_[pos] = last;
    items_.pop_back();
  }

 private:
  static constexpr std::size_t kLinearLimit = 16;

  int position(int x) const {
    if (!slots_.empty()) {
      const int s = slot_of(x);
      return s < 0 ? -1 : slots_[s] - 1;
    }
    for (std::size_t i = 0; i < items_.size(); ++i) {
      if (items_[i] == x) return static_cast<int>(i);
    }
    return -1;
  }

  // ---- the index: linear probing over slots holding position + 1 (0: empty)

  std::size_t home(int x) const {
    return static_cast<std::size_t>((static_cast<std::uint64_t>(x) * 0x9E3779B97F4A7C15ull) >>
                                    shift_);
  }
  std::size_t mask() const { return slots_.size() - 1; }

  int slot_of(int x) const {
    for (std::size_t s = home(x);; s = (s + 1) & mask()) {
      if (slots_[s] == 0) return -1;
      if (items_[slots_[s] - 1] == x) return static_cast<int>(s);
    }
  }

  void claim_slot(int x, int pos) {
    std::size_t s = home(x);
    while (slots_[s] != 0) s = (s + 1) & mask();
    slots_[s] = pos + 1;
  }

  // Empties slot `hole` and shifts later entries of the probe run back, so
  // lookups never need tombstones.
  void release_slot(int hole) {
    std::size_t i = static_cast<std::size_t>(hole);
    for (std::size_t j = (i + 1) & mask(); slots_[j] != 0; j = (j + 1) & mask()) {
      const std::size_t k = home(items_[slots_[j] - 1]);
      // Entry j may fill the hole only if its home is not in (i, j] cyclically.
      const bool home_between = i <= j ? (i < k && k <= j) : (i < k || k <= j);
      if (home_between) continue;
      slots_[i] = slots_[j];
      i = j;
    }
    slots_[i] = 0;
  }

  void rebuild_index() {
    std::size_t capacity = 64;
    int bits = 6;
    while (capacity < 4 * items_.size()) {
      capacity *= 2;
      ++bits;
    }
    shift_ = 64 - bits;
    slots_.assign(capacity, 0);
    for (std::size_t i = 0; i < items_.size(); ++i) claim_slot(items_[i], static_cast<int>(i));
  }

  std::vector<int> items_;
  std::vector<int> slots_;  // empty while the set is small
  int shift_ = 64;
};

}  // namespace mybackend
