#include "runtime/group_floor.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <sstream>
#include <vector>

#include "common/hash.h"

#ifdef MYBACKEND_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/Sleep.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include "codegen/cache_file.h"
#endif

namespace mybackend {

GroupFloor::GroupFloor(std::string key, std::string file)
    : key_(std::move(key)), file_(std::move(file)) {
#ifdef MYBACKEND_WITH_CUDA
  if (file_.empty()) return;
  std::string why;
  const std::optional<std::string> bytes = cache_file::read(file_, 1 << 20, &why);
  if (!bytes) {
    load_problem_ = why;  // empty: no file yet
    return;
  }
  const std::optional<std::string> text = cache_file::decode(*bytes, key_, &why);
  const std::optional<std::vector<Saved>> choices = text ? decode(*text) : std::nullopt;
  if (!choices) {
    load_problem_ = text ? "its choices do not parse" : why;
    return;
  }
  for (const Saved& saved : *choices) {
    timings_[saved.bindings] = saved.timing;
    saved_[saved.bindings] = true;
  }
#endif
}

std::string GroupFloor::load_problem() const { return load_problem_; }

// One line per shape: "name=value,name=value" ("-" for none), engine us,
// ATen us, 1 when ATen runs.
std::string GroupFloor::encode(const std::vector<Saved>& choices) {
  std::ostringstream out;
  out.precision(17);
  for (const Saved& saved : choices) {
    std::string bindings;
    for (const auto& [symbol, value] : saved.bindings)
      bindings += (bindings.empty() ? "" : ",") + symbol + "=" + std::to_string(value);
    out << (bindings.empty() ? "-" : bindings) << ' ' << saved.timing.engine_us << ' '
        << saved.timing.aten_us << ' ' << (saved.timing.aten_runs ? 1 : 0) << '\n';
  }
  return out.str();
}

std::optional<std::vector<GroupFloor::Saved>> GroupFloor::decode(const std::string& text) {
  std::vector<Saved> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string bindings;
    Saved saved;
    int aten_runs = -1;
    std::string rest;
    if (!(fields >> bindings >> saved.timing.engine_us >> saved.timing.aten_us >> aten_runs) ||
        (fields >> rest) || (aten_runs != 0 && aten_runs != 1))
      return std::nullopt;
    saved.timing.aten_runs = aten_runs == 1;
    if (bindings != "-") {
      std::istringstream items(bindings);
      std::string item;
      while (std::getline(items, item, ',')) {
        const std::size_t eq = item.find('=');
        if (eq == std::string::npos || eq == 0) return std::nullopt;
        try {
          std::size_t used = 0;
          const std::int64_t value = std::stoll(item.substr(eq + 1), &used);
          if (used != item.size() - eq - 1) return std::nullopt;
          saved.bindings[item.substr(0, eq)] = value;
        } catch (const std::exception&) {
          return std::nullopt;
        }
      }
    }
    out.push_back(std::move(saved));
  }
  return out;
}

void GroupFloor::save_locked() const {
#ifdef MYBACKEND_WITH_CUDA
  if (file_.empty()) return;
  std::vector<Saved> choices;
  for (const auto& [bindings, timing] : timings_)
    if (timing) choices.push_back({bindings, *timing});
  std::string why;
  const std::size_t slash = file_.rfind('/');
  if (slash != std::string::npos &&
      !cache_file::ensure_private_directory(file_.substr(0, slash), &why))
    return;  // the choice stays in memory (Note [Never an error to the user])
  cache_file::write_atomically(file_, cache_file::encode(key_, encode(choices)), &why);
#endif
}

std::string group_floor_file(const std::string& root, const std::string& key) {
  char name[17];
  std::snprintf(name, sizeof(name), "%016llx", static_cast<unsigned long long>(fnv1a64(key)));
  return root + "/group_floor/" + name + ".txt";
}

std::string group_floor_context() {
#ifdef MYBACKEND_WITH_CUDA
  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) (void)cudaGetLastError();
  const cudaDeviceProp* gpu = at::cuda::getCurrentDeviceProperties();
  return std::string(gpu != nullptr ? gpu->name : "?") + "; CUDA " + std::to_string(runtime) +
         "; cuDNN " + std::to_string(at::detail::getCUDAHooks().versionCuDNN());
#else
  return "no CUDA";
#endif
}

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
  saved_.erase(bindings);
  save_locked();
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
        << " us: " << (timing->aten_runs ? "ATen runs" : "engine runs")
        << (saved_.count(bindings) ? ", saved" : "");
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

std::optional<GroupTimes> time_against_aten(const std::function<bool()>& engine,
                                            const std::function<void()>& aten) {
  // No CUDA: nothing to time; the engine runs as planned.
  if (!engine()) return std::nullopt;
  aten();
  return GroupTimes{};
}

#endif

}  // namespace mybackend
