#include "runtime/graph_memory.h"

#include <ATen/ATen.h>

#include <utility>

namespace mybackend {
namespace {

// The DataPtr context of graph memory: a reference to its owner. Its
// deleter's address is the tag graph_memory_owner looks for.
struct GraphMemoryReference {
  std::shared_ptr<const GraphOutputMemory> owner;
};

void release_graph_memory_reference(void* context) {
  std::unique_ptr<GraphMemoryReference> reference(static_cast<GraphMemoryReference*>(context));
}

}  // namespace

c10::intrusive_ptr<c10::StorageImpl> graph_memory_storage(
    void* base, std::size_t nbytes, c10::Device device,
    std::shared_ptr<const GraphOutputMemory> owner) {
  auto reference = std::make_unique<GraphMemoryReference>(GraphMemoryReference{std::move(owner)});
  c10::DataPtr data(base, reference.get(), &release_graph_memory_reference, device);
  reference.release();  // the DataPtr owns it now
  return c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), nbytes,
                                               std::move(data), nullptr, false);
}

at::Tensor tensor_over(const c10::intrusive_ptr<c10::StorageImpl>& storage,
                       const at::Tensor& like) {
  at::Tensor fresh = at::empty({0}, like.options());
  fresh.set_(c10::Storage(storage), like.storage_offset(), like.sizes(), like.strides());
  return fresh;
}

std::shared_ptr<const GraphOutputMemory> graph_memory_owner(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.has_storage()) return nullptr;
  const c10::DataPtr& data = tensor.storage().data_ptr();
  if (data.get_deleter() != &release_graph_memory_reference) return nullptr;
  return static_cast<const GraphMemoryReference*>(data.get_context())->owner;
}

}  // namespace mybackend
