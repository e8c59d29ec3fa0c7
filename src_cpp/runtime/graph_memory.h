// Tensors over a captured CUDA graph's output memory.
//
// Note [Borrowed graph memory]
// A replayed graph writes its outputs to the same addresses every time. In
// training, the forward's outputs are mostly the activations saved for the
// backward, so the backward graph receives tensors that live in the
// forward graph's memory, at the same addresses, step after step. Copying
// them into buffers of the backward's own (as any other non-static input
// is) would move every activation once more per step and hold it twice.
// Instead each tensor the runner hands out carries a tag in its DataPtr
// (its context owns a reference to the graph's output memory), and another
// graph that receives a tagged tensor captures it at its own address, keeps
// the memory alive through the tag's owner, and puts the address in its
// signature; a replay then reads it in place. The tag is lost when the
// runner moves a still-held output to memory of its own before its next
// replay (set_data_ptr_noswap replaces the DataPtr), so a tagged tensor
// always holds the latest replay's values at the address a borrowing graph
// was captured with.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/StorageImpl.h>

#include <memory>
#include <vector>

namespace mybackend {

// The tensors a captured graph writes its outputs to: their memory lives
// as long as the graph, every tensor handed out over it, and every graph
// that borrows it.
struct GraphOutputMemory {
  std::vector<c10::IValue> outputs;
};

// A storage over `base` (of `nbytes`, on `device`) tagged as graph memory
// owned by `owner`.
c10::intrusive_ptr<c10::StorageImpl> graph_memory_storage(
    void* base, std::size_t nbytes, c10::Device device,
    std::shared_ptr<const GraphOutputMemory> owner);

// A tensor with `like`'s sizes, strides, offset and dtype over `storage`.
at::Tensor tensor_over(const c10::intrusive_ptr<c10::StorageImpl>& storage, const at::Tensor& like);

// The owner of the graph memory `tensor` lives in, or null when it is not
// graph memory (any other tensor, or an output moved to memory of its own).
std::shared_ptr<const GraphOutputMemory> graph_memory_owner(const at::Tensor& tensor);

}  // namespace mybackend
