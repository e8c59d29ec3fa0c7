// The specs' archive functions (Note [One archive function per struct] in
// common/archive.h): a saved plan holds every group's spec (Note [Plan
// archive] in pipeline/plan_archive.h). A field added to a spec is added to
// its function here, or plans saved and loaded lose it, and
// kPlanFormatVersion is bumped.
#pragma once

#include "common/archive.h"
#include "spec/attention_spec.h"
#include "spec/conv_spec.h"
#include "spec/kernel_spec.h"
#include "spec/launch_tuning.h"
#include "spec/matmul_spec.h"
#include "spec/transpose_spec.h"

namespace mybackend {

template <class Ar>
void archive(Ar& ar, LaunchTuning& value);

// Generated kernels (spec/kernel_spec.h).
template <class Ar>
void archive(Ar& ar, TensorArg& value);
template <class Ar>
void archive(Ar& ar, PwScalar& value);
template <class Ar>
void archive(Ar& ar, PwInstr& value);
template <class Ar>
void archive(Ar& ar, PwOutput& value);
template <class Ar>
void archive(Ar& ar, PointwiseSpec& value);
template <class Ar>
void archive(Ar& ar, ReductionSpec& value);
template <class Ar>
void archive(Ar& ar, NormSpec& value);
template <class Ar>
void archive(Ar& ar, CastPair& value);
template <class Ar>
void archive(Ar& ar, CastGroupSpec& value);
template <class Ar>
void archive(Ar& ar, PoolSpec& value);
template <class Ar>
void archive(Ar& ar, TransposeSpec& value);

// Library calls.
template <class Ar>
void archive(Ar& ar, MatmulOperand& value);
template <class Ar>
void archive(Ar& ar, MatmulSpec& value);
template <class Ar>
void archive(Ar& ar, StackView& value);
template <class Ar>
void archive(Ar& ar, StackedGradient& value);
template <class Ar>
void archive(Ar& ar, GradientStack& value);
template <class Ar>
void archive(Ar& ar, AttentionSpec& value);
template <class Ar>
void archive(Ar& ar, ConvBatchNorm& value);
template <class Ar>
void archive(Ar& ar, ConvSpec& value);

}  // namespace mybackend
