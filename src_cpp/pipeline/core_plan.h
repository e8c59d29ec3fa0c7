// What the planning stages (capability, partition, fusion) read and decide,
// apart from the rest of a compile: a saved plan holds both (Note [Plan
// archive] in pipeline/plan_archive.h). Torch-free, unlike pipeline.h.
#pragma once

#include <vector>

#include "capability/registry.h"
#include "fusion/fusion_plan.h"
#include "partition/partitioner.h"

namespace mybackend {

// The options the planning stages read.
struct PlanningOptions {
  CapabilityOptions capability;
  PartitionerOptions partitioner;
  FusionOptions fusion;
};

// What they decide: everything the codegen and runtime stages need.
struct CorePlan {
  std::vector<SupportDecision> decisions;  // per node
  PartitionResult partitions;
  FusionPlan fusion;
};

}  // namespace mybackend
