// The only translation unit that includes the cuDNN frontend (it is heavy).
#include "libs/cudnn_conv.h"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <utility>

#include "libs/cudnn_check.h"
#include "libs/cudnn_handles.h"

namespace mybackend::cudnn {
namespace {

namespace fe = cudnn_frontend;

// Variant-pack uids: fixed per role, so one signature always binds the same way.
enum Uid : std::int64_t { kX = 1, kW, kY, kBias, kScale, kShift, kResidual, kDy, kDx, kDw };

enum class Direction : std::int8_t { Fprop, Dgrad, Wgrad };

// A tensor as cuDNN sees it: part of the signature and of the graph.
struct TensorDesc {
  std::int64_t uid = 0;
  std::vector<std::int64_t> dims, strides;
  fe::DataType_t type = fe::DataType_t::NOT_SET;
  std::int64_t alignment = 16;
  void* data = nullptr;
};

std::optional<fe::DataType_t> data_type(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Half: return fe::DataType_t::HALF;
    case c10::ScalarType::BFloat16: return fe::DataType_t::BFLOAT16;
    case c10::ScalarType::Float: return fe::DataType_t::FLOAT;
    default: return std::nullopt;
  }
}

std::int64_t pointer_alignment(const void* data) {
  const auto address = reinterpret_cast<std::uintptr_t>(data);
  std::int64_t alignment = 16;
  while (alignment > 1 && address % static_cast<std::uintptr_t>(alignment) != 0) alignment /= 2;
  return alignment;
}

TensorDesc describe(std::int64_t uid, const at::Tensor& t) {
  TensorDesc d;
  d.uid = uid;
  d.dims = t.sizes().vec();
  d.strides = t.strides().vec();
  d.type = *data_type(t.scalar_type());
  d.data = t.data_ptr();
  d.alignment = pointer_alignment(d.data);
  return d;
}

// A per-channel vector of K elements (1-D [K], or dense like [K, 1, 1] or
// [1, K, 1, 1]) as cuDNN's [1, K, 1, ...] of `rank` dims.
TensorDesc describe_channel_vector(std::int64_t uid, const at::Tensor& v, std::size_t rank) {
  TensorDesc d;
  d.uid = uid;
  const std::int64_t k = v.numel(), stride = v.dim() == 1 ? v.stride(0) : 1;
  d.dims.assign(rank, 1);
  d.dims[1] = k;
  d.strides.assign(rank, 1);
  d.strides[0] = k * stride;
  d.strides[1] = stride;
  d.type = *data_type(v.scalar_type());
  d.data = v.data_ptr();
  d.alignment = pointer_alignment(d.data);
  return d;
}

std::shared_ptr<fe::graph::Tensor_attributes> add_tensor(fe::graph::Graph& graph,
                                                         const TensorDesc& d) {
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name("t" + std::to_string(d.uid))
                          .set_uid(d.uid)
                          .set_dim(d.dims)
                          .set_stride(d.strides)
                          .set_data_type(d.type)
                          .set_alignment(d.alignment));
}

void mark_output(const std::shared_ptr<fe::graph::Tensor_attributes>& t, const TensorDesc& d) {
  t->set_output(true)
      .set_uid(d.uid)
      .set_dim(d.dims)
      .set_stride(d.strides)
      .set_data_type(d.type)
      .set_alignment(d.alignment);
}

// The signature as bytes (Note [Conv plan cache]): each number's eight bytes
// and each list's length, so no two signatures spell the same key. Spelled
// as decimal text it took a few microseconds of every call's host time.
class KeyBuilder {
 public:
  KeyBuilder& add(std::int64_t x) {
    key_.append(reinterpret_cast<const char*>(&x), sizeof x);
    return *this;
  }
  KeyBuilder& add(const std::vector<std::int64_t>& xs) {
    add(static_cast<std::int64_t>(xs.size()));
    for (std::int64_t x : xs) add(x);
    return *this;
  }
  KeyBuilder& add(const TensorDesc& d) {
    return add(d.uid)
        .add(d.dims)
        .add(d.strides)
        .add(static_cast<std::int64_t>(d.type))
        .add(d.alignment);
  }
  std::string take() { return std::move(key_); }

