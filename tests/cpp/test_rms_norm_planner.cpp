// Stage 7: the RMS-norm chains of Llama/Mistral/T5-style models and of
// F.rms_norm, in fp32 and 16 bits, as one norm group (Note [RMS-norm chain],
// Note [RMS-norm rounding] in src_cpp/fusion/norm_lowering.h), and the
// chains that are not one.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "fusion/reduction_planner.h"
#include "rms_norm_graphs.h"

namespace mybackend {
namespace {

const NormGroup* only_norm(const Planned& p) {
  auto norms = p.groups(KernelKind::Norm);
  if (norms.size() != 1) return nullptr;
  return norms[0]->get<NormGroup>();
}

std::string label(const RmsChain& c) {
  const char* order = c.order == RmsOrder::Torch   ? "torch"
                      : c.order == RmsOrder::Llama ? "llama"
                                                   : "t5";
  return std::string(order) + " " + std::string(dtype_short_name(c.dtype)) +
         (c.weight ? " weight" : "") + (c.split_casts ? " split" : "") +
         (c.keep_rstd ? " keep_rstd" : "");
}

// The whole graph is one RmsNormForward group reading x (and the weight),
// storing the result (and rsqrt when kept).
void expect_whole_chain(const RmsChain& c) {
  SCOPED_TRACE(label(c));
  Planned p = plan_chain(c);
  const NormGroup* g = only_norm(p);
  ASSERT_NE(g, nullptr) << p.plan.to_string();
  auto norms = p.groups(KernelKind::Norm);
  EXPECT_EQ(norms[0]->nodes.size(), p.graph.nodes().size()) << p.plan.to_string();
  EXPECT_EQ(p.plan.partitions.size(), 1u);
  EXPECT_EQ(p.plan.partitions[0].groups.size(), 1u) << p.plan.to_string();
  EXPECT_EQ(g->spec.kind, NormKind::RmsNormForward);
  EXPECT_EQ(g->spec.dtype, c.dtype);
  EXPECT_EQ(g->spec.out_dtype, c.dtype);
  EXPECT_EQ(g->spec.has_weight, c.weight);
  // Note [RMS-norm rounding]: HF Llama's and T5's cast back before the
  // weight multiply rounds in 16 bits; torch's order rounds once.
  const bool rounds = c.weight && c.order != RmsOrder::Torch && c.dtype != DType::Float32;
  EXPECT_EQ(g->spec.round_before_weight, rounds) << g->spec.to_string();
  EXPECT_EQ(g->general.round_before_weight, rounds);
  EXPECT_EQ(g->spec.save_stats, c.keep_rstd);
  EXPECT_EQ(g->normalized_dims, 1);
  EXPECT_NEAR(g->eps, 1e-6, 1e-12);
  ASSERT_FALSE(g->inputs.empty());
  EXPECT_EQ(g->inputs[0], (std::pair<std::string, ValueId>{"x", p.graph.inputs()[0]}));
  EXPECT_EQ(g->rows_of, p.graph.inputs()[0]);
  EXPECT_EQ(g->inputs.size(), c.weight ? 2u : 1u);
  if (c.weight) {
    EXPECT_EQ(g->inputs[1].first, "weight");
  }
  EXPECT_EQ(g->outputs.size(), c.keep_rstd ? 2u : 1u);
  EXPECT_EQ(g->outputs[0].first, "y");
}

TEST(RmsNormPlanner, EveryOrderIsOneNormKernel) {
  for (RmsOrder order : {RmsOrder::Torch, RmsOrder::Llama, RmsOrder::T5}) {
    for (DType dtype : {DType::BFloat16, DType::Float16, DType::Float32}) {
      for (bool weight : {true, false}) {
        for (bool keep_rstd : {false, true}) {
          RmsChain c;
          c.order = order;
          c.dtype = dtype;
          c.weight = weight;
          c.keep_rstd = keep_rstd;
          expect_whole_chain(c);
        }
      }
    }
  }
}

// A graph traced without the widening_casts pass: one cast of x read by
// both the square and the normalising mul.
TEST(RmsNormPlanner, OneSharedUpcastOfX) {
  for (RmsOrder order : {RmsOrder::Torch, RmsOrder::Llama}) {
    RmsChain c;
    c.order = order;
    c.split_casts = false;
    expect_whole_chain(c);
  }
}

TEST(RmsNormPlanner, TheWeightsProductInSixteenBitsRoundsItsFactor) {
  RmsChain c;  // HF Llama in bf16
  Planned p = plan_chain(c);
  const NormGroup* g = only_norm(p);
  ASSERT_NE(g, nullptr) << p.plan.to_string();
  EXPECT_NE(g->spec.to_string().find("round_before_weight=1"), std::string::npos)
      << g->spec.to_string();
  EXPECT_NE(p.groups(KernelKind::Norm)[0]->why.find("replaces 9 ATen ops"), std::string::npos)
      << p.groups(KernelKind::Norm)[0]->why;
}

// The norm covers all but the weight multiply, which runs apart.
void expect_weight_left_out(const RmsChain& c) {
  Planned p = plan_chain(c);
  const NormGroup* g = only_norm(p);
  ASSERT_NE(g, nullptr) << p.plan.to_string();
  EXPECT_FALSE(g->spec.has_weight);
  EXPECT_FALSE(g->spec.round_before_weight);
  EXPECT_EQ(p.groups(KernelKind::Norm)[0]->nodes.size(), p.graph.nodes().size() - 1);
}

// An fp32 weight after the cast to bf16 makes an fp32 product, not x's
// dtype: the norm ends at the cast, the product runs apart.
TEST(RmsNormPlanner, AWeightOfAnotherDtypeStaysOutside) {
  for (RmsOrder order : {RmsOrder::Llama, RmsOrder::T5}) {
    SCOPED_TRACE(static_cast<int>(order));
    RmsChain c;
    c.order = order;
    c.weight_dtype = DType::Float32;
    expect_weight_left_out(c);
  }
}

// A [1] weight broadcasts over the columns: no per-column weight.
TEST(RmsNormPlanner, ABroadcastWeightIsNoWeight) {
  RmsChain c;
  c.weight_sizes = {1};
  expect_weight_left_out(c);
  c.order = RmsOrder::Torch;  // the product before the cast: the chain ends in f32
  Planned q = plan_chain(c);
  EXPECT_TRUE(q.groups(KernelKind::Norm).empty()) << q.plan.to_string();
}

// The square's cast of x returned too and shared with the mul: the norm
// reads x and computes the cast as its prologue, storing the f32 upcast for
// its other reader (Note [A norm prologue read elsewhere]); the f32 chain's
// cast back to bf16 is stored by the norm (Note [Norm outputs in 16 bits]).
TEST(RmsNormPlanner, AnUpcastReadElsewhereIsComputedAndStoredByTheNorm) {
  RmsChain c;
  c.order = RmsOrder::Torch;
  c.split_casts = false;
  c.upcast_returned = true;
  Planned p = plan_chain(c);
  const NormGroup* g = only_norm(p);
  ASSERT_NE(g, nullptr) << p.plan.to_string();
  EXPECT_EQ(g->spec.dtype, DType::Float32);
  EXPECT_EQ(g->spec.out_dtype, DType::BFloat16);
  EXPECT_FALSE(g->spec.round_before_weight);
  EXPECT_TRUE(g->spec.has_weight);
  const ValueId upcast = p.graph.node(0).outputs[0];
  EXPECT_TRUE(g->spec.store_x);
  EXPECT_EQ(g->inputs.back(),
            (std::pair<std::string, ValueId>{"in0", p.graph.node(0).args[0].value}));
  EXPECT_NE(std::find(g->outputs.begin(), g->outputs.end(),
                      std::pair<std::string, ValueId>{"xout", upcast}),
            g->outputs.end());
}

// Not an RMS norm, or not one the kernel computes as the chain does: no
// norm group at all.
TEST(RmsNormPlanner, ChainsThatAreNoRmsNormStayApart) {
  using Change = std::function<void(RmsChain&)>;
  const std::vector<std::pair<const char*, Change>> cases = {
      {"x * rsqrt read elsewhere", [](RmsChain& c) { c.scaled_returned = true; }},
      {"torch order: x * rsqrt read elsewhere",
       [](RmsChain& c) {
         c.order = RmsOrder::Torch;
         c.scaled_returned = true;
       }},
      // Split casts: the square's copy is returned, the mul reads its own.
      {"the square's upcast read elsewhere", [](RmsChain& c) { c.upcast_returned = true; }},
      {"mean over a non-trailing dim", [](RmsChain& c) { c.mean_dim = 1; }},
      {"mean without keepdim", [](RmsChain& c) { c.keepdim = false; }},
      {"the mul's x cast to another dtype", [](RmsChain& c) { c.scale_cast = DType::Float16; }},
      {"the mean cast to 16 bits before + eps", [](RmsChain& c) { c.mean_to_16_bits = true; }},
      {"torch order: cast back to another dtype than x's",
       [](RmsChain& c) {
         c.order = RmsOrder::Torch;
         c.result_cast = DType::Float16;
       }},
      // HF order, bf16 x, an f16 result (and weight): the result is not x's dtype.
      {"llama order: cast back to another dtype than x's",
       [](RmsChain& c) {
         c.result_cast = DType::Float16;
         c.weight_dtype = DType::Float16;
       }},
  };
  for (const auto& [what, change] : cases) {
    SCOPED_TRACE(what);
    RmsChain c;
    change(c);
    Planned p = plan_chain(c);
    for (const KernelGroup* g : p.groups(KernelKind::Norm)) {
      ADD_FAILURE() << "planned " << g->spec << " over " << g->nodes.size() << " nodes\n"
                    << p.plan.to_string();
    }
  }
}

}  // namespace
}  // namespace mybackend
