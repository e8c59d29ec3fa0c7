// Note [A group is timed against its ATen form]
// The planner's rules pick a library call for a group by what the group is,
// not by how fast the library runs it, and a rule can lose badly on shapes
// nobody measured: a depthwise 7x7 convolution with its bias fused took
// cuDNN 1.2 ms (conv2d_grouped_direct_kernel) where ATen's convolution and
// bias add took 97 us, on an H200 (ConvNeXt-T's first stage at batch 32,
// 2026-11-27); the whole-graph eager floor then handed ConvNeXt back to the
// ATen graph, dropping every other gain with it. So a group of a kind that
// may run twice (KernelKindTraits::timed_against_aten: no side effects,
// fresh outputs) is timed against its own ATen calls on its first call for
// each set of symbol values, as cudnn.benchmark times algorithms (cuDNN
// convolutions; tiled transposing copies, whose gain over ATen's copy
// depends on the shape: Note [Tiled transposing copies] in
// fusion/transposed_copies.h; cast groups, whose layout copies read at a
// stride: Note [Grouped layout copies] in fusion/cast_groups.h):
//
// - Both forms run once untimed (plans built, algorithms and caches warm),
//   then alternately kTimedRuns times each behind a GPU sleep long enough
//   for the host to queue them all, so CUDA events measure GPU time and not
//   the host's launch gaps; each side's time is its fastest run.
// - The ATen calls take the group over when they are faster by more than
//   kMargin: noise must not send a good library call back to ATen.
// - Nothing is timed while the stream captures a CUDA graph (the capture
//   follows an uncaptured first call, which times); a shape first met
//   there runs the library call. Option eager_floor=False switches the
//   timing off.
// - The choice lives with the compiled graph (one per graph and shape);
//   reports show each group's times and choice.
//
// Note [Group floor choices on disk]
// Timing a group costs a few of its runs on the first call, and a process
// that compiles the same graph again would measure again and could decide
// otherwise on noise. So each group's choices are also kept in a file of
// the kernel cache folder (group_floor/<hash>.txt, the cache entry format of
// codegen/cache_file.h), keyed by the group's key: its plan (the spec and
// every value type it reads and writes), the GPU, the CUDA, cuDNN and torch
// versions and mybackend's. A later GroupFloor with that key starts with
// the saved choices; a file that does not decode (truncated, another key,
// another format) is ignored, measured again and rewritten. Without a
// kernel cache folder (kernel_cache_dir "" or "off", no CUDA) the choices
// stay in memory.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ir/sym_expr.h"

namespace mybackend {

// One group's timings, per set of symbol values.
class GroupFloor {
 public:
  // `file`: where this group's choices persist, with `key` checked on load
  // (Note [Group floor choices on disk]); empty: in memory only.
  explicit GroupFloor(std::string key = {}, std::string file = {});
  enum class Choice { Measure, Engine, Aten };
  struct Timing {
    double engine_us = 0;
    double aten_us = 0;
    bool aten_runs = false;
  };
  static constexpr int kTimedRuns = 3;
  static constexpr double kMargin = 0.05;

  Choice choice(const SymbolBindings& bindings) const;
  // Records a measurement; returns the choice it makes.
  Choice record(const SymbolBindings& bindings, double engine_us, double aten_us);
  // Stops measuring these bindings (the engine declined, or nothing could be timed).
  void keep_engine(const SymbolBindings& bindings);
  // "timed against ATen: engine 1201.5 us, ATen 97.3 us: ATen runs" per shape
  // (", saved" when a file gave it); "" untimed.
  std::string summary() const;
  // Why the file was not used ("" when it was, or there is none).
  std::string load_problem() const;

  // The text of the saved choices, and back (Note [Group floor choices on disk]).
  struct Saved {
    SymbolBindings bindings;
    Timing timing;
  };
  static std::string encode(const std::vector<Saved>& choices);
  static std::optional<std::vector<Saved>> decode(const std::string& text);

 private:
  void save_locked() const;

  std::string key_, file_, load_problem_;
  mutable std::mutex mutex_;
  std::map<SymbolBindings, std::optional<Timing>> timings_;
  std::map<SymbolBindings, bool> saved_;  // bindings whose choice came from the file
};

// How an executor sets up its groups' floors.
struct GroupFloorSettings {
  bool enabled = false;    // option eager_floor
  std::string cache_root;  // the kernel cache folder; empty: choices stay in memory
  std::string context;     // the torch and extension builds (from Python), in every key
};

// The file under the kernel cache `root` that keeps the choices of the
// group with this key.
std::string group_floor_file(const std::string& root, const std::string& key);
// What, beside a group's plan, its saved choice depends on: the current
// GPU's name and the CUDA, cuDNN, torch and mybackend versions.
std::string group_floor_context();

// Whether the current CUDA stream is capturing a graph (nothing is timed then).
bool current_stream_captures();

// Times `engine` against `aten` on the current CUDA stream, which must not
// be capturing (Note [A group is timed against its ATen form]). nullopt
// when `engine` declines a run (returns false): the caller then runs the
// ATen form for this call. Otherwise both forms ran, the ATen form last,
// and the outputs are its.
struct GroupTimes {
  double engine_us = 0;
  double aten_us = 0;
};
std::optional<GroupTimes> time_against_aten(const std::function<bool()>& engine,
                                            const std::function<void()>& aten);

}  // namespace mybackend
