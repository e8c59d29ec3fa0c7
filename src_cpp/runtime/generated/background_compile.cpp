#include "runtime/generated/background_compile.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "common/error.h"

namespace mybackend {
namespace {

// The batches still compiling, process-wide (Note [Kernels compiled beside
// the caller]): what wait_for_background_compiles() waits for.
struct RunningBatches {
  std::mutex mutex;
  std::condition_variable done;
  int running = 0;
  // The process that started them: a child forked meanwhile has none of
  // their threads and must wait for none (read before locking: the mutex
  // may have been held by another thread at the fork).
  std::atomic<pid_t> owner{0};
};

RunningBatches& running_batches() {
  static RunningBatches batches;
  return batches;
}

std::atomic<std::uint64_t>& wait_us() {
  static std::atomic<std::uint64_t> total{0};
  return total;
}

// One graph's generated groups, compiled on a thread of their own.
class CompileBatch {
 public:
  CompileBatch(std::shared_ptr<const Graph> graph, std::vector<GeneratedGroup> groups,
               CodegenOptions options)
      : graph_(std::move(graph)), groups_(std::move(groups)), options_(std::move(options)) {
    {
      RunningBatches& batches = running_batches();
      std::lock_guard<std::mutex> lock(batches.mutex);
      if (batches.owner.load() != getpid()) {  // a parent's batches never finish here
        batches.running = 0;
        batches.owner = getpid();
      }
      ++batches.running;
    }
    thread_ = std::thread([this] { compile(); });
  }
  CompileBatch(const CompileBatch&) = delete;
  CompileBatch& operator=(const CompileBatch&) = delete;
  ~CompileBatch() {
    if (thread_.joinable()) {
      if (pid_ == getpid()) {
        thread_.join();
      } else {
        thread_.detach();  // a forked child: the thread exists only in the parent
      }
    }
  }

  // Group k's result once the batch has finished. In a child forked while
  // the batch compiled, the compile never finishes there: every group runs
  // as ATen calls.
  const GeneratedCompileResult& result(std::size_t k) {
    // Every launch of the group asks: once finished (results_ written before
    // finished_ was set), no lock and no getpid() system call.
    if (finished_.load(std::memory_order_acquire)) return results_.at(k);
    if (pid_ != getpid()) return forked_;
    std::unique_lock<std::mutex> lock(mutex_);
    if (!finished_.load()) {
      const auto start = std::chrono::steady_clock::now();
      finished_changed_.wait(lock, [this] { return finished_.load(); });
      wait_us() += static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                                  std::chrono::steady_clock::now() - start)
                                                  .count());
    }
    return results_.at(k);
  }

 private:
  void compile() {
    std::vector<GeneratedCompileResult> results;
    try {
      results = compile_generated_groups(*graph_, groups_, options_);
    } catch (const std::exception& e) {
      results.clear();
      results.resize(groups_.size());
      for (auto& r : results)
        r.problem = std::string("compiling the graph's kernels failed: ") + e.what();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      results_ = std::move(results);
      finished_ = true;
    }
    finished_changed_.notify_all();
    RunningBatches& batches = running_batches();
    {
      std::lock_guard<std::mutex> lock(batches.mutex);
      --batches.running;
    }
    batches.done.notify_all();
  }

  std::shared_ptr<const Graph> graph_;  // the kernels refer to it
  std::vector<GeneratedGroup> groups_;  // their specs too (shared_ptrs)
  CodegenOptions options_;
  const pid_t pid_ = getpid();
  GeneratedCompileResult forked_{nullptr, "the process forked while its kernels compiled"};
  std::mutex mutex_;
  std::condition_variable finished_changed_;
  std::atomic<bool> finished_{false};
  std::vector<GeneratedCompileResult> results_;
  std::thread thread_;  // last: started once everything above exists
};

// A generated group's place in the executor until its batch has compiled.
class PendingKernel final : public GroupRunner {
 public:
  PendingKernel(std::shared_ptr<CompileBatch> batch, std::size_t index, KernelKind kind)
      : batch_(std::move(batch)), index_(index), kind_(kind) {}

  bool run(ValueSlots& slots, const SymbolBindings& bindings,
           PlannedOutputs& outputs) const override {
    const GeneratedCompileResult& r = batch_->result(index_);
    return r.kernel != nullptr && r.kernel->run(slots, bindings, outputs);
  }
  std::string problem() const override {
    const GeneratedCompileResult& r = batch_->result(index_);
    return r.kernel ? r.kernel->problem() : r.problem;
  }
  std::string description() const override {
    const GeneratedCompileResult& r = batch_->result(index_);
    return r.kernel ? r.kernel->description() : std::string();
  }
  bool usable() const override { return batch_->result(index_).kernel != nullptr; }
  KernelKind kind() const override { return kind_; }

 private:
  std::shared_ptr<CompileBatch> batch_;
  std::size_t index_;
  KernelKind kind_;
};

}  // namespace

void CompileFutures::add(int partition, int group, std::unique_ptr<GroupRunner> runner) {
  runners_[{partition, group}] = std::move(runner);
}

std::unique_ptr<GroupRunner> CompileFutures::take(int partition, int group) {
  auto it = runners_.find({partition, group});
  if (it == runners_.end()) return nullptr;
  std::unique_ptr<GroupRunner> runner = std::move(it->second);
  runners_.erase(it);
  return runner;
}

CompileFutures start_generated_compiles(std::shared_ptr<const Graph> graph,
                                        std::vector<GeneratedGroup> groups,
                                        CodegenOptions options) {
  CompileFutures futures;
  if (groups.empty()) return futures;
  struct Place {
    int partition, index;
    KernelKind kind;
  };
  std::vector<Place> places;
  for (const GeneratedGroup& g : groups) places.push_back({g.partition, g.index, g.group.kind()});
  auto batch =
      std::make_shared<CompileBatch>(std::move(graph), std::move(groups), std::move(options));
  for (std::size_t k = 0; k < places.size(); ++k) {
    futures.add(places[k].partition, places[k].index,
                std::make_unique<PendingKernel>(batch, k, places[k].kind));
  }
  return futures;
}

void wait_for_background_compiles() {
  RunningBatches& batches = running_batches();
  if (batches.owner.load() != getpid()) return;  // none, or a parent's
  std::unique_lock<std::mutex> lock(batches.mutex);
  batches.done.wait(lock, [&] { return batches.running == 0; });
}

std::uint64_t background_compile_wait_us() { return wait_us().load(); }

}  // namespace mybackend
