#include "runtime/cuda_graph_runner.h"

#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>

#include "common/error.h"
#include "runtime/graph_memory.h"

#ifdef MYBACKEND_WITH_CUDA
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace mybackend {
namespace {

// Ops that read device memory on the host or size outputs by data: a graph
// holding one cannot be replayed.
constexpr const char* kHostSynchronisingOps[] = {
    "aten::_local_scalar_dense.default", "aten::item.default",     "aten::nonzero.default",
    "aten::masked_select.default",       "aten::_unique2.default", "aten::unique_dim.default",
    "aten::unique_consecutive.default",  "aten::equal.default",    "aten::is_nonzero.default",
    "aten::repeat_interleave.Tensor",    "aten::bincount.default", "aten::histc.default",
};

}  // namespace

std::string capture_blocker(const Graph& graph) {
  for (const Node& node : graph.nodes()) {
    if (node.kind == NodeKind::Python) {
      return "node " + node.name + " (" + node.op + ") runs in Python";
    }
    for (const char* op : kHostSynchronisingOps) {
      if (node.op == op)
        return "node " + node.name + " (" + node.op + ") synchronises with the host";
    }
  }
  bool any_cuda = false;
  for (const Value& value : graph.values()) {
    if (value.kind != ValueKind::Tensor) continue;
    if (value.tensor.device.type != DeviceType::CUDA) {
      return "tensor %" + std::to_string(value.id) + " (" + value.name + ") is on " +
             value.tensor.device.str() + ", not on a CUDA device";
    }
    any_cuda = true;
  }
  return any_cuda ? "" : "the graph holds no CUDA tensor";
}

#ifdef MYBACKEND_WITH_CUDA

namespace {

#define MB_CUDA_CHECK(call)                                                           \
  do {                                                                                \
    cudaError_t status_ = (call);                                                     \
    MB_CHECK(status_ == cudaSuccess, #call " failed: ", cudaGetErrorString(status_)); \
  } while (0)

// Words that tell one input signature from another (Note [Signature words]);
// the tags keep the fields of different inputs from lining up by chance.
using Signature = std::vector<std::int64_t>;
constexpr std::int64_t kTensorTag = std::int64_t{1} << 40;
constexpr std::int64_t kIntTag = std::int64_t{2} << 40;
constexpr std::int64_t kOtherTag = std::int64_t{3} << 40;
constexpr std::int64_t kStaticAddressTag = std::int64_t{4} << 40;
constexpr std::int64_t kBorrowedAddressTag = std::int64_t{5} << 40;
constexpr std::int64_t kDoubleTag = std::int64_t{6} << 40;

struct CapturedGraph {
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  // Owned buffers, the caller's static tensors, or (borrowed) tensors over
  // another graph's output memory (Note [Borrowed graph memory]).
  std::vector<c10::IValue> inputs;
  std::vector<bool> borrowed;
  std::shared_ptr<GraphOutputMemory> outputs = std::make_shared<GraphOutputMemory>();
  std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> handed_out;
  // Per input: whether an output aliases its buffer (hand_out then gives
  // back a view of the caller's own input, so replay must keep it).
  std::vector<bool> aliased_by_output;
};

// Gives a storage the caller still holds memory of its own (Note [CUDA-graph
// rules]); its bytes.
std::size_t move_to_own_memory(c10::StorageImpl& storage) {
  std::size_t bytes = storage.nbytes();
  c10::DataPtr fresh = c10::cuda::CUDACachingAllocator::get()->allocate(bytes);
  MB_CUDA_CHECK(cudaMemcpyAsync(fresh.get(), storage.data(), bytes, cudaMemcpyDeviceToDevice,
                                at::cuda::getCurrentCUDAStream()));
  storage.set_data_ptr_noswap(std::move(fresh));
  return bytes;
}

// Note [No capture over host tensors]
// capture_blocker() reads the devices the IR was traced with, and FakeTensor
// propagation places some values on the device that a kernel puts on the
// host: the dropout RNG state of memory-efficient attention,
// whose forward returns it on the host unless it runs under a capture (Note
// [RNG state follows the capture] in rng_state.h). A captured graph would
// bake a host address into device work, or copy pageable memory inside the
// capture: a call with a host tensor among its inputs runs uncaptured (the
// signature, built on every call anyway, tells).

// Whether an input lives in a captured graph's output memory (Note [Borrowed
// graph memory]).
bool is_graph_memory(const c10::IValue& input) {
  return input.isTensor() && graph_memory_owner(input.toTensor()) != nullptr;
}

}  // namespace

struct CudaGraphRunner::Impl {
  Impl(const Executor& e, CudaGraphPolicy p) : executor(e), policy(std::move(p)) {}
  const Executor& executor;
  CudaGraphPolicy policy;
  std::string blocker;
  std::mutex mutex;
  std::map<Signature, int> calls_by_signature;
  std::map<Signature, std::unique_ptr<CapturedGraph>> graphs;
  std::map<Signature, std::string> failures;
  std::atomic<std::int64_t> captures{0}, replays{0};
  std::atomic<std::int64_t> input_bytes_copied{0}, output_bytes_moved{0};

  std::vector<bool> static_mask;  // by input position, from policy.static_inputs

  // Asked for every input of every call: a lookup, not a search of the list.
  bool is_static(std::size_t i) const { return i < static_mask.size() && static_mask[i]; }

  // Note [Signature words]: a replay's signature is built on every call
  // (ResNet-50's inference graph has about 270 tensor inputs), so it is a
  // flat list of words compared exactly, not formatted text.
  // `holds_host_tensor`: whether an input tensor is not on a CUDA device
  // (Note [No capture over host tensors]).
  Signature signature(const std::vector<c10::IValue>& inputs, bool* holds_host_tensor) const {
    *holds_host_tensor = false;
    Signature key;
    key.reserve(inputs.size() * 12);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const c10::IValue& v = inputs[i];
      if (v.isTensor()) {
        const at::Tensor& t = v.toTensor();
        *holds_host_tensor |= !t.is_cuda();
        key.push_back(kTensorTag | static_cast<std::int64_t>(t.scalar_type()));
        key.push_back(static_cast<std::int64_t>(t.device().type()) << 16 | t.device().index());
        key.push_back(t.dim());
        for (std::int64_t size : t.sizes()) key.push_back(size);
        for (std::int64_t stride : t.strides()) key.push_back(stride);
        if (is_static(i)) {
          key.push_back(kStaticAddressTag);
          key.push_back(reinterpret_cast<std::intptr_t>(t.data_ptr()));
        } else if (is_graph_memory(v)) {
          key.push_back(kBorrowedAddressTag);
          key.push_back(reinterpret_cast<std::intptr_t>(t.data_ptr()));
        }
      } else if (v.isInt()) {
        key.push_back(kIntTag);
        key.push_back(v.toInt());
      } else if (v.isDouble()) {
        // Scalars are baked into the captured kernels: their value is part of the key.
        double value = v.toDouble();
        std::int64_t bits = 0;
        std::memcpy(&bits, &value, sizeof bits);
        key.push_back(kDoubleTag);
        key.push_back(bits);
      } else if (v.isBool()) {
        key.push_back(kIntTag);
        key.push_back(v.toBool() ? 1 : 0);
      } else {
        key.push_back(kOtherTag);
        key.push_back(static_cast<std::int64_t>(std::hash<std::string>{}(v.tagKind())));
      }
    }
    return key;
  }

  std::vector<c10::IValue> run(std::vector<c10::IValue> inputs) {
    std::lock_guard<std::mutex> lock(mutex);
    bool holds_host_tensor = false;
    Signature key = signature(inputs, &holds_host_tensor);
    if (holds_host_tensor) return executor.run(std::move(inputs));
    if (auto found = graphs.find(key); found != graphs.end()) return replay(*found->second, inputs);
    if (failures.count(key) || ++calls_by_signature[key] < 2 ||
        static_cast<int>(graphs.size()) >= policy.max_graphs) {
      return executor.run(std::move(inputs));  // the first call warms up handles and caches
    }
    return capture(key, inputs);
  }

  std::vector<c10::IValue> capture(const Signature& key, const std::vector<c10::IValue>& inputs);
  std::vector<c10::IValue> replay(CapturedGraph& captured, std::vector<c10::IValue>& inputs);
  std::vector<c10::IValue> hand_out(CapturedGraph& captured,
                                    const std::vector<c10::IValue>& inputs);
};

std::vector<c10::IValue> CudaGraphRunner::Impl::capture(const Signature& key,
                                                        const std::vector<c10::IValue>& inputs) {
  auto captured = std::make_unique<CapturedGraph>();
  captured->borrowed.assign(inputs.size(), false);
  c10::Device device = at::kCUDA;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].isTensor() || is_static(i)) {
      captured->inputs.push_back(inputs[i]);
      continue;
    }
    const at::Tensor& t = inputs[i].toTensor();
    device = t.device();
    if (auto owner = graph_memory_owner(t)) {
      // Our own tensor over the same memory: the caller's would be moved
      // away by its graph's next replay if we held it.
      captured->inputs.emplace_back(
          tensor_over(graph_memory_storage(const_cast<void*>(t.storage().data()),
                                           t.storage().nbytes(), t.device(), std::move(owner)),
                      t));
      captured->borrowed[i] = true;
      continue;
    }
    at::Tensor buffer = at::empty_strided(t.sizes(), t.strides(), t.options());
    buffer.copy_(t);
    captured->inputs.emplace_back(buffer);
  }
  c10::cuda::CUDAGuard guard(device);
  at::cuda::CUDAStream caller = at::cuda::getCurrentCUDAStream();
  at::cuda::CUDAStream side = at::cuda::getStreamFromPool(false, device.index());
  at::cuda::CUDAEvent ready;
  ready.record(caller);
  ready.block(side);
  captured->graph = std::make_unique<at::cuda::CUDAGraph>();
  std::string error;
  {
    c10::cuda::CUDAStreamGuard on_side(side);
    try {
      captured->graph->capture_begin();
      captured->outputs->outputs = executor.run(captured->inputs);
      captured->graph->capture_end();
    } catch (const std::exception& e) {
      error = e.what();
      cudaGraph_t partial = nullptr;
      if (cudaStreamEndCapture(side.stream(), &partial) == cudaSuccess && partial) {
        cudaGraphDestroy(partial);
      }
      (void)cudaGetLastError();  // capture errors are not sticky; clear the record
    }
  }
  at::cuda::CUDAEvent done;
  done.record(side);
  done.block(caller);
  if (!error.empty()) {
    failures[key] = error.substr(0, 300);
    return executor.run(inputs);
  }
  captures.fetch_add(1);
  captured->aliased_by_output.assign(inputs.size(), false);
  for (const c10::IValue& output : captured->outputs->outputs) {
    if (!output.isTensor()) continue;
    const void* base = output.toTensor().storage().data();
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (captured->inputs[i].isTensor() && captured->inputs[i].toTensor().storage().data() == base)
        captured->aliased_by_output[i] = true;
    }
  }
  CapturedGraph& stored = *captured;
  graphs[key] = std::move(captured);
  // Capture recorded the work without running it: run it once now.
  stored.graph->replay();
  replays.fetch_add(1);
  return hand_out(stored, inputs);
}

