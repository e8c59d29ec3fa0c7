// What every generated-kernel kind shares at run time (CUDA builds only):
// compiled variants, their modules loaded per device, kernel arguments
// packed by parameter name, launches on the current PyTorch stream, and the
// failure bookkeeping of Note [Never an error to the user].
#pragma once

#ifdef MYBACKEND_WITH_CUDA

#include <ATen/core/Tensor.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "codegen/emit.h"
#include "codegen/kernel_cache.h"
#include "runtime/generated/cuda_driver.h"
#include "runtime/generated/generated_kernel.h"

namespace mybackend {

// 32-bit index limit of fast variants (see PointwiseSpec::index64).
constexpr std::int64_t kIndex32Limit = std::int64_t{1} << 30;

// Note [Variants compiled on first use]
// A group's general variant (Note [Two pointwise variants]) runs only for a
// call whose tensors break the fast variant's assumptions, and a cast
// group's one-cast kernels only for a member its table cannot take; most
// graphs never need either. They are emitted with the group but compiled on
// the first call that launches one (through the kernel cache, so the disk
// cache serves them too), which waits for that one compile. A cold compile
// runs about half the NVRTC programs it used to; a kernel that fails to
// compile then fails that call's launch, and the group runs as ATen calls
// from then on (Note [Never an error to the user]).
class VariantImage {
 public:
  using Compile = std::function<std::shared_ptr<const CompiledKernel>()>;
  // An image compiled with the group.
  explicit VariantImage(std::shared_ptr<const CompiledKernel> image);
  // An image `compile` makes on the first get().
  explicit VariantImage(Compile compile);
  // The image, compiled first if it is not yet; throws when compiling fails
  // (every later call rethrows the same error without compiling again).
  std::shared_ptr<const CompiledKernel> get() const;
  bool compiled() const;

 private:
  struct State {
    std::mutex mutex;
    std::shared_ptr<const CompiledKernel> image;
    Compile compile;
    std::string error;
  };
  std::shared_ptr<State> state_;  // shared: a Variant is copied into cast groups' singles
};

// One variant of a group: its source, entry points and image.
struct Variant {
  EmittedKernel kernel;
  VariantImage image;
};

// Each variant's module on one device, loaded (and compiled, Note [Variants
// compiled on first use]) on first use.
class DeviceModules {
 public:
  explicit DeviceModules(const std::vector<Variant>& variants) : variants_(variants) {}
  struct Loaded {
    CUcontext context = nullptr;
    std::unique_ptr<cuda::Module> module;
    std::vector<CUfunction> functions;  // functions[e]: entry e
    // resident_blocks[e]: blocks of entry e that one SM holds at once (its
    // registers and shared memory decide), for launchers that size a grid
    // to one wave.
    std::vector<int> resident_blocks;
    int sm_count = 1;
  };
  // Variant `variant`'s module on `device_index`. Throws when its image
  // cannot be compiled or loaded.
  const Loaded& on(int device_index, std::size_t variant) const;

 private:
  const std::vector<Variant>& variants_;
  mutable std::mutex mutex_;
  mutable std::map<std::pair<int, std::size_t>, std::unique_ptr<Loaded>> loaded_;
};

// Argument words for one entry point, filled by parameter name: each
// parameter gets KernelParam::size_bytes() of one zeroed buffer.
class KernelArgs {
 public:
  explicit KernelArgs(const KernelEntry& entry);
  // Calls fill(param) for each parameter; it must set the words.
  void set_pointer(std::size_t i, const void* p);
  void set_int(std::size_t i, std::int64_t v);
  void set_double(std::size_t i, double v);
  void set_dims(std::size_t i, const std::vector<std::int64_t>& dims);
  // A struct passed by value (KernelParam::Kind::Bytes): exactly its size.
  void set_bytes(std::size_t i, const void* data, std::size_t size);
  void** data() { return pointers_.data(); }

 private:
  std::int64_t* words(std::size_t i) { return static_cast<std::int64_t*>(pointers_[i]); }

  const KernelEntry& entry_;
  std::vector<std::int64_t> words_;
  std::vector<void*> pointers_;
};

// cuLaunchKernel on the current PyTorch stream of `device_index`.
void launch_on_stream(const DeviceModules::Loaded& loaded, CUfunction fn, std::int64_t blocks,
                      const KernelEntry& entry, KernelArgs& args, int device_index);

// `wanted` blocks, at most sm_count * blocks_per_sm of them when
// blocks_per_sm > 0 (the kernels loop, so any grid is correct).
std::int64_t capped_grid(std::int64_t wanted, int sm_count, int blocks_per_sm);

// The common part of every generated kernel: disable after a load/launch
// failure, remember the last reason for falling back.
class GeneratedKernelBase : public GeneratedKernel {
 public:
  bool run(ValueSlots& slots, const SymbolBindings& bindings, PlannedOutputs& outputs) const final;
  std::string problem() const final;

 protected:
  virtual bool launch(ValueSlots& slots, const SymbolBindings& bindings,
                      PlannedOutputs& outputs) const = 0;
  bool fail(const std::string& why) const;
  // Keeps `why` as problem() without declining the call: a part of the
  // group took a slower path (Note [Grouped casts]).
  void note(const std::string& why) const;