 private:
  std::string key_;
};

struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;  // null: cuDNN has no plan (see failure)
  std::string failure;
  std::int64_t workspace_bytes = 0;
  mutable std::mutex execute_mutex;  // Note [Conv plan cache]: execute() is not reentrant
};

// What every graph of one call shares: device, dtype, precision switches.
struct Setting {
  int device = 0;
  cudaStream_t stream = nullptr;
  fe::DataType_t io = fe::DataType_t::FLOAT;
  bool tf32 = false;           // f32: TF32 tensor-core engines allowed
  bool deterministic = false;  // nondeterministic engines excluded
};

Setting setting_for(const at::Tensor& t) {
  Setting s;
  s.device = t.device().index();
  s.stream = at::cuda::getCurrentCUDAStream(t.device().index()).stream();
  s.io = *data_type(t.scalar_type());
  s.tf32 = s.io == fe::DataType_t::FLOAT && at::globalContext().allowTF32CuDNN();
  s.deterministic = at::globalContext().deterministicCuDNN();
  return s;
}

std::string failed(const char* step, fe::error_t error) {
  return std::string(step) + " failed: " + error.get_message();
}

// validate → operation graph → heuristics (A, then fallback) → filters →
// support → the first plan that builds; empty string on success.
std::string build(fe::graph::Graph& graph, const Setting& s, cudnnHandle_t handle) {
  if (auto e = graph.validate(); e.is_bad()) return failed("validate", e);
  if (auto e = graph.build_operation_graph(handle); e.is_bad())
    return failed("build_operation_graph", e);
  if (auto e = graph.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK});
      e.is_bad())
    return failed("create_execution_plans", e);
  if (s.io == fe::DataType_t::FLOAT) {
    // f32 means f32 unless torch allows TF32, and never inputs rounded to f16.
    std::vector<fe::NumericalNote_t> excluded{fe::NumericalNote_t::DOWN_CONVERT_INPUTS};
    if (!s.tf32) excluded.push_back(fe::NumericalNote_t::TENSOR_CORE);
    graph.deselect_numeric_notes(excluded);
  }
  if (s.deterministic) graph.deselect_numeric_notes({fe::NumericalNote_t::NONDETERMINISTIC});
  if (auto e = graph.check_support(handle); e.is_bad()) return failed("check_support", e);
  if (auto e = graph.build_plans(handle, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE); e.is_bad())
    return failed("build_plans", e);
  return {};
}

class PlanCache {
 public:
  // The plan for `key`, built by `make` (which adds the graph's nodes) on a miss.
  std::shared_ptr<const Plan> get(const std::string& key, const Setting& s, cudnnHandle_t handle,
                                  const std::function<void(fe::graph::Graph&)>& make) {
    {
      std::shared_lock<std::shared_mutex> lock(mutex_);
      if (auto it = plans_.find(key); it != plans_.end()) {
        hits_.fetch_add(1, std::memory_order_relaxed);
        return it->second;
      }
    }
    std::lock_guard<std::mutex> building(build_mutex_);  // one builder at a time
    {
      std::shared_lock<std::shared_mutex> lock(mutex_);
      if (auto it = plans_.find(key); it != plans_.end()) return it->second;
    }
    misses_.fetch_add(1, std::memory_order_relaxed);
    auto plan = std::make_shared<Plan>();
    try {
      auto graph = std::make_shared<fe::graph::Graph>();
      graph->set_io_data_type(s.io)
          .set_intermediate_data_type(fe::DataType_t::FLOAT)
          .set_compute_data_type(fe::DataType_t::FLOAT);
      make(*graph);
      plan->failure = build(*graph, s, handle);
      if (plan->failure.empty()) {
        if (auto e = graph->get_workspace_size(plan->workspace_bytes); e.is_bad()) {
          plan->failure = failed("get_workspace_size", e);
        } else {
          plan->graph = std::move(graph);
        }
      }
    } catch (const std::exception& e) {
      plan->failure = std::string("building the cuDNN graph threw: ") + e.what();
    }
    if (!plan->graph) failures_.fetch_add(1, std::memory_order_relaxed);
    std::unique_lock<std::shared_mutex> lock(mutex_);
    plans_.emplace(key, plan);
    return plan;
  }