// The caller's copied inputs are dropped once copied (the copy is ordered
// on the stream before any reuse of their memory), so they do not sit
// through the replay and the re-homing of earlier outputs (Note [Input
// ownership] in recovery_window.h).
//
// Note [Batched input copies]
// The inputs to copy go in one `_foreach_copy_`: one dispatch and, for
// inputs of one dtype, one multi-tensor launch, where a `copy_` per input
// cost several microseconds of host time each (the ResNet-50 conv4_x block
// with its weights as inputs, seven copies, replayed slower than it ran
// uncaptured). Each pair has the signature's sizes, strides and dtype.
std::vector<c10::IValue> CudaGraphRunner::Impl::replay(CapturedGraph& captured,
                                                       std::vector<c10::IValue>& inputs) {
  std::vector<at::Tensor> buffers, given;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].isTensor() || is_static(i)) continue;
    // A borrowed input is at its captured address: the signature says so.
    if (!captured.borrowed[i]) {
      const at::Tensor& buffer = captured.inputs[i].toTensor();
      const at::Tensor& t = inputs[i].toTensor();
      if (t.data_ptr() != buffer.data_ptr()) {
        buffers.push_back(buffer);
        given.push_back(t);
        input_bytes_copied.fetch_add(static_cast<std::int64_t>(t.nbytes()));
      }
    }
    if (!captured.aliased_by_output[i]) inputs[i] = c10::IValue();
  }
  if (buffers.size() == 1) buffers[0].copy_(given[0], /*non_blocking=*/true);
  if (buffers.size() > 1) at::_foreach_copy_(buffers, given, /*non_blocking=*/true);
  given.clear();
  for (auto& weak : captured.handed_out) {
    if (auto storage = weak.lock()) {
      output_bytes_moved.fetch_add(static_cast<std::int64_t>(move_to_own_memory(*storage)));
    }
  }
  captured.handed_out.clear();
  captured.graph->replay();
  replays.fetch_add(1);
  return hand_out(captured, inputs);
}

