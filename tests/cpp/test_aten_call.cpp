// Stage 9 (runtime): how graph arguments become the IValues of a boxed ATen
// call. Needs torch (the runtime library), so it builds as one skipped test
// where the runtime is not part of the build.
#include <gtest/gtest.h>

#ifdef MYBACKEND_WITH_CUDA

#include <ATen/ATen.h>
#include <ATen/core/jit_type.h>

#include "ir/graph.h"
#include "runtime/aten_call.h"

namespace mybackend {
namespace {

// aot_autograd records an undefined tensor (cuDNN attention backward's
// attn_bias) as None; a non-optional Tensor parameter must get an undefined
// Tensor, which is what the op's unboxed kernel accepts.
TEST(ArgumentToIValue, NoneForTensorParameterIsAnUndefinedTensor) {
  const c10::IValue value = argument_to_ivalue(Argument::none(), c10::TensorType::get(), {});
  ASSERT_TRUE(value.isTensor());
  EXPECT_FALSE(value.toTensor().defined());
}

TEST(ArgumentToIValue, NoneForOptionalTensorStaysNone) {
  const auto optional = c10::OptionalType::create(c10::TensorType::get());
  EXPECT_TRUE(argument_to_ivalue(Argument::none(), optional, {}).isNone());
}

TEST(ArgumentToIValue, NumbersForTensorParametersAreWrapped) {
  const c10::IValue value = argument_to_ivalue(Argument::of_float(2.5), c10::TensorType::get(), {});
  ASSERT_TRUE(value.isTensor());
  EXPECT_EQ(value.toTensor().dim(), 0);
  EXPECT_DOUBLE_EQ(value.toTensor().item<double>(), 2.5);
}

TEST(ArgumentToIValue, IntsForFloatParametersBecomeDoubles) {
  const c10::IValue value = argument_to_ivalue(Argument::of_int(1), c10::FloatType::get(), {});
  ASSERT_TRUE(value.isDouble());
  EXPECT_DOUBLE_EQ(value.toDouble(), 1.0);
}

// Note [Batched input mutations] (mybackend/passes/mutations.py) hands
// the running statistics to _foreach_copy_ as a list: the inputs it writes
// must still count as mutated, so that CUDA graphs keep them static.
TEST(MutatedInputs, ElementsOfAWrittenListArgumentAreMutated) {
  GraphBuilder b;
  TensorType t;
  t.dtype = DType::Float32;
  t.device = Device::parse("cpu");
  t.sizes = {Dim(4)};
  t.strides = {Dim(1)};
  const GraphBuilder::OutputSpec spec{ValueKind::Tensor, t, std::nullopt, ""};
  const ValueId read_only = b.add_input(spec);
  const ValueId first = b.add_input(spec);
  const ValueId second = b.add_input(spec);
  const ValueId doubled =
      b.add_node(NodeKind::Aten, "aten::add.Tensor",
                 {Argument::of_value(read_only), Argument::of_value(read_only)}, {spec}, "add")[0];
  b.add_node(NodeKind::Aten, "aten::_foreach_copy_.default",
             {Argument::of_list({Argument::of_value(first), Argument::of_value(second)}),
              Argument::of_list({Argument::of_value(doubled), Argument::of_value(read_only)}),
              Argument::of_bool(false)},
             {}, "foreach_copy");
  b.set_outputs({Argument::of_value(doubled)});
  const Graph graph = b.build();
  EXPECT_EQ(mutated_inputs(graph), (std::vector<int>{1, 2}));
}

}  // namespace
}  // namespace mybackend

#else

TEST(ArgumentToIValue, NeedsTheRuntimeLibrary) { GTEST_SKIP() << "built without the runtime"; }

#endif
