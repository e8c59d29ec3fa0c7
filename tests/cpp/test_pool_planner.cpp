// Stage 7: max-pool groups (Note [Pool groups] in fusion/pool_planner.h) on
// hand-built IR graphs: the prologue each group takes, how it reads each
// input, when indices are stored, and what stays ATen and why.
#include <gtest/gtest.h>

#include "capability/registry.h"
#include "fusion/pool_planner.h"
#include "pool_graphs.h"

namespace mybackend {
namespace {

Planned plan_stem(const StemOptions& options, const FusionOptions& fusion = generated_options()) {
  GraphBuilder b;
  stem_pool(b, options);
  return plan(b, fusion);
}

// A copy: callers may pass a temporary plan.
PoolGroup only_pool(const Planned& p) {
  auto groups = p.groups(KernelKind::Pool);
  EXPECT_EQ(groups.size(), 1u) << p.plan.to_string() << all_whys(p);
  if (groups.size() != 1u) throw std::runtime_error("expected one pool group");
  return *groups[0]->get<PoolGroup>();
}

TEST(PoolPlanner, ClaimsThePoolWithItsBatchNormReluPrologue) {
  Planned p = plan_stem({});
  auto groups = p.groups(KernelKind::Pool);
  ASSERT_EQ(groups.size(), 1u) << p.plan.to_string() << all_whys(p);
  // up, mul, add, down, relu, pool: everything, so nothing else is planned.
  EXPECT_EQ(groups[0]->nodes, (std::vector<NodeId>{0, 1, 2, 3, 4, 5}));
  EXPECT_TRUE(p.groups(KernelKind::Pointwise).empty()) << p.plan.to_string();
  EXPECT_TRUE(p.groups(KernelKind::AtenSequence).empty()) << p.plan.to_string();
  EXPECT_NE(groups[0]->why.find("max_pool2d (nhwc) with 5 prologue elementwise ops"),
            std::string::npos)
      << groups[0]->why;
  EXPECT_NE(groups[0]->why.find("indices not stored"), std::string::npos) << groups[0]->why;
  const PoolGroup& g = *groups[0]->get<PoolGroup>();
  EXPECT_EQ(g.inputs, (std::vector<ValueId>{0, 1, 2}));  // x, scale, shift
  EXPECT_EQ(g.spec.reads,
            (std::vector<PoolRead>{PoolRead::Window, PoolRead::Channel, PoolRead::Channel}));
  EXPECT_EQ(g.spec.layout, PoolLayout::ChannelsLast);
  EXPECT_EQ(g.spec.dtype, DType::BFloat16);
  EXPECT_EQ(g.spec.vector, 8);  // 16 bytes of bf16 channels a thread
  EXPECT_FALSE(g.spec.store_indices);
  EXPECT_FALSE(g.spec.index64);
  ASSERT_TRUE(g.spec.prologue.has_value());
  const std::string prologue = g.spec.prologue->to_string();
  EXPECT_NE(prologue.find("mul"), std::string::npos) << prologue;
  EXPECT_NE(prologue.find("relu"), std::string::npos) << prologue;
  // The general variant: one channel per thread, 64-bit offsets.
  EXPECT_EQ(g.general.vector, 1);
  EXPECT_TRUE(g.general.index64);
  EXPECT_EQ(g.general.reads, g.spec.reads);
  EXPECT_EQ(g.kernel, (std::array<std::int64_t, 2>{3, 3}));
  EXPECT_EQ(g.stride, (std::array<std::int64_t, 2>{2, 2}));
  EXPECT_EQ(g.padding, (std::array<std::int64_t, 2>{1, 1}));
  EXPECT_EQ(g.dilation, (std::array<std::int64_t, 2>{1, 1}));
  EXPECT_NE(groups[0]->spec.find("max_pool2d layout=nhwc dtype=bf16 vector=8 indices=0"),
            std::string::npos)
      << groups[0]->spec;
}

TEST(PoolPlanner, StoresIndicesOnlyWhenSomethingReadsThem) {
  StemOptions options;
  options.indices_read = true;
  Planned p = plan_stem(options);
  const PoolGroup g = only_pool(p);
  EXPECT_TRUE(g.spec.store_indices);
  EXPECT_TRUE(g.general.store_indices);
  EXPECT_NE(p.groups(KernelKind::Pool)[0]->why.find("indices stored"), std::string::npos);
  options.indices_read = false;
  EXPECT_FALSE(only_pool(plan_stem(options)).spec.store_indices);
}

TEST(PoolPlanner, ContiguousInputsPoolInNchwOneChannelPerThread) {
  StemOptions options;
  options.channels_last = false;
  options.dtype = DType::Float32;
  const PoolGroup g = only_pool(plan_stem(options));
  EXPECT_EQ(g.spec.layout, PoolLayout::Contiguous);
  EXPECT_EQ(g.spec.vector, 1);
  EXPECT_EQ(g.spec.reads,
            (std::vector<PoolRead>{PoolRead::Window, PoolRead::Channel, PoolRead::Channel}));
}

TEST(PoolPlanner, ChannelVectorsDivideTheChannelCount) {
  StemOptions options;
  options.sizes = {1, 12, 9, 9};  // 12 bf16 channels: vectors of 4
  EXPECT_EQ(only_pool(plan_stem(options)).spec.vector, 4);
  options.sizes = {1, 3, 9, 9};
  EXPECT_EQ(only_pool(plan_stem(options)).spec.vector, 1);
  options.sizes = {1, 64, 9, 9};
  options.dtype = DType::Float32;  // 16 bytes of f32
  EXPECT_EQ(only_pool(plan_stem(options)).spec.vector, 4);
}

TEST(PoolPlanner, AProducerReadElsewhereStaysOutsideThePrologue) {
  // Training: relu's result feeds its backward too, so it is stored by a
  // pointwise kernel and the pool reads it as it is.
  StemOptions options;
  options.relu_read = true;
  options.indices_read = true;
  Planned p = plan_stem(options);
  auto pools = p.groups(KernelKind::Pool);
  ASSERT_EQ(pools.size(), 1u) << p.plan.to_string();
  EXPECT_EQ(pools[0]->nodes, (std::vector<NodeId>{5}));
  const PoolGroup& g = *pools[0]->get<PoolGroup>();
  EXPECT_FALSE(g.spec.prologue.has_value());
  EXPECT_EQ(g.spec.reads, (std::vector<PoolRead>{PoolRead::Window}));
  EXPECT_TRUE(g.spec.store_indices);
  auto pointwise = p.groups(KernelKind::Pointwise);
  ASSERT_EQ(pointwise.size(), 1u) << p.plan.to_string();
  EXPECT_EQ(pointwise[0]->nodes, (std::vector<NodeId>{0, 1, 2, 3, 4}));
}

TEST(PoolPlanner, ALonePoolIsGenerated) {
  StemOptions options;
  options.batch_norm = false;
  Planned p = plan_stem(options);
  const PoolGroup g = only_pool(p);
  EXPECT_FALSE(g.spec.prologue.has_value());
  EXPECT_EQ(g.inputs, (std::vector<ValueId>{0}));
  EXPECT_NE(g.spec.to_string().find("reads=window"), std::string::npos);
}

TEST(PoolPlanner, EmptyStrideMeansTheKernelSize) {
  StemOptions options;
  options.kernel = {2, 3};
  options.stride = {};
  options.padding = {0};
  options.dilation = {2};
  const PoolGroup g = only_pool(plan_stem(options));
  EXPECT_EQ(g.kernel, (std::array<std::int64_t, 2>{2, 3}));
  EXPECT_EQ(g.stride, (std::array<std::int64_t, 2>{2, 3}));
  EXPECT_EQ(g.padding, (std::array<std::int64_t, 2>{0, 0}));
  EXPECT_EQ(g.dilation, (std::array<std::int64_t, 2>{2, 2}));
}

TEST(PoolPlanner, AStridedInputIsReadThroughItsStrides) {
  GraphBuilder b;
  TensorType t = tensor(DType::Float16, {2, 8, 6, 6});
  t.strides = {Dim(8 * 6 * 6), Dim(1), Dim(8), Dim(8 * 6)};  // H and W swapped in memory
  ValueId x = b.add_input(out(t, "x"));
  ValueId e = node1(b, "aten::relu.default", {v(x)}, t, "relu");
  auto pool = max_pool_node(b, e, tensor(DType::Float16, {2, 8, 3, 3}), {2, 2}, {2, 2}, {0});
  b.set_outputs({v(pool[0])});
  Planned p = plan(b);
  const PoolGroup g = only_pool(p);
  EXPECT_EQ(g.spec.layout, PoolLayout::Contiguous);  // the output's layout
  EXPECT_EQ(g.spec.reads, (std::vector<PoolRead>{PoolRead::Strided}));
}

TEST(PoolPlanner, RefusesAnUnbatchedInput) {
  StemOptions options;
  options.sizes = {64, 16, 16};
  options.batch_norm = false;
  Planned p = plan_stem(options);
  EXPECT_TRUE(p.groups(KernelKind::Pool).empty());
  // The pool planner's reason, not the reduction planner's.
  EXPECT_NE(all_whys(p).find("a 3-d (unbatched) input stays an ATen call"), std::string::npos)
      << all_whys(p);
}

TEST(PoolPlanner, RefusesWhatEagerRejects) {
  StemOptions options;
  options.padding = {2, 2};  // above half the 3x3 kernel
  Planned p = plan_stem(options);
  EXPECT_TRUE(p.groups(KernelKind::Pool).empty());
  EXPECT_NE(all_whys(p).find("padding above half the dilated kernel"), std::string::npos)
      << all_whys(p);
}

TEST(PoolPlanner, RefusesWhenOnlyTheIndicesAreRead) {
  GraphBuilder b;
  ValueId x = b.add_input(out(tensor(DType::Float32, {1, 4, 4, 4}), "x"));
  auto pool = max_pool_node(b, x, tensor(DType::Float32, {1, 4, 2, 2}), {2, 2}, {2, 2}, {0});
  b.set_outputs({v(pool[1])});
  Planned p = plan(b);
  EXPECT_TRUE(p.groups(KernelKind::Pool).empty());
  EXPECT_NE(all_whys(p).find("the pooled values are never read"), std::string::npos) << all_whys(p);
}

TEST(PoolPlanner, CpuPoolsAndGeneratedKernelsOffStayAten) {
  FusionOptions off = generated_options();
  off.generated_kernels = false;
  EXPECT_TRUE(plan_stem({}, off).groups(KernelKind::Pool).empty());
  GraphBuilder b;
  ValueId x = b.add_input(out(tensor(DType::Float32, {1, 4, 4, 4}, "cpu"), "x"));
  auto pool = max_pool_node(b, x, tensor(DType::Float32, {1, 4, 2, 2}, "cpu"), {2, 2}, {2, 2}, {0});
  b.set_outputs({v(pool[0])});
  Planned p = plan(b);
  EXPECT_TRUE(p.groups(KernelKind::Pool).empty());
  EXPECT_EQ(p.groups(KernelKind::AtenSequence).size(), 1u);
}

TEST(PoolPlanner, MaxPoolAndItsBackwardAreReductions) {
  const CapabilityRegistry& registry = CapabilityRegistry::builtin();
  ASSERT_NE(registry.find("aten::max_pool2d_with_indices.default"), nullptr);
  EXPECT_EQ(registry.find("aten::max_pool2d_with_indices.default")->op_class, OpClass::Reduction);
  ASSERT_NE(registry.find("aten::max_pool2d_with_indices_backward.default"), nullptr);
  EXPECT_EQ(registry.find("aten::max_pool2d_with_indices_backward.default")->op_class,
            OpClass::Reduction);
}

Planned plan_backward(const BackwardOptions& options) {
  GraphBuilder b;
  stem_pool_backward(b, options);
  return plan(b, generated_options());
}

TEST(PoolPlanner, BackwardTakesTheGradientSumAsItsPrologue) {
  Planned p = plan_backward({});
  auto groups = p.groups(KernelKind::Pool);
  ASSERT_EQ(groups.size(), 1u) << p.plan.to_string() << all_whys(p);
  EXPECT_EQ(groups[0]->nodes, (std::vector<NodeId>{0, 1}));  // sum, backward
  EXPECT_TRUE(p.groups(KernelKind::Pointwise).empty()) << p.plan.to_string();
  EXPECT_NE(groups[0]->why.find("max_pool2d_backward (nhwc) with 1 prologue elementwise ops"),
            std::string::npos)
      << groups[0]->why;
  const PoolGroup& g = *groups[0]->get<PoolGroup>();
  EXPECT_TRUE(g.spec.backward);
  EXPECT_FALSE(g.spec.store_indices);
  EXPECT_EQ(g.inputs, (std::vector<ValueId>{0, 1}));  // the two branches' gradients
  EXPECT_EQ(g.pooled, 2);                             // x: the window space
  EXPECT_EQ(g.indices, 3);
  EXPECT_EQ(g.spec.reads, (std::vector<PoolRead>{PoolRead::Window, PoolRead::Window}));
  EXPECT_EQ(g.spec.vector, 8);
  EXPECT_EQ(g.general.vector, 1);
  EXPECT_TRUE(g.general.index64);
  EXPECT_NE(groups[0]->spec.find("max_pool2d_backward layout=nhwc dtype=bf16 vector=8 index=i32"),
            std::string::npos)
      << groups[0]->spec;
}

TEST(PoolPlanner, BackwardLeavesASumReadElsewhereOutside) {
  BackwardOptions options;
  options.sum_read = true;
  options.channels_last = false;
  options.indices_channels_last = false;
  options.dtype = DType::Float32;
  Planned p = plan_backward(options);
  const PoolGroup g = only_pool(p);
  EXPECT_FALSE(g.spec.prologue.has_value());
  EXPECT_EQ(g.inputs, (std::vector<ValueId>{4}));  // the stored sum
  EXPECT_EQ(g.spec.layout, PoolLayout::Contiguous);
  EXPECT_EQ(g.spec.vector, 1);
}

TEST(PoolPlanner, BackwardRefusesIndicesInAnotherLayout) {
  BackwardOptions options;
  options.indices_channels_last = false;
  Planned p = plan_backward(options);
  EXPECT_TRUE(p.groups(KernelKind::Pool).empty()) << p.plan.to_string();
  EXPECT_NE(all_whys(p).find("the indices are not dense in the gradient's layout"),
            std::string::npos)
      << all_whys(p);
}

TEST(PoolPlanner, SpecsValidateAndPrintEveryField) {
  PoolSpec spec;
  spec.dtype = DType::BFloat16;
  spec.layout = PoolLayout::ChannelsLast;
  spec.vector = 8;
  spec.store_indices = true;
  spec.reads = {PoolRead::Window};
  EXPECT_EQ(validate(spec), "");
  EXPECT_EQ(spec.to_string(),
            "max_pool2d layout=nhwc dtype=bf16 vector=8 indices=1 index=i32 threads=256\n"
            "  reads=window\n");
  PoolSpec other = spec;
  other.store_indices = false;
  EXPECT_NE(other.hash(), spec.hash());
  other = spec;
  other.vector = 16;
  EXPECT_NE(validate(other).find("vector must be a power of two"), std::string::npos);
  other = spec;
  other.layout = PoolLayout::Contiguous;
  EXPECT_NE(validate(other).find("only channels-last"), std::string::npos);
  other = spec;
  other.dtype = DType::Int32;
  other.vector = 1;
  EXPECT_NE(validate(other).find("floating"), std::string::npos);
  other = spec;
  other.reads = {PoolRead::Window, PoolRead::Channel};
  EXPECT_NE(validate(other).find("one read mode per prologue input"), std::string::npos);
  other = spec;
  other.backward = true;
  EXPECT_NE(validate(other).find("stores none"), std::string::npos);
  other.store_indices = false;
  EXPECT_EQ(validate(other), "");
  EXPECT_EQ(other.to_string(),
            "max_pool2d_backward layout=nhwc dtype=bf16 vector=8 index=i32 threads=256\n"
            "  reads=window\n");
}

}  // namespace
}  // namespace mybackend
