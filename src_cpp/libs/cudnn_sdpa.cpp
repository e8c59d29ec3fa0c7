#include "libs/cudnn_sdpa.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cudnn_frontend.h>

#include <atomic>
#include <cstring>
#include <exception>
#include <memory>
#include <unordered_map>
#include <vector>

#include "libs/cudnn_handles.h"

namespace mybackend::cudnn {
namespace {

namespace fe = cudnn_frontend;

// Tensor uids of the variant pack.
enum Uid : std::int64_t { kQ = 1, kK, kV, kO, kStats, kBias, kGradOut, kGradQ, kGradK, kGradV };

struct CacheCounters {
  std::atomic<std::uint64_t> hits{0}, misses{0}, entries{0}, unsupported{0};
};
CacheCounters& counters() {
  static CacheCounters c;
  return c;
}

// A built graph and its workspace size, or why cuDNN cannot take the signature.
struct Entry {
  std::shared_ptr<fe::graph::Graph> graph;
  std::int64_t workspace = 0;
  std::string problem;
};

// Note [SDPA plan cache]: per thread, as PyTorch keeps its own cuDNN
// attention graphs, so a graph and the handle it was built with never
// meet another thread's stream.
std::unordered_map<std::string, Entry>& cache() {
  thread_local std::unordered_map<std::string, Entry> entries;
  return entries;
}

// The signature: raw bytes of every fact the graph depends on.
class Key {
 public:
  void add(std::int64_t value) { key_.append(reinterpret_cast<const char*>(&value), sizeof value); }
  void add(const at::Tensor& t) {
    add(t.defined() ? static_cast<std::int64_t>(t.scalar_type()) : -1);
    if (!t.defined()) return;
    for (std::int64_t s : t.sizes()) add(s);
    for (std::int64_t s : t.strides()) add(s);
  }
  void add_float(float value) {
    std::int32_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    add(bits);
  }
  const std::string& str() const { return key_; }

 private:
  std::string key_;
};

std::string dtype_problem(const at::Tensor& q) {
  if (q.scalar_type() != at::kHalf && q.scalar_type() != at::kBFloat16)
    return "cuDNN SDPA takes f16 and bf16 only";
  return {};
}

fe::DataType_t fe_type(at::ScalarType type) {
  switch (type) {
    case at::kHalf: return fe::DataType_t::HALF;
    case at::kBFloat16: return fe::DataType_t::BFLOAT16;
    default: return fe::DataType_t::FLOAT;
  }
}

std::vector<std::int64_t> vec(c10::IntArrayRef values) { return {values.begin(), values.end()}; }

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& graph, const char* name,
                                                    Uid uid, const at::Tensor& t) {
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name(name)
                          .set_uid(uid)
                          .set_data_type(fe_type(t.scalar_type()))
                          .set_dim(vec(t.sizes()))
                          .set_stride(vec(t.strides())));
}

void mark_output(const std::shared_ptr<fe::graph::Tensor_attributes>& attr, Uid uid,
                 const at::Tensor& t) {
  attr->set_output(true)
      .set_uid(uid)
      .set_data_type(fe_type(t.scalar_type()))
      .set_dim(vec(t.sizes()))
      .set_stride(vec(t.strides()));
}

// The logsumexp buffer as cuDNN's Stats [B, H, Sq, 1]: flash's and the
// memory-efficient kernel's [B, H, L] (L >= Sq), or cuDNN's own already.
at::Tensor stats_view(const at::Tensor& stats, std::int64_t sq) {
  if (stats.dim() == 4) return stats;
  return stats.narrow(2, 0, sq).unsqueeze(3);
}

// Batch and head dims the bias broadcasts over become size 1 (cuDNN's
// broadcast form); anything cuDNN cannot read in place (broadcast rows or
// columns, no unit stride on the last dim) is copied once.
at::Tensor cudnn_bias(const at::Tensor& bias, const at::Tensor& q, const at::Tensor& k) {
  at::Tensor b = bias.expand({q.size(0), q.size(1), q.size(2), k.size(2)});
  for (int d = 0; d < 2; ++d) {
    if (b.stride(d) == 0) b = b.narrow(d, 0, 1);
  }
  if (b.stride(3) != 1 || (b.stride(2) == 0 && b.size(2) > 1)) b = b.contiguous();
  return b;
}

bool aligned(const at::Tensor& t) {
  return !t.defined() || reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0;
}

