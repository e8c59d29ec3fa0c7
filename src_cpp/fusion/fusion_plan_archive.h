// The fusion plan's archive functions (Note [One archive function per
// struct] in common/archive.h): every group with its payload, for a saved
// plan (Note [Plan archive] in pipeline/plan_archive.h).
#pragma once

#include <utility>
#include <variant>

#include "common/archive.h"
#include "fusion/fusion_plan.h"
#include "spec/spec_archive.h"

namespace mybackend {

template <class Ar>
void archive(Ar& ar, PointwiseGroup& value);
template <class Ar>
void archive(Ar& ar, ReductionGroup& value);
template <class Ar>
void archive(Ar& ar, NormGroup& value);
template <class Ar>
void archive(Ar& ar, CastGroup& value);
template <class Ar>
void archive(Ar& ar, PoolGroup& value);
template <class Ar>
void archive(Ar& ar, TransposeGroup& value);
// Its kind, then its payload (Note [One payload per group]).
template <class Ar>
void archive(Ar& ar, KernelGroup& value);
template <class Ar>
void archive(Ar& ar, PartitionPlan& value);
template <class Ar>
void archive(Ar& ar, FusionPlan& value);
template <class Ar>
void archive(Ar& ar, FusionOptions& value);

// What a payload alternative holds: PointwiseGroup for shared_ptr<const PointwiseGroup>.
template <std::size_t index>
using PayloadStruct =
    std::remove_const_t<typename std::variant_alternative_t<index, KernelPayload>::element_type>;

template <std::size_t... index>
constexpr bool payloads_archivable(std::index_sequence<index...>) {
  return (is_archivable<PayloadStruct<index + 1>>::value && ...);  // 0 is AtenSequence's nothing
}

// A new kind's payload (Note [One payload per group]) needs its archive
// function above, or a saved plan could not hold its groups.
static_assert(
    payloads_archivable(std::make_index_sequence<std::variant_size_v<KernelPayload> - 1>{}),
    "every KernelPayload alternative needs an archive function "
    "(fusion/fusion_plan_archive.h, spec/spec_archive.h)");

}  // namespace mybackend
