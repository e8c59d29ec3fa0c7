#include "fusion/tuned_specs.h"

#include <memory>
#include <utility>

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
  for (auto& single : out->singles) {
    if (single) single = tuned(*single, tuning);  // null for a layout copy
  }
  return out;
}

// Gives `group` a tuned copy of its payload `planned` (the planned one may
// be shared: it is not edited in place).
template <class Group>
void retune(KernelGroup& group, const Group& planned, const LaunchTuning& tuning) {
  std::shared_ptr<const Group> out = tuned(planned, tuning);
  group.spec = out->spec.to_string();
  group.set(std::move(out));
}

}  // namespace

void apply_launch_tuning(FusionPlan& plan, const LaunchTuning& tuning) {
  if (tuning == LaunchTuning{}) return;
  for (PartitionPlan& partition : plan.partitions) {
    for (KernelGroup& group : partition.groups) {
      if (const auto* pointwise = group.get<PointwiseGroup>()) {
        retune(group, *pointwise, tuning);
      } else if (const auto* norm = group.get<NormGroup>()) {
        retune(group, *norm, tuning);
      } else if (const auto* casts = group.get<CastGroup>()) {
        retune(group, *casts, tuning);
      }
    }
  }
}

}  // namespace mybackend
