// The device helpers (device/*.cuh), embedded at build time, and the step
// that turns an emitted kernel into an NVRTC request carrying them.
#pragma once

#include <string_view>
#include <vector>

#include "codegen/emit.h"
#include "codegen/nvrtc.h"

namespace mybackend {

// Every embedded header, in the fixed order sources.cmake lists them.
const std::vector<SourceFile>& device_sources();

CompileRequest compile_request(const EmittedKernel& kernel, const NvrtcOptions& options);

}  // namespace mybackend
