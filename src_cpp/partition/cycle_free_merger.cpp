#include "partition/cycle_free_merger.h"

#include <algorithm>
#include <utility>

#include "common/error.h"

namespace mybackend {

CycleFreeMerger::CycleFreeMerger(const std::vector<std::vector<int>>& producers)
    : parent_(producers.size()),
      out_(producers.size()),
      in_(producers.size()),
      order_(static_cast<int>(producers.size())),  // node ids are a topological order
      mark_(producers.size(), 0) {
  std::vector<int> users(producers.size(), 0);
  for (const auto& list : producers) {
    for (int p : list) ++users[p];
  }
  for (int i = 0; i < static_cast<int>(producers.size()); ++i) {
    parent_[i] = i;
    out_[i].reserve(users[i]);
    in_[i].reserve(producers[i].size());
    for (int p : producers[i]) {
      out_[p].insert(i);
      in_[i].insert(p);
    }
  }
}

int CycleFreeMerger::cluster_of(int node) {
  while (parent_[node] != node) {
    parent_[node] = parent_[parent_[node]];  // path halving
    node = parent_[node];
  }
  return node;
}

bool CycleFreeMerger::try_merge(int x, int y) {
  int a = cluster_of(x);
  int b = cluster_of(y);
  if (a == b) return true;
  if (order_.before(b, a)) std::swap(a, b);
  // Only a path from the earlier cluster to the later one can exist. Most
  // refusals are a -> x -> b, which the search (depth first) may find late.
  if (has_two_step_path(a, b)) return false;
  const Search result = search_between(a, b);
  if (result == Search::kPathFound) return false;
  const int merged = contract(a, b);
  reorder(result, a, b, merged);
  return true;
}

bool CycleFreeMerger::has_two_step_path(int a, int b) const {
  const NodeSet& after_a = out_[a];
  const NodeSet& before_b = in_[b];
  // Scan the smaller side; the other answers in O(1) (or a short scan).
  const bool scan_after_a = after_a.size() <= before_b.size();
  const NodeSet& scanned = scan_after_a ? after_a : before_b;
  const NodeSet& probed = scan_after_a ? before_b : after_a;
  for (int x : scanned.items()) {
    if (x != a && x != b && probed.contains(x)) return true;
  }
  return false;
}

// Looks for a path a -> ... -> b other than a direct edge. The two searches
// take turns one edge at a time, so a cluster with thousands of edges (one
// that absorbed many nodes) costs no more than the other side's whole search.
CycleFreeMerger::Search CycleFreeMerger::search_between(int a, int b) {
  if (++epoch_ == (1u << 31)) {  // 2 * epoch_ would wrap: start the marks afresh
    std::fill(mark_.begin(), mark_.end(), 0u);
    epoch_ = 1;
  }
  forward_.clear();
  backward_.clear();
  forward_stack_.assign(1, {a, 0});
  backward_stack_.assign(1, {b, 0});
  for (bool forward_turn = true;; forward_turn = !forward_turn) {
    if (forward_stack_.empty()) return Search::kForwardDone;
    if (backward_stack_.empty()) return Search::kBackwardDone;
    const bool path = forward_turn ? step_forward(a, b) : step_backward(a, b);
    if (path) return Search::kPathFound;
  }
}

// Follows the next edge of the forward search's depth-first walk; true once
// a path to b is certain.
bool CycleFreeMerger::step_forward(int a, int b) {
  Frame& top = forward_stack_.back();
  const std::vector<int>& edges = out_[top.cluster].items();
  if (top.edge == edges.size()) {
    forward_stack_.pop_back();
    return false;
  }
  const int from = top.cluster;
  const int next = edges[top.edge++];
  if (next == b) return from != a;  // a's own edge to b is what the merge absorbs
  // Clusters after b cannot lead back to it.
  if (!order_.before(next, b)) return false;
  const unsigned seen = 2 * epoch_;
  if (mark_[next] == seen + 1) return true;  // the backward search came from b through it
  if (mark_[next] == seen) return false;
  mark_[next] = seen;
  forward_.push_back(next);
  forward_stack_.push_back({next, 0});
  return false;
}

bool CycleFreeMerger::step_backward(int a, int b) {
  Frame& top = backward_stack_.back();
  const std::vector<int>& edges = in_[top.cluster].items();
  if (top.edge == edges.size()) {
    backward_stack_.pop_back();
    return false;
  }
  const int from = top.cluster;
  const int prev = edges[top.edge++];
  if (prev == a) return from != b;
  if (!order_.before(a, prev)) return false;
  const unsigned seen = 2 * epoch_ + 1;
  if (mark_[prev] == seen - 1) return true;
  if (mark_[prev] == seen) return false;
  mark_[prev] = seen;
  backward_.push_back(prev);
  backward_stack_.push_back({prev, 0});
  return false;
}

// Folds one cluster into the other (the smaller adjacency into the larger,
// so each edge moves O(log n) times) and returns the survivor.
int CycleFreeMerger::contract(int a, int b) {
  int keep = a;
  int gone = b;
  if (out_[b].size() + in_[b].size() > out_[a].size() + in_[a].size()) std::swap(keep, gone);
  parent_[gone] = keep;
  NodeSet outs = std::move(out_[gone]);
  NodeSet ins = std::move(in_[gone]);
  out_[gone] = NodeSet();
  in_[gone] = NodeSet();
  for (int y : outs.items()) {
    in_[y].erase(gone);
    if (y == keep) continue;
    in_[y].insert(keep);
    out_[keep].insert(y);
  }
  for (int y : ins.items()) {
    out_[y].erase(gone);
    if (y == keep) continue;
    out_[y].insert(keep);
    in_[keep].insert(y);
  }
  return keep;
}

// Restores a topological order after merging a (earlier) and b (later), by
// moving only the side whose search finished, which holds every cluster
// that is out of place. With the forward side: the merged cluster takes b's
// place and the descendants of a found before b follow it; nothing else
// between a and b depends on them, or it would have been found too. The
// backward side is the mirror image.
void CycleFreeMerger::reorder(Search done, int a, int b, int merged) {
  const int gone = merged == a ? b : a;
  auto by_order = [this](int x, int y) { return order_.before(x, y); };
  std::vector<int>& run = done == Search::kForwardDone ? forward_ : backward_;
  std::sort(run.begin(), run.end(), by_order);
  if (done == Search::kForwardDone) {
    if (merged == a) run.insert(run.begin(), a);
    order_.move_after(run, b);
  } else {
    if (merged == b) run.push_back(b);
    order_.move_before(run, a);
  }
  order_.remove(gone);
}

}  // namespace mybackend