 private:
  mutable std::mutex mutex_;
  mutable std::atomic<bool> disabled_{false};
  mutable std::string problem_;
};

// A generated group's kernel: its group, compiled variants (fast first when
// there are two, Note [Two pointwise variants]) and their modules.
template <class Group>
class GroupKernel : public GeneratedKernelBase {
 public:
  GroupKernel(KernelKind kind, const Graph& graph, std::shared_ptr<const Group> group,
              std::vector<Variant> variants, std::string target)
      : graph_(graph),
        group_(std::move(group)),
        variants_(std::move(variants)),
        modules_(variants_),
        target_(std::move(target)),
        kind_(kind) {}

  std::string description() const override {
    std::string text =
        std::string(kernel_kind_name(kind_)) + ": " + variants_[0].kernel.entries[0].name;
    // Note [Variants compiled on first use]: a general variant is fetched
    // by the first call that needs it, so "used" marks a group some call
    // ran slowly (unaligned or otherwise laid out inputs).
    if (variants_.size() > 1)
      text += " + " + variants_[1].kernel.entries[0].name +
              (variants_[1].image.compiled() ? " (general, used)" : " (general)");
    return text + " for " + target_;
  }
  KernelKind kind() const override { return kind_; }

 protected:
  const Graph& graph_;
  std::shared_ptr<const Group> group_;
  std::vector<Variant> variants_;
  DeviceModules modules_;  // refers to variants_
  std::string target_;
  KernelKind kind_;
};

// Per-dim strides of `t` over an iteration space of `shape` (stride 0
// broadcasts); false when t does not broadcast to it.
bool iteration_strides(const at::Tensor& t, const std::vector<std::int64_t>& shape,
                       std::vector<std::int64_t>& out);
// `dims` taken in `order` (a kernel's walk order: Note [Iteration order]).
std::vector<std::int64_t> permuted(const std::vector<std::int64_t>& dims,
                                   const std::vector<int>& order);
// Row-major dense strides for `shape` (size-1 dims may have any stride).
bool dense_strides(const std::vector<std::int64_t>& shape,
                   const std::vector<std::int64_t>& strides);
// The largest element offset a tensor of these strides reaches.
std::int64_t max_offset(const std::vector<std::int64_t>& shape,
                        const std::vector<std::int64_t>& strides);
// `t`'s IR sizes (or strides) evaluated with this call's bindings.
std::optional<std::vector<std::int64_t>> evaluate_dims(const std::vector<Dim>& dims,
                                                       const SymbolBindings& bindings);
// The tensor in `slot` when it is a defined CUDA tensor of `dtype`, else
// std::nullopt and *why says what is wrong with it (" is not a tensor"): the
// caller names the tensor only when it fails, not on every launch.
std::optional<at::Tensor> cuda_tensor(const c10::IValue& slot, DType dtype, std::string* why);
bool aligned16(const at::Tensor& t);
// The layout of a tensor read in `mode` (Periodic or PeriodicRows) over a
// walk of `shape` with `strides`, when this call's tensor has the form the
// fast variant reads (a period > 1, or >= 1 with `unit_period` where the
// reader loads it element by element: Note [One value a row]; without
// rows, one block spanning all `numel` elements); else period 0 (Note
// [Periodic operands]).
PeriodicLayout fitting_periodic_layout(IndexMode mode, const std::vector<std::int64_t>& shape,
                                       const std::vector<std::int64_t>& strides, std::int64_t numel,
                                       bool unit_period = false);

// How each kind prepares its kernels: the variants to compile (fast first
// when there are two) and how to build the runnable kernel once compiled.
// The first `compiled_now` kernels compile with the graph, the others on
// first use (Note [Variants compiled on first use]).
struct KernelBuild {
  int device_index = -1;
  std::vector<EmittedKernel> kernels;
  std::size_t compiled_now = static_cast<std::size_t>(-1);  // default: all
  std::function<std::unique_ptr<GeneratedKernel>(std::vector<Variant>, std::string target)> make;
};

// The build of a group with a fast and a general variant (Note [Two
// pointwise variants]): the fast one first, emitted only when its spec
// differs, and compiled now; the general one on first use. The runnable
// kernel is a `Kernel` (a GroupKernel<Group>).
template <class Kernel, class Group, class Emit>
KernelBuild two_variant_build(KernelKind kind, const Graph& graph,
                              std::shared_ptr<const Group> group, int device_index, Emit emit) {
  KernelBuild build;
  build.device_index = device_index;
  if (group->spec.to_string() != group->general.to_string())
    build.kernels.push_back(emit(group->spec));
  build.kernels.push_back(emit(group->general));
  build.compiled_now = 1;  // the general variant of two waits for a call that needs it
  build.make = [kind, &graph, group](std::vector<Variant> variants, std::string target) {
    return std::make_unique<Kernel>(kind, graph, group, std::move(variants), std::move(target));
  };
  return build;
}

KernelBuild pointwise_build(const Graph& graph, std::shared_ptr<const PointwiseGroup> group);
KernelBuild reduction_build(const Graph& graph, std::shared_ptr<const ReductionGroup> group);
KernelBuild norm_build(const Graph& graph, std::shared_ptr<const NormGroup> group);
KernelBuild cast_group_build(const Graph& graph, std::shared_ptr<const CastGroup> group);
KernelBuild pool_build(const Graph& graph, std::shared_ptr<const PoolGroup> group);
KernelBuild transpose_build(const Graph& graph, std::shared_ptr<const TransposeGroup> group);

}  // namespace mybackend

#endif  // MYBACKEND_WITH_CUDA
