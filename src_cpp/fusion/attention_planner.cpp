#include "fusion/attention_planner.h"

#include <cmath>
#include <memory>
#include <optional>
#include <set>
#include <utility>

#include "fusion/gradient_stack.h"
#include "fusion/ir_match.h"
#include "spec/attention_spec.h"

namespace mybackend {
namespace {

using ir_match::bool_arg;
using ir_match::is_shape_view;
using ir_match::none_arg;
using ir_match::same_dim;
using ir_match::scalar_arg;
using ir_match::swaps_last_two_dims;
using ir_match::tensor_arg;

constexpr const char* kCudnnForward = "aten::_scaled_dot_product_cudnn_attention.default";
constexpr const char* kCudnnBackward = "aten::_scaled_dot_product_cudnn_attention_backward.default";
constexpr const char* kFlashForward = "aten::_scaled_dot_product_flash_attention.default";
constexpr const char* kFlashBackward = "aten::_scaled_dot_product_flash_attention_backward.default";
constexpr const char* kEfficientForward = "aten::_scaled_dot_product_efficient_attention.default";
constexpr const char* kEfficientBackward =
    "aten::_scaled_dot_product_efficient_attention_backward.default";

std::optional<AttentionSource> sdpa_source(const std::string& op) {
  if (op == kCudnnForward) return AttentionSource::CudnnForward;
  if (op == kCudnnBackward) return AttentionSource::CudnnBackward;
  if (op == kFlashForward) return AttentionSource::FlashForward;
  if (op == kFlashBackward) return AttentionSource::FlashBackward;
  if (op == kEfficientForward) return AttentionSource::EfficientForward;
  if (op == kEfficientBackward) return AttentionSource::EfficientBackward;
  return std::nullopt;
}

// Why q, k, v (and O, dO in a backward) cannot feed cuDNN SDPA; empty if they can.
std::string operands_problem(const Graph& graph, const std::vector<ValueId>& values) {
  const ValueId first = values.front();
  if (first < 0) return "q is not a tensor";
  const TensorType& q = graph.value(first).tensor;
  if (q.device.type != DeviceType::CUDA) return "not on a CUDA device";
  if (q.dtype != DType::Float16 && q.dtype != DType::BFloat16)
    return "dtype " + std::string(dtype_name(q.dtype)) + " (cuDNN SDPA takes f16 and bf16)";
  for (ValueId v : values) {
    if (v < 0) return "an operand is not a tensor";
    const TensorType& t = graph.value(v).tensor;
    if (t.rank() != 4) return "an operand is not 4-D [batch, heads, seq, head_dim]";
    if (t.dtype != q.dtype) return "operands of different dtypes";
    if (t.device != q.device) return "operands on different devices";
  }
  return {};
}

// The softmax scale: the literal, or 1/sqrt(head dim) for None.
std::optional<double> scale_of(const Graph& graph, const Node& node, std::size_t index, ValueId q) {
  if (none_arg(node, index)) {
    const Dim& head_dim = graph.value(q).tensor.sizes[3];
    if (!head_dim.is_static() || head_dim.static_value() <= 0) return std::nullopt;
    return 1.0 / std::sqrt(static_cast<double>(head_dim.static_value()));
  }
  return scalar_arg(node, index);
}

// Outputs past the first `computed` that anything reads (or the graph returns).
std::vector<ValueId> read_outputs(const GraphIndex& index, const Node& node, std::size_t computed) {
  std::vector<ValueId> out;
  for (std::size_t i = computed; i < node.outputs.size(); ++i) {
    const auto v = static_cast<std::size_t>(node.outputs[i]);
    if (!index.readers[v].empty() || index.graph_output[v]) out.push_back(node.outputs[i]);
  }
  return out;
}

// Why `lse` cannot be cuDNN's Stats [B, H, Sq, 1] seen through strides;
// empty when it can: f32 [B, H, L] (flash's, L = Sq; the memory-efficient
// kernel pads L to a multiple of 32, which a forward writes through a view
// but cuDNN's backward cannot read: `packed`) or cuDNN's own [B, H, Sq, 1].
std::string logsumexp_problem(const Graph& graph, ValueId lse, ValueId q, bool packed) {
  if (lse < 0) return "the logsumexp is not a tensor";
  const TensorType& t = graph.value(lse).tensor;
  const bool cudnn_form = t.rank() == 4 && same_dim(t.sizes[3], Dim(1));
  if (t.dtype != DType::Float32 || (t.rank() != 3 && !cudnn_form))
    return "the logsumexp is not an f32 [B, H, L] or [B, H, L, 1] tensor";
  const Dim& q_len = graph.value(q).tensor.sizes[2];
  if ((packed || cudnn_form) && !same_dim(t.sizes[2], q_len))
    return "the logsumexp is padded past the query length (" + t.sizes[2].str() + " vs " +
           q_len.str() + "); cuDNN needs it packed";
  return {};
}

bool is_read(const GraphIndex& index, ValueId value) {
  const auto v = static_cast<std::size_t>(value);
  return !index.readers[v].empty() || index.graph_output[v];
}

// Fills `spec` from one aten SDPA node; returns why not when it cannot.
std::string plan_sdpa_node(const GraphIndex& index, const Node& node, AttentionSpec& spec) {
  const Graph& graph = index.graph;
  spec.source = *sdpa_source(node.op);
  spec.anchor = node.id;
  spec.op = node.op;
  const bool backward = attention_is_backward(spec.source);
  const std::size_t first = backward ? 1 : 0;  // backward nodes start with grad_out
  spec.q = tensor_arg(graph, node, first);
  spec.k = tensor_arg(graph, node, first + 1);
  spec.v = tensor_arg(graph, node, first + 2);
  // Argument positions of dropout_p, is_causal, scale, the bias (0: none),
  // the debug-mask flag (0: none) and, in a backward, O and the logsumexp,
  // in each schema.
  struct Positions {
    std::size_t dropout, causal, scale, bias, debug_mask, out, logsumexp;
  };
  Positions at{};
  switch (spec.source) {
    case AttentionSource::CudnnForward: at = {5, 6, 8, 3, 7, 0, 0}; break;
    case AttentionSource::FlashForward: at = {3, 4, 6, 0, 5, 0, 0}; break;
    case AttentionSource::EfficientForward: at = {5, 6, 7, 3, 0, 0, 0}; break;
    case AttentionSource::CudnnBackward: at = {13, 14, 15, 8, 0, 4, 5}; break;
    case AttentionSource::FlashBackward: at = {10, 11, 14, 0, 0, 4, 5}; break;
    case AttentionSource::EfficientBackward: at = {9, 11, 12, 4, 0, 5, 6}; break;
    case AttentionSource::Decomposed: return "not an SDPA node";
  }
  std::vector<ValueId> operands{spec.q, spec.k, spec.v};
  if (backward) {
    spec.grad_out = tensor_arg(graph, node, 0);
    spec.out = tensor_arg(graph, node, at.out);
    spec.logsumexp = tensor_arg(graph, node, at.logsumexp);
    operands.push_back(spec.out);
    operands.push_back(spec.grad_out);
    if (std::string problem = logsumexp_problem(graph, spec.logsumexp, spec.q, /*packed=*/true);
        !problem.empty())
      return problem;
  }
  if (std::string problem = operands_problem(graph, operands); !problem.empty()) return problem;
  spec.dtype = graph.value(spec.q).tensor.dtype;
  const auto dropout_p = scalar_arg(node, at.dropout);
  if (!dropout_p || *dropout_p != 0.0)
    return "dropout_p is not the literal 0 (cuDNN's dropout mask is not the aten kernel's)";
  const auto is_causal = bool_arg(node, at.causal);
  if (!is_causal) return "is_causal is not a literal";
  spec.causal = *is_causal;
  const auto softmax_scale = scale_of(graph, node, at.scale, spec.q);
  if (!softmax_scale) return "the scale is not known at compile time";
  spec.scale = *softmax_scale;
  if (at.debug_mask > 0 && bool_arg(node, at.debug_mask).value_or(true))
    return "a debug attention mask is asked for";
  if (at.bias > 0) {
    if (!none_arg(node, at.bias)) {
      spec.bias = tensor_arg(graph, node, at.bias);
      if (spec.bias < 0) return "the attention bias is not a tensor";
      const TensorType& bias = graph.value(spec.bias).tensor;
      if (bias.dtype != spec.dtype || bias.device != graph.value(spec.q).tensor.device ||
          bias.rank() < 2 || bias.rank() > 4)
        return "the attention bias is not a 2-D to 4-D tensor of q's dtype and device";
      // With 77 keys cuDNN's masked SDPA gave NaN gradients on an H200 (aot
      // pads the bias rows to 80, so alignment alone is not the cause).
      const Dim& keys = graph.value(spec.k).tensor.sizes[2];
      if (!keys.is_static() || keys.static_value() % 8 != 0)
        return "a bias over " + keys.str() +
               " keys (not a multiple of 8): cuDNN's masked SDPA gave NaN gradients there";
      // cuDNN reads bias rows in 16-byte units (8 f16/bf16 elements).
      for (std::size_t d = 0; d + 1 < bias.strides.size(); ++d) {
        const Dim& stride = bias.strides[d];
        if (!stride.is_static() || stride.static_value() % 8 != 0)
          return "the attention bias rows are not 16-byte aligned (stride " + stride.str() +
                 " elements)";
      }
    }
  }
  if (spec.source == AttentionSource::EfficientBackward) {
    const bool grad_bias = node.args.size() > 10 && node.args[10].kind == Argument::Kind::List &&
                           node.args[10].items.size() == 4 &&
                           node.args[10].items[3].kind == Argument::Kind::Bool &&
                           node.args[10].items[3].b;
    if (grad_bias || (node.outputs.size() > 3 && is_read(index, node.outputs[3])))
      return "the bias gradient is asked for (cuDNN's dBias takes few bias shapes)";
  }
  if (backward) {
    spec.grad_q = node.outputs[0];
    spec.grad_k = node.outputs[1];
    spec.grad_v = node.outputs[2];
    return {};
  }
  spec.out = node.outputs[0];
  // Inference graphs read no logsumexp: cuDNN then computes no Stats.
  if (node.outputs.size() > 1 && is_read(index, node.outputs[1])) {
    spec.logsumexp = node.outputs[1];
    if (graph.value(spec.logsumexp).kind != ValueKind::Tensor)
      return "the logsumexp output is not a tensor";
    if (std::string problem = logsumexp_problem(graph, spec.logsumexp, spec.q, /*packed=*/false);
        !problem.empty())
      return problem;
  }
  spec.extra_outputs = read_outputs(index, node, 2);
  return {};
}

// ---- The decomposed pattern (Note [Attention groups]) ----

struct Chain {
  const GraphIndex& index;
  const std::set<NodeId>& partition;
  const ClaimedGroups& claimed;
  std::set<NodeId> members;

