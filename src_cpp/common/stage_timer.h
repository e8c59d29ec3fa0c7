// Wall-clock timing of compile stages, reported by explain().
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace mybackend {

using StageTimes = std::vector<std::pair<std::string, double>>;  // (stage, seconds), in order

class StageTimer {
 public:
  StageTimer(StageTimes& sink, std::string stage)
      : sink_(sink), stage_(std::move(stage)), start_(std::chrono::steady_clock::now()) {}
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;
  ~StageTimer() {
    std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start_;
    sink_.emplace_back(std::move(stage_), elapsed.count());
  }

 private:
  StageTimes& sink_;
  std::string stage_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace mybackend
