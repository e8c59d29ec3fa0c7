// NVRTC: CUDA C++ source -> PTX (compute_XX) or CUBIN (sm_XX). Both work
// without a GPU, which is what lets CPU CI compile every generated kernel.
#pragma once

#include <nvrtc.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mybackend {

// The architecture compiled for. A "compute_XX" target gives PTX (the
// driver JIT-compiles it at load); "sm_XX" gives CUBIN (machine code, no
// JIT), which is what the runtime uses for the GPU it runs on.
struct GpuTarget {
  int arch = 90;               // compute capability x 10
  bool arch_specific = false;  // the "a" variants (sm_90a): wgmma, setmaxnreg
  bool cubin = false;

  // "sm_90", "sm_90a", "compute_90", "compute_90a".
  static GpuTarget parse(std::string_view text);
  std::string name() const;
};

struct NvrtcOptions {
  GpuTarget target;
  bool lineinfo = false;
  // Off by default: IEEE division, sqrt and denormals keep results equal to
  // eager's (Note [No fast math] in docs/design/0003-codegen.md).
  bool fast_math = false;
  std::vector<std::string> include_paths;  // only for sources that include toolkit headers
  std::vector<std::string> extra;          // passed through as is

  // The NVRTC option list, in a fixed order (it is part of the cache key).
  std::vector<std::string> to_strings() const;
};

struct SourceFile {
  std::string name;  // as #include spells it
  std::string text;
};

struct CompileRequest {
  std::string name;  // the program's name in logs, e.g. "mb_pointwise_0123abcd.cu"
  std::string source;
  std::vector<SourceFile> headers;
  NvrtcOptions options;
};

enum class ImageKind : std::int8_t { Ptx, Cubin };

struct CompiledKernel {
  ImageKind kind = ImageKind::Ptx;
  std::string image;  // PTX text (no trailing NUL) or CUBIN bytes
  std::string log;    // NVRTC's warnings, if any
};

// RAII for one nvrtcProgram.
class NvrtcProgram {
 public:
  NvrtcProgram(const std::string& source, const std::string& name,
               const std::vector<SourceFile>& headers);
  ~NvrtcProgram();
  NvrtcProgram(const NvrtcProgram&) = delete;
  NvrtcProgram& operator=(const NvrtcProgram&) = delete;
  NvrtcProgram(NvrtcProgram&& other) noexcept : program_(std::exchange(other.program_, nullptr)) {}
  NvrtcProgram& operator=(NvrtcProgram&& other) noexcept;

  // Compiles; returns the log (warnings) or throws Error carrying the log.
  std::string compile(const std::vector<std::string>& options);
  std::string log() const;
  std::string ptx() const;
  std::string cubin() const;

 private:
  nvrtcProgram program_ = nullptr;
};

// One request, start to finish. Throws Error (with NVRTC's log) on failure.
CompiledKernel compile_cuda(const CompileRequest& request);

// "13.0": part of every kernel cache key.
std::string nvrtc_version();
// Architectures this NVRTC can target, e.g. {75, 80, ..., 90, 100, 120}.
std::vector<int> nvrtc_supported_archs();

}  // namespace mybackend
