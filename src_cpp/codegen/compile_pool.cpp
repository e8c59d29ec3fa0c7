#include "codegen/compile_pool.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>

namespace mybackend {
namespace {

// Joins its threads on every exit path, exceptions included.
class JoiningThreads {
 public:
  JoiningThreads() = default;
  JoiningThreads(const JoiningThreads&) = delete;
  JoiningThreads& operator=(const JoiningThreads&) = delete;
  ~JoiningThreads() { join(); }

  template <typename F>
  void start(F&& f) {
    threads_.emplace_back(std::forward<F>(f));
  }
  void join() {
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  std::vector<std::thread> threads_;
};

}  // namespace

CompilePool::CompilePool(int max_threads) {
  const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  max_threads_ = max_threads > 0 ? std::min(max_threads, hardware) : hardware;
}

void CompilePool::parallel_for(std::size_t count,
                               const std::function<void(std::size_t)>& fn) const {
  std::vector<std::exception_ptr> errors(count);
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i = next.fetch_add(1); i < count; i = next.fetch_add(1)) {
      try {
        fn(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  const std::size_t workers = std::min<std::size_t>(static_cast<std::size_t>(max_threads_), count);
  {
    JoiningThreads threads;
    // The calling thread is one of the workers.
    for (std::size_t t = 1; t < workers; ++t) threads.start(work);
    work();
  }
  for (const auto& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

std::vector<CompileOutcome> CompilePool::compile(
    const std::vector<CompileRequest>& requests) const {
  std::vector<CompileOutcome> outcomes(requests.size());
  parallel_for(requests.size(), [&](std::size_t i) {
    try {
      outcomes[i].kernel = std::make_shared<const CompiledKernel>(compile_cuda(requests[i]));
    } catch (const std::exception& e) {
      outcomes[i].error = e.what();
    }
  });
  return outcomes;
}

}  // namespace mybackend
