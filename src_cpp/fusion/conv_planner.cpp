#include "fusion/conv_planner.h"

#include <memory>
#include <optional>
#include <set>

#include "fusion/ir_match.h"

namespace mybackend {
namespace {

using ir_match::int_arg;
using ir_match::int_list_arg;
using ir_match::same_dim;
using ir_match::same_shape;
using ir_match::scalar;
using ir_match::tensor_arg;

constexpr const char* kConvolution = "aten::convolution.default";
constexpr const char* kConvolutionBackward = "aten::convolution_backward.default";
constexpr const char* kBatchNormInference = "aten::_native_batch_norm_legit_no_training.default";

bool conv_dtype(DType dtype) {
  return dtype == DType::Float16 || dtype == DType::BFloat16 || dtype == DType::Float32;
}

// Argument positions of the two schemas: convolution(input, weight, bias,
// stride, padding, dilation, transposed, output_padding, groups) and
// convolution_backward(grad_output, input, weight, bias_sizes, stride,
// padding, dilation, transposed, output_padding, groups, output_mask).
struct Layout {
  std::size_t input, weight, stride, transposed, groups;
};

Layout layout_of(const Node& node) {
  if (node.op == kConvolutionBackward) return {1, 2, 4, 7, 9};
  return {0, 1, 3, 6, 8};
}

std::optional<std::vector<bool>> bool_list_arg(const Node& node, std::size_t index) {
  if (index >= node.args.size() || node.args[index].kind != Argument::Kind::List)
    return std::nullopt;
  std::vector<bool> out;
  for (const Argument& item : node.args[index].items) {
    if (item.kind != Argument::Kind::Bool) return std::nullopt;
    out.push_back(item.b);
  }
  return out;
}

// `other` broadcasts against `out` (N, C, spatial...) as one value per channel.
bool per_channel(const TensorType& other, const TensorType& out) {
  const std::int64_t rank = out.rank(), r = other.rank();
  if (r < rank - 1 || r > rank) return false;
  for (std::int64_t d = 0; d < r; ++d) {
    const std::int64_t aligned = d + (rank - r);  // the output dim this one broadcasts against
    const Dim& size = other.sizes[static_cast<std::size_t>(d)];
    if (aligned == 1 ? !same_dim(size, out.sizes[1]) : !same_dim(size, Dim(1))) return false;
  }
  return true;
}

}  // namespace

std::string conv_candidate_problem(const Graph& graph, const Node& node) {
  if (node.kind != NodeKind::Aten || (node.op != kConvolution && node.op != kConvolutionBackward))
    return "not a convolution";
  const Layout at = layout_of(node);
  const ValueId input = tensor_arg(graph, node, at.input);
  const ValueId weight = tensor_arg(graph, node, at.weight);
  if (input < 0 || weight < 0) return "input or weight is not a tensor";
  const TensorType& x = graph.value(input).tensor;
  const TensorType& w = graph.value(weight).tensor;
  if (x.device.type != DeviceType::CUDA) return "not on a CUDA device";
  if (x.device != w.device) return "input and weight on different devices";
  if (!conv_dtype(x.dtype))
    return "dtype " + std::string(dtype_name(x.dtype)) + " (cuDNN graphs here take f16, bf16, f32)";
  if (w.dtype != x.dtype) return "input and weight of different dtypes";
  if (x.rank() != 4 && x.rank() != 5)
    return "a " + std::to_string(x.rank() - 2) +
           "-d convolution (cuDNN graphs here are 2-d or 3-d)";
  if (w.rank() != x.rank()) return "weight of another rank than the input";
  if (node.args.size() <= at.groups || node.args[at.transposed].kind != Argument::Kind::Bool)
    return "unexpected arguments";
  if (node.args[at.transposed].b) return "a transposed convolution";
  const std::size_t spatial = static_cast<std::size_t>(x.rank() - 2);
  for (std::size_t k = 0; k < 3; ++k) {
    const auto list = int_list_arg(node, at.stride + k);
    if (!list || list->size() != spatial)
      return "stride, padding or dilation is not a list of numbers known at compile time";
  }
  if (!int_arg(node, at.groups)) return "groups is not known at compile time";
  for (ValueId out : node.outputs) {
    const Value& v = graph.value(out);
    if (v.kind == ValueKind::Tensor && v.tensor.dtype != x.dtype)
      return "an output of another dtype than the input";
  }
  if (node.op == kConvolution) {
    const ValueId bias = tensor_arg(graph, node, 2);
    if (node.args[2].kind != Argument::Kind::None &&
        (bias < 0 || graph.value(bias).tensor.dtype != x.dtype ||
         graph.value(bias).tensor.rank() != 1))
      return "a bias that is not a 1-d tensor of the input's dtype";
  } else {
    const auto mask = bool_list_arg(node, 10);
    if (!mask || mask->size() != 3 || node.outputs.size() != 3)
      return "output_mask is not three booleans known at compile time";
    if (tensor_arg(graph, node, 0) < 0 ||
        graph.value(tensor_arg(graph, node, 0)).tensor.dtype != x.dtype)
      return "grad_output is not a tensor of the input's dtype";
  }
  return {};
}

struct ConvPlanner::Context {
  std::set<NodeId> partition;
  const ClaimedGroups* claimed = nullptr;
  std::set<NodeId> members;  // of the group being built
  std::vector<std::string> notes;
  bool usable(NodeId n) const {
    return partition.count(n) && !claimed->claimed(n) && !members.count(n);
  }
};

ConvPlanner::ConvPlanner(const GraphIndex& index) : index_(index), graph_(index.graph) {}

// Bias, batch norm, residual, relu, in that order (Note [Conv groups]).
void ConvPlanner::match_epilogue(ConvSpec& spec, Context& ctx) const {
  const TensorType out_type = graph_.value(spec.output).tensor;
  while (true) {
    const ValueId current = spec.output;
    const auto& readers = index_.readers[static_cast<std::size_t>(current)];
    if (index_.graph_output[static_cast<std::size_t>(current)] || readers.size() != 1 ||
        !ctx.usable(readers[0]))
      return;
    const Node& user = graph_.node(readers[0]);
    if (user.kind != NodeKind::Aten || user.outputs.empty()) return;
    const TensorType& result = graph_.value(user.outputs[0]).tensor;
    if (graph_.value(user.outputs[0]).kind != ValueKind::Tensor || result.dtype != spec.dtype ||
        !same_shape(result, out_type))
      return;
    auto take = [&] {
      ctx.members.insert(user.id);
      spec.output = user.outputs[0];
    };
    if (user.op == "aten::add.Tensor" && user.outputs.size() == 1) {
      const ValueId a = tensor_arg(graph_, user, 0), b = tensor_arg(graph_, user, 1);
      const ValueId other = a == current ? b : a;
      const auto alpha = user.args.size() > 2 ? scalar(user.args[2]) : std::optional<double>(1.0);
      if (other < 0 || other == current || alpha != 1.0) return;
      const TensorType& t = graph_.value(other).tensor;
      if (t.dtype != spec.dtype || t.device != out_type.device) {
        ctx.notes.push_back(user.name + " not fused: its other operand has another dtype/device");
        return;
      }
      if (same_shape(t, out_type) && spec.residual < 0 && !spec.relu) {
        spec.residual = other;
        take();
        continue;
      }
      if (per_channel(t, out_type) && spec.bias < 0 && !spec.batch_norm && spec.residual < 0 &&
          !spec.relu) {
        spec.bias = other;
        take();
        continue;
      }
      ctx.notes.push_back(user.name +
                          " not fused: adds a tensor that is neither per-channel nor of the "
                          "output's shape, or comes after the epilogue's place for it");
      return;
    }
    if (user.op == kBatchNormInference && user.outputs.size() == 3 && !spec.batch_norm &&
        spec.residual < 0 && !spec.relu && tensor_arg(graph_, user, 0) == current) {
      for (std::size_t k = 1; k < 3; ++k) {
        const ValueId stat = user.outputs[k];
        if (!index_.readers[static_cast<std::size_t>(stat)].empty() ||
            index_.graph_output[static_cast<std::size_t>(stat)])
          return;
      }
      const auto eps = user.args.size() > 6 ? scalar(user.args[6]) : std::nullopt;
      const ValueId mean = tensor_arg(graph_, user, 3), var = tensor_arg(graph_, user, 4);
      if (!eps || mean < 0 || var < 0) return;
      spec.batch_norm = true;
      spec.bn.weight = tensor_arg(graph_, user, 1);
      spec.bn.bias = tensor_arg(graph_, user, 2);
      spec.bn.mean = mean;
      spec.bn.var = var;
      spec.bn.eps = *eps;
      take();
      continue;
    }
    if (user.op == "aten::relu.default" && user.outputs.size() == 1) {
      spec.relu = true;
      take();
    }
    return;
  }
}

void ConvPlanner::claim(const std::vector<NodeId>& partition_nodes, ClaimedGroups& claimed) const {
  Context ctx;
  ctx.partition.insert(partition_nodes.begin(), partition_nodes.end());
  ctx.claimed = &claimed;
  for (NodeId n : partition_nodes) {
    const Node& node = graph_.node(n);
    if (node.kind != NodeKind::Aten || claimed.claimed(n) ||
        (node.op != kConvolution && node.op != kConvolutionBackward))
      continue;
    if (std::string problem = conv_candidate_problem(graph_, node); !problem.empty()) {
      claimed.refuse(n, "no cuDNN group: " + problem);
      continue;
    }
    ctx.members = {n};
    ctx.notes.clear();
    const Layout at = layout_of(node);
    auto spec = std::make_shared<ConvSpec>();
    spec->conv = n;
    spec->input = tensor_arg(graph_, node, at.input);
    spec->weight = tensor_arg(graph_, node, at.weight);
    const TensorType& x = graph_.value(spec->input).tensor;
    spec->dtype = x.dtype;
    spec->spatial_dims = static_cast<int>(x.rank() - 2);
    spec->stride = *int_list_arg(node, at.stride);
    spec->padding = *int_list_arg(node, at.stride + 1);
    spec->dilation = *int_list_arg(node, at.stride + 2);
    spec->groups = *int_arg(node, at.groups);
    if (node.op == kConvolution) {
      spec->direction = ConvDirection::Forward;
      spec->bias = tensor_arg(graph_, node, 2);
      spec->output = node.outputs[0];
      // Note [Grouped convolution biases] (mybackend/passes/conv_biases.py):
      // only cuDNN's runtime-fusion engines run a grouped convolution with an
      // epilogue, and they lose to the convolution alone.
      if (spec->groups == 1) match_epilogue(*spec, ctx);
    } else {
      spec->direction = ConvDirection::Backward;
      spec->grad_output = tensor_arg(graph_, node, 0);
      const std::vector<bool> mask = *bool_list_arg(node, 10);
      spec->grad_input = mask[0] ? node.outputs[0] : -1;
      spec->grad_weight = mask[1] ? node.outputs[1] : -1;
      spec->grad_bias = mask[2] ? node.outputs[2] : -1;
    }
    if (!index_.convex(ctx.members)) {
      // Cannot happen for the chains matched above (each joined node reads the
      // previous one's only-read output); kept as a guard.
      claimed.refuse(n, "no cuDNN group: the matched pattern is not convex");
      continue;
    }
    KernelGroup group;
    group.nodes.assign(ctx.members.begin(), ctx.members.end());
    group.spec = spec->to_string();
    group.why = spec->direction == ConvDirection::Forward
                    ? "cuDNN conv_fprop with epilogue " + spec->epilogue_name()
                    : std::string("cuDNN conv_dgrad/conv_wgrad per output_mask");
    for (const std::string& note : ctx.notes) group.why += "; " + note;
    group.set(std::move(spec));
    claimed.claim(std::move(group));
  }
}

}  // namespace mybackend
