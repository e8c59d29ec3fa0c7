#include "fusion/tuned_specs.h"

#include <memory>

namespace mybackend {
namespace {

void tune(PointwiseSpec& spec, const LaunchTuning& tuning) {
  spec.tuning = tuning;
  spec.threads = tuning.pw_block;
}

std::shared_ptr<const PointwiseGroup> tuned(const PointwiseGroup& group,
                                            const LaunchTuning& tuning) {
  auto out = std::make_shared<PointwiseGroup>(group);
  tune(out->spec, tuning);
  tune(out->general, tuning);
  return out;
}

std::shared_ptr<const NormGroup> tuned(const NormGroup& group, const LaunchTuning& tuning) {
  auto out = std::make_shared<NormGroup>(group);
  for (NormSpec* spec : {&out->spec, &out->general}) {
    spec->tuning = tuning;
    spec->threads = tuning.row_block(is_softmax_forward(spec->kind));
  }
  return out;
}

std::shared_ptr<const CastGroup> tuned(const CastGroup& group, const LaunchTuning& tuning) {
  auto out = std::make_shared<CastGroup>(group);
  out->spec.tuning = tuning;
  out->spec.threads = tuning.pw_block;
  for (auto& single : out->singles) single = tuned(*single, tuning);
  return out;
}

}  // namespace

void apply_launch_tuning(FusionPlan& plan, const LaunchTuning& tuning) {
  if (tuning == LaunchTuning{}) return;
  for (PartitionPlan& partition : plan.partitions) {
    for (KernelGroup& group : partition.groups) {
      if (group.kind == KernelKind::Pointwise && group.pointwise) {
        group.pointwise = tuned(*group.pointwise, tuning);
        group.spec = group.pointwise->spec.to_string();
      } else if (group.kind == KernelKind::Norm && group.norm) {
        group.norm = tuned(*group.norm, tuning);
        group.spec = group.norm->spec.to_string();
      } else if (group.kind == KernelKind::CastGroup && group.casts) {
        group.casts = tuned(*group.casts, tuning);
        group.spec = group.casts->spec.to_string();
      }
    }
  }
}

}  // namespace mybackend