// Why the tensors cannot go to cuDNN as they are; empty when they can.
std::string layout_problem(std::initializer_list<const at::Tensor*> tensors) {
  for (const at::Tensor* t : tensors) {
    if (!t->defined()) continue;
    if (!t->is_cuda()) return "a tensor is not on a CUDA device";
    if (t->dim() != 4) return "a tensor is not 4-D";
    if (t->stride(3) != 1) return "the head dim has no unit stride";
    if (!aligned(*t)) return "a tensor is not 16-byte aligned";
  }
  return {};
}

void build(Entry& entry, fe::graph::Graph& graph, cudnnHandle_t handle) {
  MB_CUDNN_FE_CHECK(graph.validate());
  MB_CUDNN_FE_CHECK(graph.build_operation_graph(handle));
  MB_CUDNN_FE_CHECK(graph.create_execution_plans({fe::HeurMode_t::A}));
  MB_CUDNN_FE_CHECK(graph.check_support(handle));
  MB_CUDNN_FE_CHECK(graph.build_plans(handle));
  MB_CUDNN_FE_CHECK(graph.get_workspace_size(entry.workspace));
}

// Finds or builds the entry of `key`; `make` declares the graph's tensors
// and operation.
template <typename Make>
const Entry& entry_for(const std::string& key, cudnnHandle_t handle, Make&& make) {
  auto& entries = cache();
  if (auto it = entries.find(key); it != entries.end()) {
    counters().hits.fetch_add(1, std::memory_order_relaxed);
    return it->second;
  }
  counters().misses.fetch_add(1, std::memory_order_relaxed);
  Entry entry;
  entry.graph = std::make_shared<fe::graph::Graph>();
  try {
    make(*entry.graph);
    build(entry, *entry.graph, handle);
  } catch (const std::exception& e) {
    entry.graph.reset();
    entry.problem = std::string("cuDNN cannot build this SDPA graph: ") + e.what();
    counters().unsupported.fetch_add(1, std::memory_order_relaxed);
  }
  counters().entries.fetch_add(1, std::memory_order_relaxed);
  return entries.emplace(key, std::move(entry)).first->second;
}

void execute(const Entry& entry, cudnnHandle_t handle,
             std::unordered_map<std::int64_t, void*>& pack) {
  c10::DataPtr workspace;
  if (entry.workspace > 0) {
    workspace =
        c10::cuda::CUDACachingAllocator::get()->allocate(static_cast<std::size_t>(entry.workspace));
  }
  MB_CUDNN_FE_CHECK(entry.graph->execute(handle, pack, workspace.get()));
}

void set_graph_types(fe::graph::Graph& graph, const at::Tensor& q) {
  graph.set_io_data_type(fe_type(q.scalar_type()))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
}

// One call's device guard, stream handle and plan-cache key (direction,
// device, then the caller's tensors and attributes).
struct SdpaCall {
  SdpaCall(const at::Tensor& q, bool backward)
      : guard(q.device()),
        device(q.get_device()),
        handle(handle_for(device, at::cuda::getCurrentCUDAStream(device).stream())) {
    key.add(backward ? 1 : 0);
    key.add(device);
  }
  void add_attributes(bool causal, double scale) {
    key.add(causal ? 1 : 0);
    key.add_float(static_cast<float>(scale));
  }
  const c10::cuda::CUDAGuard guard;
  const int device;
  const cudnnHandle_t handle;
  Key key;
};

struct QkvInputs {
  std::shared_ptr<fe::graph::Tensor_attributes> q, k, v;
};

QkvInputs qkv_inputs(fe::graph::Graph& graph, const at::Tensor& q, const at::Tensor& k,
                     const at::Tensor& v) {
  set_graph_types(graph, q);
  return {input(graph, "Q", kQ, q), input(graph, "K", kK, k), input(graph, "V", kV, v)};
}

}  // namespace

