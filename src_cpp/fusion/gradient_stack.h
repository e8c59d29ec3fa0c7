// Note [Gradients written stacked] (attention_spec.h): finding the one
// concatenation an SDPA backward's three gradients feed, through views.
#pragma once

#include <functional>
#include <set>

#include "fusion/graph_index.h"
#include "spec/attention_spec.h"

namespace mybackend {

// The stack of `spec`'s gradients when dq, dk and dv are each read only by
// a chain of views (permute, unsqueeze, transpose.int) ending in one
// aten::cat of exactly those three parts; every node on the way accepted by
// `usable` and no value on the way returned by the graph. Adds the views and
// the cat to `members`; returns a stack with value -1 (and leaves `members`
// alone) otherwise.
GradientStack plan_gradient_stack(const GraphIndex& index, const AttentionSpec& spec,
                                  const std::function<bool(NodeId)>& usable,
                                  std::set<NodeId>& members);

}  // namespace mybackend
