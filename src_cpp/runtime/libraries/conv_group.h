// Conv groups at run time (CUDA engine II): one cuDNN frontend graph per
// group and call signature (libs/cudnn_conv.h, Note [Conv plan cache]), on
// the current stream.
//
// Note [Conv layout]
// cuDNN reads NCHW and NHWC (and their 3-d forms) by strides. Each call picks
// the memory format eager's cuDNN convolution would
// (cudnn_conv_suggest_memory_format: channels-last when the input or the
// weight is), makes input, weight, residual and gradients contiguous in it
// (no copy when they already are, as in a channels-last model), and
// allocates outputs in it, which is what the IR's strides (from eager's meta
// functions) promise. The format is chosen per call, not planned once per
// graph: a graph whose inputs arrive NCHW while its weights are
// channels-last converts the input at every convolution, as eager does.
//
// Note [Conv fallback]
// As for matmul groups (Note [Matmul fallback] in matmul_group.h): a call
// cuDNN has no plan for (unsupported shape, layout or dtype, an old cuDNN;
// remembered per signature in the plan cache), an empty tensor, a dtype or
// device the plan did not expect, or any cuDNN failure runs the group's
// nodes as ATen calls; problem() keeps the last reason and ExecutionStats
// counts conv_fallbacks. Never an error to the user (strict mode may raise,
// as for every engine group).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "runtime/libraries/library_group.h"
#include "spec/conv_spec.h"

namespace mybackend {

// Nothing touches the GPU here: plans are built on the first run of each
// signature.
RunnerResult make_conv_runner(const Graph& graph, std::shared_ptr<const ConvSpec> spec);

// The counters of the process's cuDNN convolution plan cache (hits, misses,
// entries, failures); all zero without cuDNN.
std::vector<std::pair<std::string, std::uint64_t>> conv_plan_cache_counters();

}  // namespace mybackend
