// A topological order of the contracted graph that can be edited in place:
// a linked list of clusters, each with a 64-bit label increasing along the
// list, so "is x before y" is one comparison. Moving a run of clusters next
// to another gives them labels inside the gap there; when a gap is used up,
// every label is spaced out again (rare: fresh gaps are ~2^63 / n wide).
#pragma once

#include <cstdint>
#include <vector>

namespace mybackend {

class DynamicOrder {
 public:
  // Clusters 0..n-1 in that order.
  explicit DynamicOrder(int n);

  std::uint64_t label(int x) const { return label_[x]; }
  bool before(int x, int y) const { return label_[x] < label_[y]; }

  // Moves `run` (distinct clusters, in the order wanted) to just before /
  // just after `anchor`, which must not be in it.
  void move_before(const std::vector<int>& run, int anchor);
  void move_after(const std::vector<int>& run, int anchor);
  // Takes x out of the order (a cluster merged into another).
  void remove(int x);

 private:
  static constexpr int kNone = -1;

  void unlink(int x);
  void link_after(int x, int prev);  // prev == kNone: at the front
  void place_between(const std::vector<int>& run, int prev, int next);
  void relabel_all();

  std::vector<std::uint64_t> label_;
  std::vector<int> prev_;
  std::vector<int> next_;
  int head_ = kNone;
  int size_ = 0;
};

}  // namespace mybackend
