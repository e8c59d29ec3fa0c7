#include "fusion/fusion_plan_archive.h"

#include <memory>
#include <string>

namespace mybackend {

template <class Ar>
void archive(Ar& ar, PointwiseGroup& g) {
  fields(ar, g.spec, g.general);
  archive_ids(ar, g.inputs, IdSpace::Value);
  archive_ids(ar, g.outputs, IdSpace::Value);
  fields(ar, g.order, g.coord_dims);
}

template <class Ar>
void archive(Ar& ar, ReductionGroup& g) {
  fields(ar, g.spec, g.general);
  ar.id(g.reduced, IdSpace::Value);
  ar.id(g.result, IdSpace::Value);
  fields(ar, g.reduce_begin, g.reduce_end, g.in_order, g.out_order);
  for (std::vector<ValueId>* ids :
       {&g.inputs, &g.epilogue_inputs, &g.outputs, &g.row_inputs, &g.row_outputs})
    archive_ids(ar, *ids, IdSpace::Value);
}

// Kernel parameter name -> value.
template <class Ar>
void archive_named_values(Ar& ar, std::vector<std::pair<std::string, ValueId>>& values) {
  const std::size_t count = ar.count(values.size());
  if constexpr (Ar::kLoading) values.resize(count);
  for (auto& [name, value] : values) {
    fields(ar, name);
    ar.id(value, IdSpace::Value);
  }
}

template <class Ar>
void archive(Ar& ar, NormGroup& g) {
  fields(ar, g.spec, g.general, g.normalized_dims);
  ar.id(g.rows_of, IdSpace::Value);
  fields(ar, g.eps, g.momentum, g.ignore_index);
  archive_named_values(ar, g.inputs);
  archive_named_values(ar, g.outputs);
}

template <class Ar>
void archive(Ar& ar, CastGroup& g) {
  fields(ar, g.spec);
  archive_ids(ar, g.inputs, IdSpace::Value);
  archive_ids(ar, g.outputs, IdSpace::Value);
  fields(ar, g.pairs, g.singles, g.layout_copies);
}

template <class Ar>
void archive(Ar& ar, PoolGroup& g) {
  fields(ar, g.spec, g.general);
  for (ValueId* id : {&g.pooled, &g.output, &g.indices}) ar.id(*id, IdSpace::Value);
  archive_ids(ar, g.inputs, IdSpace::Value);
  fields(ar, g.kernel, g.stride, g.padding, g.dilation);
}

template <class Ar>
void archive(Ar& ar, TransposeGroup& g) {
  fields(ar, g.spec);
  ar.id(g.input, IdSpace::Value);
  ar.id(g.output, IdSpace::Value);
  fields(ar, g.batch_dims, g.a_dims, g.b_dims);
}

namespace {

// The payload of alternative `index` and above: the one `kind` names.
template <std::size_t index = 1, class Ar>
void archive_payload(Ar& ar, KernelGroup& group, std::size_t kind) {
  if constexpr (index < std::variant_size_v<KernelPayload>) {
    if (kind != index) return archive_payload<index + 1>(ar, group, kind);
    using Payload = PayloadStruct<index>;
    if constexpr (Ar::kLoading) {
      auto payload = std::make_shared<Payload>();
      archive(ar, *payload);
      group.set(std::move(payload));
    } else {
      archive(ar, const_cast<Payload&>(*group.get<Payload>()));  // the writer only reads it
    }
  }
}

}  // namespace

template <class Ar>
void archive(Ar& ar, KernelGroup& g) {
  archive_ids(ar, g.nodes, IdSpace::Node);
  fields(ar, g.why, g.spec);
  auto kind = static_cast<std::uint8_t>(kind_index(g.kind()));
  ar.below(kind, kKernelKindCount, "kernel kind");
  archive_payload(ar, g, kind);
}

template <class Ar>
void archive(Ar& ar, PartitionPlan& p) {
  fields(ar, p.partition, p.groups);
}

template <class Ar>
void archive(Ar& ar, FusionPlan& plan) {
  fields(ar, plan.partitions);
}

template <class Ar>
void archive(Ar& ar, FusionOptions& o) {
  fields(ar, o.generated_kernels, o.min_pointwise_nodes, o.matmul, o.autotune, o.attention,
         o.attention_beyond_cudnn_ops, o.conv, o.concatenations, o.row_epilogues, o.tuning);
}

MB_ARCHIVE_BOTH_WAYS(PointwiseGroup);
MB_ARCHIVE_BOTH_WAYS(ReductionGroup);
MB_ARCHIVE_BOTH_WAYS(NormGroup);
MB_ARCHIVE_BOTH_WAYS(CastGroup);
MB_ARCHIVE_BOTH_WAYS(PoolGroup);
MB_ARCHIVE_BOTH_WAYS(TransposeGroup);
MB_ARCHIVE_BOTH_WAYS(KernelGroup);
MB_ARCHIVE_BOTH_WAYS(PartitionPlan);
MB_ARCHIVE_BOTH_WAYS(FusionPlan);
MB_ARCHIVE_BOTH_WAYS(FusionOptions);

}  // namespace mybackend