  const Graph& graph() const { return index.graph; }
  bool usable(NodeId n) const {
    return partition.count(n) && !claimed.claimed(n) && !members.count(n);
  }
  // The node producing `value` when `reader` is its only reader, it sits in
  // the partition unclaimed and the graph does not return `value`.
  const Node* sole_producer(ValueId value, NodeId reader) const {
    const Value& v = graph().value(value);
    if (v.producer == kGraphInput || !usable(v.producer)) return nullptr;
    const auto& readers = index.readers[static_cast<std::size_t>(value)];
    if (index.graph_output[static_cast<std::size_t>(value)] || readers.size() != 1 ||
        readers[0] != reader)
      return nullptr;
    return &graph().node(v.producer);
  }
  // A bmm operand: view(expand(X)) or view(X) flattening [B, H, ...] of a
  // 4-D X into [B*H, ...]. Returns X and the node of the chain that reads
  // it, and takes the view and expand; {-1, -1} when it is not that.
  std::pair<ValueId, NodeId> unflatten(ValueId operand, NodeId reader) {
    const Node* view = sole_producer(operand, reader);
    if (view == nullptr || !is_shape_view(*view)) return {-1, -1};
    ValueId x = tensor_arg(graph(), *view, 0);
    if (x < 0) return {-1, -1};
    std::vector<NodeId> taken{view->id};
    if (const Node* expand = sole_producer(x, view->id);
        expand != nullptr && expand->op == "aten::expand.default") {
      const ValueId in = tensor_arg(graph(), *expand, 0);
      if (in < 0 || !ir_match::same_shape(graph().value(in).tensor, graph().value(x).tensor))
        return {-1, -1};  // a real broadcast: not one head per batch row
      taken.push_back(expand->id);
      x = in;
    }
    if (graph().value(x).tensor.rank() != 4) return {-1, -1};
    members.insert(taken.begin(), taken.end());
    return {x, taken.back()};
  }
  // The scores side of add(scores, mask): the operand a view or scaling
  // of the chain produces.
  bool continues_scores(ValueId value, NodeId reader) const {
    const Node* producer = value >= 0 ? sole_producer(value, reader) : nullptr;
    return producer != nullptr &&
           (is_shape_view(*producer) || producer->op.rfind("aten::mul.", 0) == 0 ||
            producer->op.rfind("aten::div.", 0) == 0);
  }
};

// view of a bmm result back to 4-D [B, H, ·, ·]: its only reader.
const Node* unflattening_view(const Chain& chain, ValueId product) {
  const auto& readers = chain.index.readers[static_cast<std::size_t>(product)];
  if (chain.index.graph_output[static_cast<std::size_t>(product)] || readers.size() != 1 ||
      !chain.usable(readers[0]))
    return nullptr;
  const Node& view = chain.graph().node(readers[0]);
  if (!is_shape_view(view) || chain.graph().value(view.outputs[0]).tensor.rank() != 4)
    return nullptr;
  return &view;
}

// Matches the chain ending in the bmm `pv` (P·V); false when it is not one.
bool match_decomposed(Chain& chain, const Node& pv, AttentionSpec& spec) {
  const Graph& graph = chain.graph();
  chain.members = {pv.id};
  const auto [p4, p_reader] = chain.unflatten(pv.args[0].value, pv.id);
  const auto [v4, v_reader] = chain.unflatten(pv.args[1].value, pv.id);
  if (p4 < 0 || v4 < 0) return false;
  const Node* softmax = chain.sole_producer(p4, p_reader);
  if (softmax == nullptr || softmax->op != "aten::_softmax.default") return false;
  const auto dim = ir_match::int_arg(*softmax, 1);
  if (!dim || (*dim != -1 && *dim != 3) || bool_arg(*softmax, 2).value_or(true)) return false;
  chain.members.insert(softmax->id);
  ValueId scores = tensor_arg(graph, *softmax, 0);
  NodeId reader = softmax->id;
  const Node* node = chain.sole_producer(scores, reader);
  if (node != nullptr && node->op == "aten::add.Tensor") {
    const ValueId a = tensor_arg(graph, *node, 0), b = tensor_arg(graph, *node, 1);
    const bool alpha_one = scalar_arg(*node, 2).value_or(1.0) == 1.0;
    const bool a_is_scores = chain.continues_scores(a, node->id);
    const ValueId mask = a_is_scores ? b : a;
    const ValueId rest = a_is_scores ? a : b;
    if (!alpha_one || mask < 0 || rest < 0 || !chain.continues_scores(rest, node->id) ||
        graph.value(mask).tensor.rank() < 2 ||
        graph.value(mask).tensor.dtype != graph.value(scores).tensor.dtype ||
        !ir_match::same_shape(graph.value(rest).tensor, graph.value(scores).tensor))
      return false;
    spec.bias = mask;
    chain.members.insert(node->id);
    reader = node->id;
    scores = rest;
    node = chain.sole_producer(scores, reader);
  }
  spec.scale = 1.0;
  if (node != nullptr && (node->op == "aten::mul.Tensor" || node->op == "aten::mul.Scalar" ||
                          node->op == "aten::div.Tensor" || node->op == "aten::div.Scalar")) {
    const auto factor = scalar_arg(*node, 1);
    if (!factor || tensor_arg(graph, *node, 0) < 0 || *factor == 0.0) return false;
    spec.scale = node->op.rfind("aten::mul", 0) == 0 ? *factor : 1.0 / *factor;
    chain.members.insert(node->id);
    reader = node->id;
    scores = tensor_arg(graph, *node, 0);
    node = chain.sole_producer(scores, reader);
  }
  // scores = view(bmm(Q, Kᵀ)) back to [B, H, Sq, Skv].
  if (node == nullptr || !is_shape_view(*node)) return false;
  chain.members.insert(node->id);
  const Node* qk = chain.sole_producer(tensor_arg(graph, *node, 0), node->id);
  if (qk == nullptr || qk->op != "aten::bmm.default") return false;
  chain.members.insert(qk->id);
  const auto [q4, q_reader] = chain.unflatten(qk->args[0].value, qk->id);
  const auto [kt4, kt_reader] = chain.unflatten(qk->args[1].value, qk->id);
  if (q4 < 0 || kt4 < 0) return false;
  const Node* transpose = chain.sole_producer(kt4, kt_reader);
  if (transpose == nullptr || !swaps_last_two_dims(graph, *transpose)) return false;
  chain.members.insert(transpose->id);
  spec.q = q4;
  spec.k = tensor_arg(graph, *transpose, 0);
  spec.v = v4;
  spec.out = pv.outputs[0];
  if (const Node* view = unflattening_view(chain, pv.outputs[0])) {
    chain.members.insert(view->id);
    spec.out = view->outputs[0];
  }
  return true;
}

std::string decomposed_problem(const Graph& graph, const AttentionSpec& spec) {
  if (std::string problem = operands_problem(graph, {spec.q, spec.k, spec.v}); !problem.empty())
    return problem;
  const TensorType& q = graph.value(spec.q).tensor;
  const TensorType& k = graph.value(spec.k).tensor;
  const TensorType& v = graph.value(spec.v).tensor;
  if (!same_dim(q.sizes[3], k.sizes[3]) || !same_dim(k.sizes[2], v.sizes[2]))
    return "q, k, v shapes do not form attention";
  if (spec.bias >= 0 && graph.value(spec.bias).tensor.device != q.device)
    return "the mask is on another device";
  return {};
}

void claim(ClaimedGroups& claimed, std::set<NodeId> members, std::shared_ptr<AttentionSpec> spec) {
  KernelGroup group;
  group.nodes.assign(members.begin(), members.end());
  group.spec = spec->to_string();
  group.why = "cuDNN SDPA graph for " + std::string(attention_source_name(spec->source)) +
              (spec->bias >= 0 ? " with bias" : "") + (spec->causal ? ", causal" : "") +
              (spec->stack.value >= 0 ? ", gradients written into their concatenation" : "") +
              "; the aten op if cuDNN declines at run time";
  group.set(std::move(spec));
  claimed.claim(std::move(group));
}

}  // namespace

void claim_attention_groups(const GraphIndex& index, const std::vector<NodeId>& partition_nodes,
                            ClaimedGroups& claimed, bool beyond_cudnn_ops) {
  const Graph& graph = index.graph;
  const std::set<NodeId> partition(partition_nodes.begin(), partition_nodes.end());
  // Last node first: the second bmm of a decomposed chain is met before the
  // first, so the chain's nodes are all unclaimed when it is matched.
  for (auto it = partition_nodes.rbegin(); it != partition_nodes.rend(); ++it) {
    const Node& node = graph.node(*it);
    if (node.kind != NodeKind::Aten || claimed.claimed(node.id)) continue;
    if (const auto source = sdpa_source(node.op)) {
      const bool cudnn_op =
          *source == AttentionSource::CudnnForward || *source == AttentionSource::CudnnBackward;
      if (!cudnn_op && !beyond_cudnn_ops) continue;
      auto spec = std::make_shared<AttentionSpec>();
      if (std::string problem = plan_sdpa_node(index, node, *spec); !problem.empty()) {
        claimed.refuse(node.id, "no cuDNN SDPA group: " + problem);
        continue;
      }
      std::set<NodeId> members{node.id};
      if (attention_is_backward(spec->source)) {
        // Note [Gradients written stacked]
        const auto usable = [&](NodeId n) { return partition.count(n) && !claimed.claimed(n); };
        std::set<NodeId> stacked = members;
        GradientStack stack = plan_gradient_stack(index, *spec, usable, stacked);
        if (stack.value >= 0 && index.convex(stacked)) {
          spec->stack = std::move(stack);
          members = std::move(stacked);
        }
      }
      claim(claimed, std::move(members), std::move(spec));
      continue;
    }
    if (node.op != "aten::bmm.default" || !beyond_cudnn_ops) continue;
    Chain chain{index, partition, claimed, {}};
    auto spec = std::make_shared<AttentionSpec>();
    spec->source = AttentionSource::Decomposed;
    spec->anchor = node.id;
    spec->op = node.op;
    if (!match_decomposed(chain, node, *spec)) continue;  // a plain bmm: the matmul planner's
    std::string problem = decomposed_problem(graph, *spec);
    if (problem.empty() && !index.convex(chain.members)) problem = "the pattern is not convex";
    if (!problem.empty()) {
      claimed.refuse(node.id, "no cuDNN SDPA group for the attention pattern: " + problem);
      continue;
    }
    spec->dtype = graph.value(spec->q).tensor.dtype;
    claim(claimed, std::move(chain.members), std::move(spec));
  }
}

}  // namespace mybackend