  PlanCacheStats stats() const {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    return {hits_.load(), misses_.load(), static_cast<std::uint64_t>(plans_.size()),
            failures_.load()};
  }

 private:
  mutable std::shared_mutex mutex_;
  std::mutex build_mutex_;
  std::unordered_map<std::string, std::shared_ptr<const Plan>> plans_;
  std::atomic<std::uint64_t> hits_{0}, misses_{0}, failures_{0};
};

PlanCache& plan_cache() {
  static PlanCache cache;  // function-local: built on first use, never before torch
  return cache;
}

KeyBuilder signature(Direction direction, const Setting& s, const ConvGeometry& g) {
  KeyBuilder key;
  key.add(static_cast<std::int64_t>(direction))
      .add(s.device)
      .add(static_cast<std::int64_t>(s.io))
      .add(s.tf32)
      .add(s.deterministic)
      .add(g.stride)
      .add(g.padding)
      .add(g.dilation)
      .add(g.groups);
  return key;
}

// Runs the plan with the tensors' pointers and a workspace from the caching
// allocator; empty string on success, else why the plan does not exist.
std::string execute(const Plan& plan, cudnnHandle_t handle,
                    const std::vector<TensorDesc>& tensors) {
  if (!plan.graph) return plan.failure;
  std::unordered_map<std::int64_t, void*> pack;
  for (const TensorDesc& d : tensors) pack.emplace(d.uid, d.data);
  c10::DataPtr workspace;
  if (plan.workspace_bytes > 0)
    workspace = c10::cuda::CUDACachingAllocator::get()->allocate(
        static_cast<std::size_t>(plan.workspace_bytes));
  std::lock_guard<std::mutex> lock(plan.execute_mutex);
  MB_CUDNN_FE_CHECK(plan.graph->execute(handle, pack, workspace.get()));
  return {};
}

std::string unsupported_dtype(const at::Tensor& t) {
  return data_type(t.scalar_type()) ? std::string()
                                    : "dtype " + std::string(c10::toString(t.scalar_type())) +
                                          " (cuDNN graphs here take f16, bf16, f32)";
}

// Why cuDNN cannot take these operands (dtype, emptiness), or "".
std::string operands_problem(std::initializer_list<const at::Tensor*> operands) {
  for (const at::Tensor* t : operands) {
    if (std::string p = unsupported_dtype(*t); !p.empty()) return p;
  }
  for (const at::Tensor* t : operands) {
    if (t->numel() == 0) return "an empty tensor";
  }
  return {};
}

fe::graph::Pointwise_attributes pointwise(fe::PointwiseMode_t mode) {
  return fe::graph::Pointwise_attributes().set_mode(mode).set_compute_data_type(
      fe::DataType_t::FLOAT);
}

// The attributes every convolution graph op takes from the node, whatever its direction.
template <class Attributes>
Attributes with_geometry(Attributes attributes, const ConvGeometry& geometry) {
  attributes.set_padding(geometry.padding)
      .set_stride(geometry.stride)
      .set_dilation(geometry.dilation)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return attributes;
}

// dgrad and wgrad: dy and one forward operand in, one gradient out. `op`
// adds the library operation to the graph: op(graph, dy, operand) -> grad.
template <class Op>
std::string conv_backward(Direction direction, const at::Tensor& dy, Uid operand_uid,
                          const at::Tensor& operand, Uid grad_uid, const at::Tensor& grad,
                          const ConvGeometry& geometry, Op op) {
  if (std::string p = operands_problem({&dy, &operand, &grad}); !p.empty()) return p;
  const c10::cuda::CUDAGuard guard(dy.device());
  const Setting s = setting_for(dy);
  const std::vector<TensorDesc> tensors{describe(kDy, dy), describe(operand_uid, operand),
                                        describe(grad_uid, grad)};
  KeyBuilder key = signature(direction, s, geometry);
  for (const TensorDesc& d : tensors) key.add(d);
  const cudnnHandle_t handle = handle_for(s.device, s.stream);
  const auto plan = plan_cache().get(key.take(), s, handle, [&](fe::graph::Graph& graph) {
    mark_output(op(graph, add_tensor(graph, tensors[0]), add_tensor(graph, tensors[1])),
                tensors[2]);
  });
  return execute(*plan, handle, tensors);
}

}  // namespace

