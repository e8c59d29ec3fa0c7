// Note [Host time by step]
// A default-mode step of a small model is bound by the host: its time is
// what the CPU spends launching, not what the GPU spends running. The
// profiler splits that time by op, but its own cost per range is larger
// than most of what it measures (a launch, a view), so it ranks small calls
// wrongly. MYBACKEND_HOST_TIMES=1 (CompileOptions::host_times) makes the
// executor read a steady clock around each of its steps instead, about
// 20 ns a read: every engine group under its kind's name, every ATen call
// under its operator's, and the run itself (binding the symbols, the
// outputs, the slots left to free). Off, it costs one branch per step.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mybackend {

// One label's share of the host time of the runs so far.
struct HostTimeRow {
  std::string label;
  std::int64_t calls = 0;
  std::int64_t nanoseconds = 0;
};

class HostTimes {
 public:
  // Whole runs of the executor, and whole calls from Python (the inputs'
  // and outputs' conversions around a run); rows of one label are summed.
  static constexpr const char* kRunLabel = "run (whole graph)";
  static constexpr const char* kBoundaryLabel = "call from Python (run included)";

  // Returns the slot of `label`, made on first use (construction only: not
  // thread-safe, unlike record()).
  std::size_t slot(const std::string& label);
  void record(std::size_t slot, std::chrono::steady_clock::duration elapsed) const;
  // Every label with at least one call, the longest total first; the
  // calls from Python and the whole runs first of all.
  std::vector<HostTimeRow> rows() const;

 private:
  struct Slot {
    std::string label;
    mutable std::atomic<std::int64_t> calls{0}, nanoseconds{0};
  };
  // unique_ptr: atomics do not move, and slots are made while labels come.
  std::vector<std::unique_ptr<Slot>> slots_;
};

// Adds the time from its construction to its destruction to a slot; does
// nothing when given no HostTimes.
class HostTimer {
 public:
  HostTimer(const HostTimes* times, std::size_t slot)
      : times_(times),
        slot_(slot),
        start_(times ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point()) {
  }
  HostTimer(HostTimer&& other) noexcept
      : times_(other.times_), slot_(other.slot_), start_(other.start_) {
    other.times_ = nullptr;
  }
  HostTimer(const HostTimer&) = delete;
  HostTimer& operator=(const HostTimer&) = delete;
  HostTimer& operator=(HostTimer&&) = delete;
  ~HostTimer() {
    if (times_ != nullptr) times_->record(slot_, std::chrono::steady_clock::now() - start_);
  }

 private:
  const HostTimes* times_;
  std::size_t slot_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace mybackend
