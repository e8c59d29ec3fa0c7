#include "runtime/group_floor.h"

#include <algorithm>
#include <limits>
#include <sstream>
#include <vector>

#ifdef MYBACKEND_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/Sleep.h>
#endif

namespace mybackend {

GroupFloor::Choice GroupFloor::choice(const SymbolBindings& bindings) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = timings_.find(bindings);
  if (found == timings_.end()) return Choice::Measure;
  return found->second && found->second->aten_runs ? Choice::Aten : Choice::Engine;
}

GroupFloor::Choice GroupFloor::record(const SymbolBindings& bindings, double engine_us,
                                      double aten_us) {
  Timing timing{engine_us, aten_us, aten_us < engine_us * (1 - kMargin)};
  std::lock_guard<std::mutex> lock(mutex_);
  timings_[bindings] = timing;
  return timing.aten_runs ? Choice::Aten : Choice::Engine;
}

void GroupFloor::keep_engine(const SymbolBindings& bindings) {
  std::lock_guard<std::mutex> lock(mutex_);
  timings_.emplace(bindings, std::nullopt);
}

std::string GroupFloor::summary() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(1);
  for (const auto& [bindings, timing] : timings_) {
    if (!timing) continue;
    if (out.tellp() > 0) out << "; ";
    out << "timed against ATen";
    if (!bindings.empty()) {
      out << " at";
      for (const auto& [symbol, value] : bindings) out << " " << symbol << "=" << value;
    }
    out << ": engine " << timing->engine_us << " us, ATen " << timing->aten_us
        << " us: " << (timing->aten_runs ? "ATen runs" : "engine runs");
  }
  return out.str();
}

#ifdef MYBACKEND_WITH_CUDA

bool current_stream_captures() {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(at::cuda::getCurrentCUDAStream().stream(), &capturing) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;  // unknown: treated as capturing, so nothing is timed
  }
  return capturing != cudaStreamCaptureStatusNone;
}

std::optional<GroupTimes> time_against_aten(const std::function<bool()>& engine,
                                            const std::function<void()>& aten) {
  at::cuda::CUDAStream stream = at::cuda::getCurrentCUDAStream();
  // Untimed: plans, heuristics and the allocator settle.
  if (!engine()) return std::nullopt;
  aten();
  constexpr int kRuns = GroupFloor::kTimedRuns;
  std::vector<at::cuda::CUDAEvent> events;
  events.reserve(4 * kRuns);
  for (int k = 0; k < 4 * kRuns; ++k) events.emplace_back(cudaEventDefault);
  // Keeps the GPU busy while the host queues every timed run (about 1 ms
  // at H100/H200 clocks).
  at::cuda::sleep(2'000'000);
  for (int k = 0; k < kRuns; ++k) {
    events[4 * k].record(stream);
    const bool ran = engine();
    events[4 * k + 1].record(stream);
    if (!ran) return std::nullopt;
    events[4 * k + 2].record(stream);
    aten();
    events[4 * k + 3].record(stream);
  }
  events.back().synchronize();
  GroupTimes times{std::numeric_limits<double>::max(), std::numeric_limits<double>::max()};
  for (int k = 0; k < kRuns; ++k) {
    times.engine_us =
        std::min(times.engine_us, 1e3 * events[4 * k].elapsed_time(events[4 * k + 1]));
    times.aten_us =
        std::min(times.aten_us, 1e3 * events[4 * k + 2].elapsed_time(events[4 * k + 3]));
  }
  return times;
}

#else  // !MYBACKEND_WITH_CUDA

bool current_stream_captures() { return false; }

std::optional<GroupTimes> time_against_aten(const std::function<bool()>&,
                                            const std::function<void()>&) {
  // No CUDA: nothing to time; the engine runs as planned.
  if (!engine()) return std::nullopt;
  aten();
  return GroupTimes{};
}

#endif

}  // namespace mybackend
