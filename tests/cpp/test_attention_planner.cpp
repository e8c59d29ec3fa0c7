// Stage 7: the attention planner (cuDNN SDPA groups) on hand-built IR graphs
// shaped like aot_autograd's on CUDA (no torch, no GPU).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fusion/fusion_plan.h"
#include "fusion_graphs.h"
#include "ir/graph.h"
#include "spec/attention_spec.h"

namespace mybackend {
namespace {

const DType BF16 = DType::BFloat16;
const char* kFlash = "aten::_scaled_dot_product_flash_attention.default";
const char* kEfficientBackward = "aten::_scaled_dot_product_efficient_attention_backward.default";

Argument f(double x) { return Argument::of_float(x); }
Argument flag(bool x) { return Argument::of_bool(x); }
Argument none() { return Argument{}; }

GraphBuilder::OutputSpec int_out() { return {ValueKind::Int, {}, std::nullopt, "int"}; }
GraphBuilder::OutputSpec opaque_out() { return {ValueKind::Opaque, {}, std::nullopt, "none"}; }

// Matmul groups stay on (the default), generated kernels off: the attention
// planner must take its products before the matmul planner sees them.
FusionOptions defaults() { return FusionOptions{}; }

const KernelGroup& only_attention(const Planned& p) {
  auto groups = p.groups(KernelKind::Attention);
  EXPECT_EQ(groups.size(), 1u) << p.plan.to_string();
  return *groups.at(0);
}

// q, k, v [2, 4, 128, 64] and flash's nine outputs.
struct Flash {
  GraphBuilder b;
  ValueId q, k, vv;
  std::vector<ValueId> outs;
  explicit Flash(double dropout = 0.0, bool causal = true, DType dtype = BF16) {
    q = b.add_input(out(tensor(dtype, {2, 4, 128, 64}), "q"));
    k = b.add_input(out(tensor(dtype, {2, 4, 128, 64}), "k"));
    vv = b.add_input(out(tensor(dtype, {2, 4, 128, 64}), "v"));
    outs = b.add_node(
        NodeKind::Aten, kFlash, {v(q), v(k), v(vv), f(dropout), flag(causal), flag(false), none()},
        {out(tensor(dtype, {2, 4, 128, 64})), out(tensor(DType::Float32, {2, 4, 128})),
         opaque_out(), opaque_out(), int_out(), int_out(), out(tensor(DType::UInt64, {2}, "meta")),
         out(tensor(DType::UInt64, {}, "meta")), out(tensor(dtype, {0}))},
        "flash");
  }
};

TEST(AttentionPlanner, FlashForwardInInferenceIsOneGroupWithoutStats) {
  Flash g;
  g.b.set_outputs({v(g.outs[0])});
  Planned p = plan(g.b, defaults());
  const KernelGroup& group = only_attention(p);
  EXPECT_EQ(group.nodes, (std::vector<NodeId>{0}));
  const AttentionSpec& spec = *group.get<AttentionSpec>();
  EXPECT_EQ(spec.source, AttentionSource::FlashForward);
  EXPECT_EQ(spec.q, g.q);
  EXPECT_EQ(spec.k, g.k);
  EXPECT_EQ(spec.v, g.vv);
  EXPECT_TRUE(spec.causal);
  EXPECT_DOUBLE_EQ(spec.scale, 0.125);  // None: 1/sqrt(64)
  EXPECT_EQ(spec.out, g.outs[0]);
  EXPECT_EQ(spec.logsumexp, -1);  // nobody reads it: cuDNN computes no Stats
  EXPECT_TRUE(spec.extra_outputs.empty());
  EXPECT_NE(group.spec.find("attention flash_forward"), std::string::npos) << group.spec;
}

TEST(AttentionPlanner, FlashForwardInTrainingProducesWhatTheBackwardReads) {
  Flash g;
  // aot's forward returns what the backward saves: out, logsumexp, the
  // sequence lengths and the RNG state.
  g.b.set_outputs({v(g.outs[0]), v(g.outs[1]), v(g.outs[4]), v(g.outs[6]), v(g.outs[7])});
  Planned p = plan(g.b, defaults());
  const AttentionSpec& spec = *only_attention(p).get<AttentionSpec>();
  EXPECT_EQ(spec.logsumexp, g.outs[1]);
  EXPECT_EQ(spec.extra_outputs, (std::vector<ValueId>{g.outs[4], g.outs[6], g.outs[7]}));
}

TEST(AttentionPlanner, DropoutFallsBackToTheAtenOpWithItsReason) {
  Flash g(/*dropout=*/0.1);
  g.b.set_outputs({v(g.outs[0])});
  Planned p = plan(g.b, defaults());
  EXPECT_TRUE(p.groups(KernelKind::Attention).empty());
  EXPECT_NE(all_whys(p).find("dropout_p is not the literal 0"), std::string::npos) << all_whys(p);
}

TEST(AttentionPlanner, Float32IsRefused) {
  Flash g(0.0, false, DType::Float32);
  g.b.set_outputs({v(g.outs[0])});
  Planned p = plan(g.b, defaults());
  EXPECT_TRUE(p.groups(KernelKind::Attention).empty());
  EXPECT_NE(all_whys(p).find("cuDNN SDPA takes f16 and bf16"), std::string::npos);
}

TEST(AttentionPlanner, OptionOffPlansNoAttention) {
  Flash g;
  g.b.set_outputs({v(g.outs[0])});
  FusionOptions options;
  options.attention = false;
  Planned p = plan(g.b, options);
  EXPECT_TRUE(p.groups(KernelKind::Attention).empty());
}

// The efficient backward, as aot's backward graph has it for a masked sdpa.
struct EfficientBackward {
  GraphBuilder b;
  ValueId grad, q, k, v_, bias, o, lse, other = -1;
  std::vector<ValueId> outs;
  // `stats` is the logsumexp length: the aten kernel pads it to a multiple
  // of 32 queries. `more`: the caller adds nodes and sets the outputs, and
  // the graph has one more [2, 4, seq, 64] input, `other`.
  explicit EfficientBackward(bool grad_bias, std::int64_t seq = 128, std::int64_t stats = 128,
                             bool more = false) {
    const TensorType bhsd = tensor(BF16, {2, 4, seq, 64});
    grad = b.add_input(out(bhsd, "grad"));
    q = b.add_input(out(bhsd, "q"));
    k = b.add_input(out(bhsd, "k"));
    v_ = b.add_input(out(bhsd, "v"));
    bias = b.add_input(out(tensor(BF16, {2, 4, seq, seq}), "bias"));
    o = b.add_input(out(bhsd, "o"));
    lse = b.add_input(out(tensor(DType::Float32, {2, 4, stats}), "lse"));
    const ValueId seed = b.add_input(out(tensor(DType::Int64, {}), "seed"));
    const ValueId offset = b.add_input(out(tensor(DType::Int64, {}), "offset"));
    if (more) other = b.add_input(out(bhsd, "other"));
    std::vector<Argument> mask{flag(true), flag(true), flag(true), flag(grad_bias)};
    outs = b.add_node(NodeKind::Aten, kEfficientBackward,
                      {v(grad), v(q), v(k), v(v_), v(bias), v(o), v(lse), v(seed), v(offset),
                       f(0.0), Argument::of_list(mask), flag(false), f(0.125)},
                      {out(bhsd), out(bhsd), out(bhsd),
                       grad_bias ? out(tensor(BF16, {2, 4, seq, seq})) : opaque_out()},
                      "efficient_backward");
    std::vector<Argument> results{v(outs[0]), v(outs[1]), v(outs[2])};
    if (grad_bias) results.push_back(v(outs[3]));
    if (!more) b.set_outputs(results);
  }
};

TEST(AttentionPlanner, EfficientBackwardWithBiasIsOneGroup) {
  EfficientBackward g(false);
  Planned p = plan(g.b, defaults());
  const AttentionSpec& spec = *only_attention(p).get<AttentionSpec>();
  EXPECT_EQ(spec.source, AttentionSource::EfficientBackward);
  EXPECT_EQ(spec.grad_out, g.grad);
  EXPECT_EQ(spec.bias, g.bias);
  EXPECT_EQ(spec.out, g.o);
  EXPECT_EQ(spec.logsumexp, g.lse);
  EXPECT_EQ(spec.grad_q, g.outs[0]);
  EXPECT_EQ(spec.grad_v, g.outs[2]);
  EXPECT_DOUBLE_EQ(spec.scale, 0.125);
  EXPECT_EQ(spec.inputs(), (std::vector<ValueId>{g.q, g.k, g.v_, g.bias, g.o, g.lse, g.grad}));
}

// Note [Gradients written stacked]: the backward of timm's qkv split, after
// Note [Permuted concatenations]: each gradient unsqueezed at 0, permuted
// to [B, S, 1, H, D] and concatenated along dim 2.
struct StackedBackward : EfficientBackward {
  ValueId stacked = -1;
  std::vector<NodeId> views;
  // `order`: which gradient (0 q, 1 k, 2 v) is the cat's part 0, 1, 2.
  explicit StackedBackward(std::vector<int> order = {0, 1, 2}, bool dk_returned = false)
      : EfficientBackward(false, 128, 128, /*more=*/true) {
    std::vector<ValueId> parts(3);
    for (int g = 0; g < 3; ++g) {
      const ValueId one = node1(b, "aten::unsqueeze.default", {v(outs[g]), Argument::of_int(0)},
                                tensor(BF16, {1, 2, 4, 128, 64}), "unsqueeze");
      parts[g] = node1(b, "aten::permute.default", {v(one), ints({1, 3, 0, 2, 4})},
                       tensor(BF16, {2, 128, 1, 4, 64}), "permute");
    }
    stacked =
        node1(b, "aten::cat.default",
              {Argument::of_list({v(parts[order[0]]), v(parts[order[1]]), v(parts[order[2]])}),
               Argument::of_int(2)},
              tensor(BF16, {2, 128, 3, 4, 64}), "cat");
    if (dk_returned) {
      b.set_outputs({v(stacked), v(outs[1])});
    } else {
      b.set_outputs({v(stacked)});
    }
  }
};

TEST(AttentionPlanner, GradientsReadOnlyByOneConcatenationAreWrittenIntoIt) {
  StackedBackward g({2, 0, 1});
  Planned p = plan(g.b, defaults());
  const KernelGroup& group = only_attention(p);
  EXPECT_EQ(group.nodes.size(), 8u);  // the backward, 3 x (unsqueeze, permute), the cat
  const AttentionSpec& spec = *group.get<AttentionSpec>();
  ASSERT_EQ(spec.stack.value, g.stacked);
  EXPECT_EQ(spec.stack.dim, 2);
  ASSERT_EQ(spec.stack.parts.size(), 3u);
  EXPECT_EQ(spec.stack.parts[0].gradient, 2);
  EXPECT_EQ(spec.stack.parts[1].gradient, 0);
  EXPECT_EQ(spec.stack.parts[2].gradient, 1);
  const auto& views = spec.stack.parts[0].views;
  ASSERT_EQ(views.size(), 2u);
  EXPECT_EQ(views[0].kind, StackView::Kind::Unsqueeze);
  EXPECT_EQ(views[0].dims, (std::vector<std::int64_t>{0}));
  EXPECT_EQ(views[1].kind, StackView::Kind::Permute);
  EXPECT_EQ(views[1].dims, (std::vector<std::int64_t>{1, 3, 0, 2, 4}));
  EXPECT_EQ(spec.outputs(), (std::vector<ValueId>{g.stacked}));
  EXPECT_NE(group.spec.find("stack=%"), std::string::npos) << group.spec;
  EXPECT_NE(group.why.find("written into their concatenation"), std::string::npos);
}

TEST(AttentionPlanner, AGradientReadElsewhereIsNotStacked) {
  StackedBackward g({0, 1, 2}, /*dk_returned=*/true);
  Planned p = plan(g.b, defaults());
  const KernelGroup& group = only_attention(p);
  EXPECT_EQ(group.get<AttentionSpec>()->stack.value, -1);
  EXPECT_EQ(group.nodes.size(), 1u);
  EXPECT_EQ(group.get<AttentionSpec>()->outputs(),
            (std::vector<ValueId>{g.outs[0], g.outs[1], g.outs[2]}));
}

TEST(AttentionPlanner, AConcatenationOfOtherTensorsToo) {
  EfficientBackward g(false, 128, 128, /*more=*/true);
  const ValueId cat =
      node1(g.b, "aten::cat.default",
            {Argument::of_list({v(g.outs[0]), v(g.outs[1]), v(g.outs[2]), v(g.other)}),
             Argument::of_int(1)},
            tensor(BF16, {2, 16, 128, 64}), "cat");
  g.b.set_outputs({v(cat)});
  Planned p = plan(g.b, defaults());
  EXPECT_EQ(only_attention(p).get<AttentionSpec>()->stack.value, -1);
}

// The aten cuDNN SDPA pair as aot's graphs have them (what sdpa picks on an
// H100 in torch 2.11): cuDNN's own logsumexp [B, H, S, 1].
const char* kCudnnForward = "aten::_scaled_dot_product_cudnn_attention.default";
const char* kCudnnBackward = "aten::_scaled_dot_product_cudnn_attention_backward.default";

struct CudnnPair {
  GraphBuilder b;
  std::vector<ValueId> forward, grads;
  CudnnPair() {
    const TensorType bhsd = tensor(BF16, {2, 4, 128, 64});
    const ValueId q = b.add_input(out(bhsd, "q"));
    const ValueId k = b.add_input(out(bhsd, "k"));
    const ValueId vv = b.add_input(out(bhsd, "v"));
    const ValueId grad = b.add_input(out(bhsd, "grad"));
    forward = b.add_node(
        NodeKind::Aten, kCudnnForward,
        {v(q), v(k), v(vv), none(), flag(true), f(0.0), flag(false), flag(false), none()},
        {out(bhsd), out(tensor(DType::Float32, {2, 4, 128, 1})), opaque_out(), opaque_out(),
         int_out(), int_out(), out(tensor(DType::Int64, {}, "meta")),
         out(tensor(DType::Int64, {}, "meta")), opaque_out()},
        "cudnn_attention");
    grads = b.add_node(
        NodeKind::Aten, kCudnnBackward,
        {v(grad), v(q), v(k), v(vv), v(forward[0]), v(forward[1]), v(forward[6]), v(forward[7]),
         none(), none(), none(), v(forward[4]), v(forward[5]), f(0.0), flag(false), none()},
        {out(bhsd), out(bhsd), out(bhsd)}, "cudnn_attention_backward");
    b.set_outputs({v(grads[0]), v(grads[1]), v(grads[2])});
  }
};

TEST(AttentionPlanner, TheAtenCudnnPairIsPlannedEvenWithoutCudnnAttention) {
  CudnnPair g;
  FusionOptions options;
  options.attention_beyond_cudnn_ops = false;  // option cudnn_attention off: the default
  Planned p = plan(g.b, options);
  auto groups = p.groups(KernelKind::Attention);
  ASSERT_EQ(groups.size(), 2u) << p.plan.to_string();
  const AttentionSpec* forward = groups[0]->get<AttentionSpec>();
  const AttentionSpec* backward = groups[1]->get<AttentionSpec>();
  if (attention_is_backward(forward->source)) std::swap(forward, backward);
  EXPECT_EQ(forward->source, AttentionSource::CudnnForward);
  EXPECT_EQ(forward->logsumexp, g.forward[1]);
  EXPECT_DOUBLE_EQ(forward->scale, 0.125);
  EXPECT_EQ(backward->source, AttentionSource::CudnnBackward);
  EXPECT_EQ(backward->out, g.forward[0]);
  EXPECT_EQ(backward->logsumexp, g.forward[1]);
  EXPECT_EQ(backward->grad_q, g.grads[0]);
  EXPECT_FALSE(backward->causal);
}

TEST(AttentionPlanner, WithoutCudnnAttentionFlashIsLeftToItsAtenKernel) {
  Flash g;
  g.b.set_outputs({v(g.outs[0])});
  FusionOptions options;
  options.attention_beyond_cudnn_ops = false;
  Planned p = plan(g.b, options);
  EXPECT_TRUE(p.groups(KernelKind::Attention).empty());
}

TEST(AttentionPlanner, BiasGradientFallsBack) {
  EfficientBackward g(true);
  Planned p = plan(g.b, defaults());
  EXPECT_TRUE(p.groups(KernelKind::Attention).empty());
  EXPECT_NE(all_whys(p).find("bias gradient"), std::string::npos) << all_whys(p);
}

// cuDNN's backward takes Stats packed: 77 queries padded to 96 stay aten.
TEST(AttentionPlanner, PaddedLogsumexpFallsBack) {
  EfficientBackward g(false, 77, 96);
  Planned p = plan(g.b, defaults());
  EXPECT_TRUE(p.groups(KernelKind::Attention).empty());
  EXPECT_NE(all_whys(p).find("padded past the query length"), std::string::npos) << all_whys(p);
}

// A bias over 77 keys: cuDNN's masked SDPA gave NaN gradients (H200).
TEST(AttentionPlanner, BiasOverUnalignedKeysFallsBack) {
  EfficientBackward g(false, 77, 77);
  Planned p = plan(g.b, defaults());
  EXPECT_TRUE(p.groups(KernelKind::Attention).empty());
  EXPECT_NE(all_whys(p).find("not a multiple of 8"), std::string::npos) << all_whys(p);
}

// matmul(q, kᵀ) / 8 (+ mask) -> softmax -> matmul(·, v), as aot decomposes it.
struct Decomposed {
  GraphBuilder b;
  ValueId q, k, v_, mask = -1, probs = -1, result = -1;
  int nodes = 0;
  ValueId node(const char* op, std::vector<Argument> args, const TensorType& t) {
    ++nodes;
    return b.add_node(NodeKind::Aten, op, std::move(args), {out(t)}, op)[0];
  }
  // [2,4,S,D] -> expand -> view [8,S,D]
  ValueId flatten(ValueId x, std::vector<std::int64_t> sizes, DType dtype) {
    const ValueId e = node("aten::expand.default", {v(x), ints(sizes)}, tensor(dtype, sizes));
    std::vector<std::int64_t> flat{sizes[0] * sizes[1], sizes[2], sizes[3]};
    return node("aten::view.default", {v(e), ints(flat)}, tensor(dtype, flat));
  }
  explicit Decomposed(bool with_mask, DType dtype = BF16, bool softmax_is_output = false) {
    q = b.add_input(out(tensor(dtype, {2, 4, 128, 64}), "q"));
    k = b.add_input(out(tensor(dtype, {2, 4, 128, 64}), "k"));
    v_ = b.add_input(out(tensor(dtype, {2, 4, 128, 64}), "v"));
    if (with_mask) mask = b.add_input(out(tensor(dtype, {2, 1, 128, 128}), "mask"));
    const ValueId kt =
        node("aten::permute.default", {v(k), ints({0, 1, 3, 2})}, tensor(dtype, {2, 4, 64, 128}));
    const ValueId qf = flatten(q, {2, 4, 128, 64}, dtype);
    const ValueId kf = flatten(kt, {2, 4, 64, 128}, dtype);
    const ValueId s3 = node("aten::bmm.default", {v(qf), v(kf)}, tensor(dtype, {8, 128, 128}));
    const TensorType scores = tensor(dtype, {2, 4, 128, 128});
    ValueId s = node("aten::view.default", {v(s3), ints({2, 4, 128, 128})}, scores);
    s = node("aten::div.Tensor", {v(s), f(8.0)}, scores);
    if (with_mask) s = node("aten::add.Tensor", {v(s), v(mask), Argument::of_int(1)}, scores);
    probs = node("aten::_softmax.default", {v(s), Argument::of_int(-1), flag(false)}, scores);
    const ValueId pf = flatten(probs, {2, 4, 128, 128}, dtype);
    const ValueId vf = flatten(v_, {2, 4, 128, 64}, dtype);
    const ValueId o3 = node("aten::bmm.default", {v(pf), v(vf)}, tensor(dtype, {8, 128, 64}));
    result =
        node("aten::view.default", {v(o3), ints({2, 4, 128, 64})}, tensor(dtype, {2, 4, 128, 64}));
    std::vector<Argument> outputs{v(result)};
    if (softmax_is_output) outputs.push_back(v(probs));
    b.set_outputs(outputs);
  }
};

TEST(AttentionPlanner, DecomposedPatternWithMaskIsOneGroup) {
  Decomposed g(true);
  Planned p = plan(g.b, defaults());
  const KernelGroup& group = only_attention(p);
  EXPECT_EQ(static_cast<int>(group.nodes.size()), g.nodes);  // every node of the chain
  EXPECT_TRUE(p.groups(KernelKind::Matmul).empty()) << p.plan.to_string();
  const AttentionSpec& spec = *group.get<AttentionSpec>();
  EXPECT_EQ(spec.source, AttentionSource::Decomposed);
  EXPECT_EQ(spec.q, g.q);
  EXPECT_EQ(spec.k, g.k);  // K itself: the transpose is seen through
  EXPECT_EQ(spec.v, g.v_);
  EXPECT_EQ(spec.bias, g.mask);
  EXPECT_FALSE(spec.causal);
  EXPECT_DOUBLE_EQ(spec.scale, 0.125);
  EXPECT_EQ(spec.out, g.result);
  EXPECT_EQ(spec.logsumexp, -1);
}

TEST(AttentionPlanner, DecomposedPatternWithoutMask) {
  Decomposed g(false);
  Planned p = plan(g.b, defaults());
  const AttentionSpec& spec = *only_attention(p).get<AttentionSpec>();
  EXPECT_EQ(spec.bias, -1);
  EXPECT_DOUBLE_EQ(spec.scale, 0.125);
}

TEST(AttentionPlanner, SoftmaxWithAnotherReaderIsNotTaken) {
  // Training saves the probabilities for the backward: the group would have
  // to produce them, so the products stay the matmul planner's.
  Decomposed g(true, BF16, /*softmax_is_output=*/true);
  Planned p = plan(g.b, defaults());
  EXPECT_TRUE(p.groups(KernelKind::Attention).empty()) << p.plan.to_string();
  EXPECT_EQ(p.groups(KernelKind::Matmul).size(), 2u) << p.plan.to_string();
}

TEST(AttentionPlanner, Float32PatternIsRefusedAndLeftToTheMatmulPlanner) {
  Decomposed g(true, DType::Float32);
  Planned p = plan(g.b, defaults());
  EXPECT_TRUE(p.groups(KernelKind::Attention).empty());
  EXPECT_EQ(p.groups(KernelKind::Matmul).size(), 2u) << p.plan.to_string();
}

TEST(AttentionPlanner, ProductsOfOtherShapesAreNotAttention) {
  // bmm(x, w) -> softmax -> bmm on 3-D inputs (no [B, H] flattening): not matched.
  GraphBuilder b;
  const ValueId x = b.add_input(out(tensor(BF16, {8, 128, 64}), "x"));
  const ValueId w = b.add_input(out(tensor(BF16, {8, 64, 128}), "w"));
  const ValueId y = b.add_input(out(tensor(BF16, {8, 128, 64}), "y"));
  const ValueId s = b.add_node(NodeKind::Aten, "aten::bmm.default", {v(x), v(w)},
                               {out(tensor(BF16, {8, 128, 128}))}, "bmm")[0];
  const ValueId pr = b.add_node(NodeKind::Aten, "aten::_softmax.default",
                                {v(s), Argument::of_int(-1), flag(false)},
                                {out(tensor(BF16, {8, 128, 128}))}, "softmax")[0];
  const ValueId o = b.add_node(NodeKind::Aten, "aten::bmm.default", {v(pr), v(y)},
                               {out(tensor(BF16, {8, 128, 64}))}, "bmm_1")[0];
  b.set_outputs({v(o)});
  Planned p = plan(b, defaults());
  EXPECT_TRUE(p.groups(KernelKind::Attention).empty());
  EXPECT_EQ(p.groups(KernelKind::Matmul).size(), 2u);
}

}  // namespace
}  // namespace mybackend
