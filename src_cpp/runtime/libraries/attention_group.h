// Attention groups at run time (CUDA engine II): one cuDNN SDPA graph per
// group (libs/cudnn_sdpa.h), forward or backward, on the current stream.
//
// Note [Attention fallback]
// Same policy as matmul groups (Note [Matmul fallback]): a call cuDNN cannot
// take as it is (a head dim without unit stride, a misaligned pointer, a
// signature cuDNN's support check refuses, which the plan cache remembers)
// or where a cuDNN call fails runs the group's nodes as ATen calls: the
// flash or memory-efficient kernel the aten op is, or the decomposed
// pattern's bmm/softmax chain. problem() keeps the last reason,
// ExecutionStats counts attention_fallbacks, and nothing is written to the
// group's outputs before cuDNN has run, so the ATen form starts clean. What
// the forward hands the backward has the aten op's meaning either way (Note
// [Forward and backward agree] in fusion/attention_planner.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "runtime/libraries/library_group.h"
#include "spec/attention_spec.h"

namespace mybackend {

// Nothing touches the GPU here: cuDNN's handle and graph come on the first run.
RunnerResult make_attention_runner(const Graph& graph, std::shared_ptr<const AttentionSpec> spec);

// The counters of the cuDNN SDPA plan cache (hits, misses, entries,
// unsupported); all zero without cuDNN.
std::vector<std::pair<std::string, std::uint64_t>> attention_plan_cache_counters();

}  // namespace mybackend