std::string sdpa_forward(const SdpaForwardArgs& args) {
  if (std::string problem = dtype_problem(args.q); !problem.empty()) return problem;
  const at::Tensor bias =
      args.bias.defined() ? cudnn_bias(args.bias, args.q, args.k) : at::Tensor();
  const at::Tensor stats =
      args.stats.defined() ? stats_view(args.stats, args.q.size(2)) : at::Tensor();
  if (std::string problem = layout_problem({&args.q, &args.k, &args.v, &args.out, &bias});
      !problem.empty())
    return problem;
  SdpaCall call(args.q, /*backward=*/false);
  for (const at::Tensor* t : {&args.q, &args.k, &args.v, &args.out, &bias, &stats})
    call.key.add(*t);
  call.add_attributes(args.causal, args.scale);
  const Entry& entry = entry_for(call.key.str(), call.handle, [&](fe::graph::Graph& graph) {
    auto [q, k, v] = qkv_inputs(graph, args.q, args.k, args.v);
    fe::graph::SDPA_attributes attributes;
    attributes.set_name("mybackend_sdpa")
        .set_generate_stats(stats.defined())
        .set_causal_mask(args.causal)
        .set_attn_scale(static_cast<float>(args.scale));
    if (bias.defined()) attributes.set_bias(input(graph, "Bias", kBias, bias));
    auto [o, lse] = graph.sdpa(q, k, v, attributes);
    mark_output(o, kO, args.out);
    if (stats.defined()) mark_output(lse, kStats, stats);
  });
  if (!entry.graph) return entry.problem;
  std::unordered_map<std::int64_t, void*> pack{{kQ, args.q.data_ptr()},
                                               {kK, args.k.data_ptr()},
                                               {kV, args.v.data_ptr()},
                                               {kO, args.out.data_ptr()}};
  if (bias.defined()) pack.emplace(kBias, bias.data_ptr());
  if (stats.defined()) pack.emplace(kStats, stats.data_ptr());
  execute(entry, call.handle, pack);
  return {};
}

std::string sdpa_backward(const SdpaBackwardArgs& args) {
  if (std::string problem = dtype_problem(args.q); !problem.empty()) return problem;
  const at::Tensor bias =
      args.bias.defined() ? cudnn_bias(args.bias, args.q, args.k) : at::Tensor();
  const at::Tensor stats = stats_view(args.stats, args.q.size(2));
  if (!stats.is_cuda() || stats.scalar_type() != at::kFloat)
    return "the logsumexp is not f32 on CUDA";
  if (std::string problem = layout_problem({&args.q, &args.k, &args.v, &args.out, &args.grad_out,
                                            &args.grad_q, &args.grad_k, &args.grad_v, &bias});
      !problem.empty())
    return problem;
  SdpaCall call(args.q, /*backward=*/true);
  for (const at::Tensor* t : {&args.q, &args.k, &args.v, &args.out, &args.grad_out, &args.grad_q,
                              &args.grad_k, &args.grad_v, &bias, &stats})
    call.key.add(*t);
  call.add_attributes(args.causal, args.scale);
  const Entry& entry = entry_for(call.key.str(), call.handle, [&](fe::graph::Graph& graph) {
    auto [q, k, v] = qkv_inputs(graph, args.q, args.k, args.v);
    auto o = input(graph, "O", kO, args.out);
    auto d_o = input(graph, "dO", kGradOut, args.grad_out);
    auto lse = input(graph, "Stats", kStats, stats);
    fe::graph::SDPA_backward_attributes attributes;
    attributes.set_name("mybackend_sdpa_backward")
        .set_causal_mask(args.causal)
        .set_attn_scale(static_cast<float>(args.scale));
    if (bias.defined()) attributes.set_bias(input(graph, "Bias", kBias, bias));
    auto [dq, dk, dv] = graph.sdpa_backward(q, k, v, o, d_o, lse, attributes);
    mark_output(dq, kGradQ, args.grad_q);
    mark_output(dk, kGradK, args.grad_k);
    mark_output(dv, kGradV, args.grad_v);
  });
  if (!entry.graph) return entry.problem;
  std::unordered_map<std::int64_t, void*> pack{{kQ, args.q.data_ptr()},
                                               {kK, args.k.data_ptr()},
                                               {kV, args.v.data_ptr()},
                                               {kO, args.out.data_ptr()},
                                               {kGradOut, args.grad_out.data_ptr()},
                                               {kStats, stats.data_ptr()},
                                               {kGradQ, args.grad_q.data_ptr()},
                                               {kGradK, args.grad_k.data_ptr()},
                                               {kGradV, args.grad_v.data_ptr()}};
  if (bias.defined()) pack.emplace(kBias, bias.data_ptr());
  execute(entry, call.handle, pack);
  return {};
}

SdpaCacheStats sdpa_cache_stats() {
  const CacheCounters& c = counters();
  return {c.hits.load(), c.misses.load(), c.entries.load(), c.unsupported.load()};
}

}  // namespace mybackend::cudnn
