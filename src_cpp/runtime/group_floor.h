// Note [A group is timed against its ATen form]
// The planner's rules pick a library call for a group by what the group is,
// not by how fast the library runs it, and a rule can lose badly on shapes
// nobody measured: a depthwise 7x7 convolution with its bias fused took
// cuDNN 1.2 ms (conv2d_grouped_direct_kernel) where ATen's convolution and
// bias add took 97 us, on an H200 (ConvNeXt-T's first stage at batch 32,
// 2026-11-27); the whole-graph eager floor then handed ConvNeXt back to the
// ATen graph, dropping every other gain with it. So a group whose runner
// says it may run twice (GroupRunner::timed_against_aten: no side effects,
// fresh outputs) is timed against its own ATen calls on its first call for
// each set of symbol values, as cudnn.benchmark times algorithms:
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
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "ir/sym_expr.h"

namespace mybackend {

// One group's timings, per set of symbol values.
class GroupFloor {
 public:
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
  // "timed against ATen: engine 1201.5 us, ATen 97.3 us: ATen runs" per shape; "" untimed.
  std::string summary() const;

 private:
  mutable std::mutex mutex_;
  std::map<SymbolBindings, std::optional<Timing>> timings_;
};

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
