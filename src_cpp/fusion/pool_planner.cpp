#include "fusion/pool_planner.h"

#include <set>

#include "fusion/ir_match.h"
#include "fusion/pointwise_planner.h"
#include "fusion/prologue.h"

namespace mybackend {
namespace {

using ir_match::int_list_arg;
using ir_match::same_dim;
using ir_match::same_strides;
using ir_match::tensor_arg;

constexpr const char* kMaxPool2d = "aten::max_pool2d_with_indices.default";
constexpr const char* kMaxPool2dBackward = "aten::max_pool2d_with_indices_backward.default";

// The channels-last dim order of a 4-D tensor, outermost first.
const std::vector<int> kChannelsLastOrder = {0, 2, 3, 1};

bool symbolic(const TensorType& t) {
  for (const Dim& d : t.sizes)
    if (!d.is_static()) return true;
  for (const Dim& d : t.strides)
    if (!d.is_static()) return true;
  return false;
}

// Dense in `layout` as far as the IR tells; with symbolic sizes a guess
// (channels-last: unit channel stride), which the runtime checks.
bool dense_as(const TensorType& t, PoolLayout layout) {
  if (t.rank() != 4) return false;
  if (layout == PoolLayout::Contiguous) return likely_contiguous(t);
  if (dense_in_order(t, kChannelsLastOrder)) return true;
  return symbolic(t) && t.strides[1].is_static() && t.strides[1].static_value() == 1;
}

// [h, w] from an int[2] argument that may hold one value for both.
std::optional<std::array<std::int64_t, 2>> pair_arg(const Node& node, std::size_t index) {
  const auto list = int_list_arg(node, index);
  if (!list || list->empty() || list->size() > 2) return std::nullopt;
  return std::array<std::int64_t, 2>{list->front(), list->back()};
}

// The pool node's tensors and window, read from its arguments: forward
// (self, kernel_size, stride=[], padding=0, dilation=1, ceil_mode=False),
// backward (grad_output, self, kernel_size, stride, padding, dilation,
// ceil_mode, indices). ceil_mode only decides the output size, which the IR
// carries.
struct PoolNode {
  bool backward = false;
  ValueId input = -1;     // self: the window space
  ValueId output = -1;    // the pooled values; backward: self's gradient
  ValueId indices = -1;   // an output; backward: an input
  ValueId gradient = -1;  // backward: the gradient at the pooled values
  std::array<std::int64_t, 2> kernel{}, stride{}, padding{}, dilation{};
};

bool tensor_of_rank_4(const Graph& graph, ValueId v) {
  return v >= 0 && graph.value(v).kind == ValueKind::Tensor && graph.value(v).tensor.rank() == 4;
}

std::string parse_max_pool(const Graph& graph, const Node& node, PoolNode* out) {
  if (node.kind != NodeKind::Aten || (node.op != kMaxPool2d && node.op != kMaxPool2dBackward))
    return "not a 2-d max pool or its backward";
  PoolNode pool;
  pool.backward = node.op == kMaxPool2dBackward;
  const std::size_t window = pool.backward ? 2 : 1;  // the kernel_size argument
  if (pool.backward) {
    if (node.outputs.size() != 1) return "expected one output (the input's gradient)";
    pool.gradient = tensor_arg(graph, node, 0);
    pool.input = tensor_arg(graph, node, 1);
    pool.indices = tensor_arg(graph, node, 7);
    pool.output = node.outputs[0];
  } else {
    if (node.outputs.size() != 2) return "expected values and indices outputs";
    pool.input = tensor_arg(graph, node, 0);
    pool.output = node.outputs[0];
    pool.indices = node.outputs[1];
  }
  if (pool.input < 0) return "the input is not a tensor";
  const TensorType& in = graph.value(pool.input).tensor;
  if (in.rank() == 3) return "a 3-d (unbatched) input stays an ATen call";
  if (in.rank() != 4) return "the input is not 4-d";
  for (ValueId v : {pool.output, pool.indices}) {
    if (!tensor_of_rank_4(graph, v)) return "the outputs (or the indices) are not 4-d tensors";
  }
  if (pool.backward && !tensor_of_rank_4(graph, pool.gradient))
    return "the gradient is not a 4-d tensor";
  const TensorType& result = graph.value(pool.output).tensor;
  if (in.device.type != DeviceType::CUDA || result.device != in.device)
    return "not on one CUDA device";
  if (!is_floating(in.dtype) || !codegen_supports_dtype(in.dtype) || result.dtype != in.dtype)
    return "dtype " + std::string(dtype_short_name(in.dtype)) +
           " is not a floating dtype codegen "
           "handles";
  if (pool.backward) {
    const TensorType& gradient = graph.value(pool.gradient).tensor;
    const TensorType& indices = graph.value(pool.indices).tensor;
    if (gradient.dtype != in.dtype || gradient.device != in.device)
      return "the gradient's dtype or device differs from the input's";
    if (indices.dtype != DType::Int64 || indices.device != in.device)
      return "the indices are not int64 on the input's device";
    if (shape_key(indices) != shape_key(gradient))
      return "the indices' shape differs from the gradient's";
  }
  const auto kernel = pair_arg(node, window);
  const auto padding = pair_arg(node, window + 2);
  const auto dilation = pair_arg(node, window + 3);
  const auto stride_list = int_list_arg(node, window + 1);
  if (!kernel || !padding || !dilation || !stride_list || stride_list->size() > 2)
    return "kernel size, stride, padding or dilation is not known at compile time";
  pool.kernel = *kernel;
  pool.padding = *padding;
  pool.dilation = *dilation;
  // An empty stride means the kernel size, as in eager.
  pool.stride = stride_list->empty() ? *kernel : *pair_arg(node, window + 1);
  for (int d = 0; d < 2; ++d) {
    if (pool.kernel[d] < 1 || pool.stride[d] < 1 || pool.dilation[d] < 1 || pool.padding[d] < 0)
      return "a non-positive kernel size, stride or dilation, or a negative padding: ATen "
             "raises eager's error";
    if (pool.padding[d] > ((pool.kernel[d] - 1) * pool.dilation[d] + 1) / 2)
      return "padding above half the dilated kernel: ATen raises eager's error";
  }
  *out = pool;
  return {};
}

// Per-channel values of the window space [N, C, H, W]: element c at ptr[c].
bool per_channel(const TensorType& t, const TensorType& space) {
  const int rank = static_cast<int>(t.rank());
  if (rank < 3 || rank > 4) return false;  // [C, 1, 1] or [1, C, 1, 1]
  for (int d = 0; d < rank; ++d) {
    const int space_dim = d + 4 - rank;
    const Dim& size = t.sizes[static_cast<std::size_t>(d)];
    if (space_dim == 1) {
      if (!same_dim(size, space.sizes[1])) return false;
      const Dim& stride = t.strides[static_cast<std::size_t>(d)];
      if (!(stride.is_static() && stride.static_value() == 1) &&
          !(size.is_static() && size.static_value() == 1))
        return false;
    } else if (!size.is_static() || size.static_value() != 1) {
      return false;
    }
  }
  return true;
}

PoolRead read_of(const TensorType& t, const TensorType& space, PoolLayout layout) {
  if (shape_key(t) == shape_key(space) && dense_as(t, layout)) return PoolRead::Window;
  if (per_channel(t, space)) return PoolRead::Channel;
  return PoolRead::Strided;
}

// The most channels one thread reads in NHWC: 16 bytes of the pool's dtype,
// fewer when a static channel count is not a multiple.
int channel_vector(const TensorType& space) {
  int vector = std::min(8, 16 / dtype_size_bytes(space.dtype));
  const Dim& channels = space.sizes[1];
  while (vector > 1 && channels.is_static() && channels.static_value() % vector != 0) vector /= 2;
  return vector;
}

std::shared_ptr<const PoolGroup> build_pool_group(const GraphIndex& index, const PoolNode& pool,
                                                  const std::vector<NodeId>& prologue,
                                                  std::string* why) {
  const Graph& graph = index.graph;
  const TensorType& space = graph.value(pool.input).tensor;
  const TensorType& result = graph.value(pool.output).tensor;
  const TensorType& indices = graph.value(pool.indices).tensor;
  // Eager pools in its input's suggested memory format; so do we. The
  // backward writes the gradient as the IR lays it out (eager's choice).
  std::optional<PoolLayout> layout;
  for (const TensorType* t : {pool.backward ? &result : &space, &result}) {
    for (PoolLayout candidate : {PoolLayout::Contiguous, PoolLayout::ChannelsLast}) {
      if (!layout && dense_as(*t, candidate)) layout = candidate;
    }
  }
  if (!layout || !dense_as(result, *layout)) {
    *why = "the output is not dense in the input's layout (NCHW or NHWC)";
    return nullptr;
  }
  if (pool.backward ? !dense_as(indices, *layout) : !same_strides(result, indices)) {
    *why = pool.backward ? "the indices are not dense in the gradient's layout"
                         : "the indices' strides differ from the values'";
    return nullptr;
  }
  // The prologue's value: what is pooled, or the gradient at the pooled
  // values, over its own space.
  const ValueId anchor = pool.backward ? pool.gradient : pool.input;
  const TensorType& anchor_space = graph.value(anchor).tensor;

  auto group = std::make_shared<PoolGroup>();
  group->pooled = pool.input;
  group->output = pool.output;
  group->indices = pool.indices;
  group->kernel = pool.kernel;
  group->stride = pool.stride;
  group->padding = pool.padding;
  group->dilation = pool.dilation;

  PoolSpec spec;
  spec.dtype = space.dtype;
  spec.layout = *layout;
  spec.backward = pool.backward;
  std::set<NodeId> members(prologue.begin(), prologue.end());
  members.insert(graph.value(pool.output).producer);
  spec.store_indices = !pool.backward && index.used_outside(pool.indices, members);
  if (prologue.empty()) {
    group->inputs = {anchor};
  } else {
    PointwiseSpec built;
    if (std::string p =
            prologue_spec(graph, prologue, anchor, anchor_space.dtype, &built, &group->inputs);
        !p.empty()) {
      *why = p;
      return nullptr;
    }
    spec.prologue = std::move(built);
  }
  for (ValueId v : group->inputs)
    spec.reads.push_back(read_of(graph.value(v).tensor, anchor_space, *layout));
  spec.vector = *layout == PoolLayout::ChannelsLast ? channel_vector(space) : 1;
  spec.index64 = false;
  spec.threads = 256;
  PoolSpec general = spec;
  general.vector = 1;
  general.index64 = true;
  if (std::string p = validate_variants(spec, general); !p.empty()) {
    *why = p;
    return nullptr;
  }
  group->spec = std::move(spec);
  group->general = std::move(general);
  return group;
}

}  // namespace

std::string pool_candidate_problem(const Graph& graph, const Node& node) {
  PoolNode pool;
  return parse_max_pool(graph, node, &pool);
}

void claim_pool_groups(const GraphIndex& index, const std::vector<NodeId>& partition_nodes,
                       ClaimedGroups& claimed) {
  const Graph& graph = index.graph;
  const std::set<NodeId> partition(partition_nodes.begin(), partition_nodes.end());
  auto available = [&](NodeId n) { return partition.count(n) && !claimed.claimed(n); };
  for (NodeId n : partition_nodes) {
    const Node& node = graph.node(n);
    if (node.kind != NodeKind::Aten || (node.op != kMaxPool2d && node.op != kMaxPool2dBackward) ||
        !available(n))
      continue;
    PoolNode pool;
    if (std::string problem = parse_max_pool(graph, node, &pool); !problem.empty()) {
      claimed.refuse(n, problem);
      continue;
    }
    if (!index.graph_output[static_cast<std::size_t>(pool.output)] &&
        index.readers[static_cast<std::size_t>(pool.output)].empty()) {
      claimed.refuse(
          n, pool.backward ? "the gradient is never read" : "the pooled values are never read");
      continue;
    }
    std::set<NodeId> members = {n};
    const std::vector<NodeId> prologue =
        elementwise_prologue(index, pool.backward ? pool.gradient : pool.input, available, members);
    std::string why;
    std::shared_ptr<const PoolGroup> built = build_pool_group(index, pool, prologue, &why);
    if (!built) {
      claimed.refuse(n, why);
      continue;
    }
    KernelGroup group;
    group.nodes.assign(members.begin(), members.end());
    group.spec = built->spec.to_string();
    group.why = std::string(pool.backward ? "max_pool2d_backward (" : "max_pool2d (") +
                std::string(pool_layout_name(built->spec.layout)) + ") with " +
                std::to_string(prologue.size()) +
                " prologue elementwise ops as one generated kernel" +
                (pool.backward               ? "; a gather over the windows, no atomics"
                 : built->spec.store_indices ? "; indices stored"
                                             : "; indices not stored (nothing reads them)");
    group.set(std::move(built));
    claimed.claim(std::move(group));
  }
}

}  // namespace mybackend
