// What the codegen tests that read PTX share (CUDA builds only): emitted
// kernels compiled with NVRTC to PTX for compute_90 through the compile
// pool, and patterns over that PTX.
#pragma once

#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "codegen/compile_pool.h"
#include "codegen/device_sources.h"
#include "codegen/emit.h"

namespace mybackend {
namespace {

// emit(spec) of each spec, compiled; a failure fails the test with the
// spec, the compiler's log and the source.
template <class Spec, class Emit>
std::vector<CompileOutcome> compile_to_ptx(const std::vector<Spec>& specs, Emit emit) {
  NvrtcOptions options;
  options.target = GpuTarget::parse("compute_90");
  std::vector<CompileRequest> requests;
  std::vector<EmittedKernel> kernels;
  for (const auto& spec : specs) {
    kernels.push_back(emit(spec));
    requests.push_back(compile_request(kernels.back(), options));
  }
  std::vector<CompileOutcome> outcomes = CompilePool().compile(requests);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    EXPECT_TRUE(outcomes[i].ok()) << specs[i].to_string() << outcomes[i].error << "\n"
                                  << kernels[i].source;
  }
  return outcomes;
}

[[maybe_unused]] bool has(const std::string& text, const std::string& pattern) {
  return std::regex_search(text, std::regex(pattern));
}

// ld.global(.nc).v4.u32 and the like: one 16-byte access.
const char* const k16ByteLoad = R"(ld\.global(\.nc)?\.(v4\.[bfsu]32|v2\.[bfsu]64)\s)";
const char* const k16ByteStore = R"(st\.global\.(v4\.[bfsu]32|v2\.[bfsu]64)\s)";
// Spills or arrays the compiler could not keep in registers.
const char* const kLocalMemory = R"(\.local|ld\.local|st\.local)";

}  // namespace
}  // namespace mybackend