// Fresh tensors over the graph's output memory; outputs that alias an input
// buffer are given back as views of the caller's own input.
std::vector<c10::IValue> CudaGraphRunner::Impl::hand_out(CapturedGraph& captured,
                                                         const std::vector<c10::IValue>& inputs) {
  std::map<const void*, c10::intrusive_ptr<c10::StorageImpl>> wrappers;
  std::vector<c10::IValue> results;
  for (const c10::IValue& output : captured.outputs->outputs) {
    if (!output.isTensor()) {
      results.push_back(output);
      continue;
    }
    const at::Tensor& t = output.toTensor();
    const void* base = t.storage().data();
    bool aliased_input = false;
    for (std::size_t i = 0; i < inputs.size() && !aliased_input; ++i) {
      if (!captured.inputs[i].isTensor() ||
          captured.inputs[i].toTensor().storage().data() != base) {
        continue;
      }
      results.emplace_back(
          inputs[i].toTensor().as_strided(t.sizes(), t.strides(), t.storage_offset()));
      aliased_input = true;
    }
    if (aliased_input) continue;
    auto& wrapper = wrappers[base];
    if (!wrapper) {
      wrapper = graph_memory_storage(const_cast<void*>(base), t.storage().nbytes(), t.device(),
                                     captured.outputs);
      captured.handed_out.emplace_back(wrapper);
    }
    results.emplace_back(tensor_over(wrapper, t));
  }
  return results;
}