std::string conv_fprop(const ConvFpropArgs& a) {
  if (std::string p = operands_problem({&a.x, &a.w, &a.y}); !p.empty()) return p;
  const c10::cuda::CUDAGuard guard(a.x.device());
  const Setting s = setting_for(a.x);
  const std::size_t rank = static_cast<std::size_t>(a.x.dim());
  std::vector<TensorDesc> tensors{describe(kX, a.x), describe(kW, a.w), describe(kY, a.y)};
  if (a.bias.defined()) tensors.push_back(describe_channel_vector(kBias, a.bias, rank));
  if (a.scale.defined()) {
    tensors.push_back(describe_channel_vector(kScale, a.scale, rank));
    tensors.push_back(describe_channel_vector(kShift, a.shift, rank));
  }
  if (a.residual.defined()) tensors.push_back(describe(kResidual, a.residual));
  KeyBuilder key = signature(Direction::Fprop, s, a.geometry);
  for (const TensorDesc& d : tensors) key.add(d);
  key.add(a.relu);
  const cudnnHandle_t handle = handle_for(s.device, s.stream);
  auto find = [&](std::int64_t uid) -> const TensorDesc& {
    return *std::find_if(tensors.begin(), tensors.end(),
                         [uid](const TensorDesc& d) { return d.uid == uid; });
  };
  const auto plan = plan_cache().get(key.take(), s, handle, [&](fe::graph::Graph& graph) {
    auto x = add_tensor(graph, find(kX));
    auto w = add_tensor(graph, find(kW));
    auto y = graph.conv_fprop(x, w, with_geometry(fe::graph::Conv_fprop_attributes(), a.geometry));
    // The epilogue in eager's order: bias, batch norm, residual, relu.
    if (a.bias.defined())
      y = graph.pointwise(y, add_tensor(graph, find(kBias)), pointwise(fe::PointwiseMode_t::ADD));
    if (a.scale.defined()) {
      y = graph.pointwise(y, add_tensor(graph, find(kScale)), pointwise(fe::PointwiseMode_t::MUL));
      y = graph.pointwise(y, add_tensor(graph, find(kShift)), pointwise(fe::PointwiseMode_t::ADD));
    }
    if (a.residual.defined())
      y = graph.pointwise(y, add_tensor(graph, find(kResidual)),
                          pointwise(fe::PointwiseMode_t::ADD));
    if (a.relu) y = graph.pointwise(y, pointwise(fe::PointwiseMode_t::RELU_FWD));
    mark_output(y, find(kY));
  });
  return execute(*plan, handle, tensors);
}

std::string conv_dgrad(const at::Tensor& dy, const at::Tensor& w, const ConvGeometry& geometry,
                       const at::Tensor& dx) {
  return conv_backward(Direction::Dgrad, dy, kW, w, kDx, dx, geometry,
                       [&](fe::graph::Graph& graph, auto dy_t, auto w_t) {
                         return graph.conv_dgrad(
                             dy_t, w_t,
                             with_geometry(fe::graph::Conv_dgrad_attributes(), geometry));
                       });
}

std::string conv_wgrad(const at::Tensor& dy, const at::Tensor& x, const ConvGeometry& geometry,
                       const at::Tensor& dw) {
  return conv_backward(Direction::Wgrad, dy, kX, x, kDw, dw, geometry,
                       [&](fe::graph::Graph& graph, auto dy_t, auto x_t) {
                         return graph.conv_wgrad(
                             dy_t, x_t,
                             with_geometry(fe::graph::Conv_wgrad_attributes(), geometry));
                       });
}

PlanCacheStats plan_cache_stats() { return plan_cache().stats(); }

}  // namespace mybackend::cudnn