CudaGraphRunner::CudaGraphRunner(const Executor& executor, CudaGraphPolicy policy)
    : impl_(std::make_unique<Impl>(executor, std::move(policy))) {
  if (!impl_->policy.enabled) return;
  impl_->blocker = capture_blocker(executor.graph());
  // Inputs the graph writes to must stay the caller's own tensors.
  for (int position : mutated_inputs(executor.graph())) {
    impl_->policy.static_inputs.push_back(position);
  }
  for (int position : impl_->policy.static_inputs) {
    if (position < 0) continue;
    const auto at = static_cast<std::size_t>(position);
    if (at >= impl_->static_mask.size()) impl_->static_mask.resize(at + 1, false);
    impl_->static_mask[at] = true;
  }
}

std::vector<c10::IValue> CudaGraphRunner::run(std::vector<c10::IValue> inputs) {
  if (!impl_->policy.enabled || !impl_->blocker.empty()) {
    return impl_->executor.run(std::move(inputs));
  }
  return impl_->run(std::move(inputs));
}

std::string CudaGraphRunner::status() const {
  if (!impl_->policy.enabled) return "off (option cuda_graphs is false)";
  if (!impl_->blocker.empty()) return "off: " + impl_->blocker;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  std::string text = "on: " + std::to_string(impl_->graphs.size()) + " graph(s) captured";
  for (const auto& [key, reason] : impl_->failures) text += "; a capture failed: " + reason;
  return text;
}

std::int64_t CudaGraphRunner::captures() const { return impl_->captures.load(); }
std::int64_t CudaGraphRunner::replays() const { return impl_->replays.load(); }
std::int64_t CudaGraphRunner::input_bytes_copied() const {
  return impl_->input_bytes_copied.load();
}
std::int64_t CudaGraphRunner::output_bytes_moved() const {
  return impl_->output_bytes_moved.load();
}

#else  // CPU-only build: nothing is ever captured.

struct CudaGraphRunner::Impl {
  Impl(const Executor& e, CudaGraphPolicy p) : executor(e), policy(std::move(p)) {}
  const Executor& executor;
  CudaGraphPolicy policy;
};

CudaGraphRunner::CudaGraphRunner(const Executor& executor, CudaGraphPolicy policy)
    : impl_(std::make_unique<Impl>(executor, std::move(policy))) {}

std::vector<c10::IValue> CudaGraphRunner::run(std::vector<c10::IValue> inputs) {
  return impl_->executor.run(std::move(inputs));
}

std::string CudaGraphRunner::status() const {
  return impl_->policy.enabled ? "off: mybackend was built without CUDA"
                               : "off (option cuda_graphs is false)";
}

std::int64_t CudaGraphRunner::captures() const { return 0; }
std::int64_t CudaGraphRunner::replays() const { return 0; }
std::int64_t CudaGraphRunner::input_bytes_copied() const { return 0; }
std::int64_t CudaGraphRunner::output_bytes_moved() const { return 0; }

#endif

CudaGraphRunner::~CudaGraphRunner() = default;

}  // namespace mybackend
