#include "codegen/nvrtc.h"

#include <cctype>

#include "codegen/nvrtc_check.h"
#include "common/error.h"

namespace mybackend {

namespace detail {

void throw_nvrtc_failure(const char* call, nvrtcResult result, const char* file, int line,
                         const std::string& detail) {
  throw Error(concat("NVRTC call ", call, " failed: ", nvrtcGetErrorString(result), " [", file, ":",
                     line, "]", detail.empty() ? "" : "\n", detail));
}

}  // namespace detail

GpuTarget GpuTarget::parse(std::string_view text) {
  GpuTarget target;
  std::string_view digits;
  if (text.rfind("sm_", 0) == 0) {
    target.cubin = true;
    digits = text.substr(3);
  } else if (text.rfind("compute_", 0) == 0) {
    digits = text.substr(8);
  }
  if (!digits.empty() && digits.back() == 'a') {
    target.arch_specific = true;
    digits.remove_suffix(1);
  }
  bool numeric = !digits.empty() && digits.size() <= 4;
  for (char c : digits) numeric = numeric && std::isdigit(static_cast<unsigned char>(c));
  MB_CHECK(numeric, "GPU target '", text,
           "' is not of the form sm_XX, sm_XXa, compute_XX or compute_XXa");
  target.arch = std::stoi(std::string(digits));
  return target;
}

std::string GpuTarget::name() const {
  return (cubin ? "sm_" : "compute_") + std::to_string(arch) + (arch_specific ? "a" : "");
}

std::vector<std::string> NvrtcOptions::to_strings() const {
  std::vector<std::string> out = {"--gpu-architecture=" + target.name(), "-default-device",
                                  "-std=c++17"};
  if (lineinfo) out.push_back("-lineinfo");
  if (fast_math) out.push_back("--use_fast_math");
  for (const auto& path : include_paths) out.push_back("--include-path=" + path);
  out.insert(out.end(), extra.begin(), extra.end());
  return out;
}

NvrtcProgram::NvrtcProgram(const std::string& source, const std::string& name,
                           const std::vector<SourceFile>& headers) {
  std::vector<const char*> texts;
  std::vector<const char*> names;
  for (const auto& header : headers) {
    texts.push_back(header.text.c_str());
    names.push_back(header.name.c_str());
  }
  MB_NVRTC_CHECK(nvrtcCreateProgram(&program_, source.c_str(), name.c_str(),
                                    static_cast<int>(headers.size()), texts.data(), names.data()));
}

NvrtcProgram::~NvrtcProgram() {
  // A destructor cannot throw; destroying a valid program does not fail.
  if (program_ != nullptr) nvrtcDestroyProgram(&program_);
}

NvrtcProgram& NvrtcProgram::operator=(NvrtcProgram&& other) noexcept {
  if (this != &other) {
    if (program_ != nullptr) nvrtcDestroyProgram(&program_);
    program_ = std::exchange(other.program_, nullptr);
  }
  return *this;
}

std::string NvrtcProgram::compile(const std::vector<std::string>& options) {
  std::vector<const char*> argv;
  for (const auto& option : options) argv.push_back(option.c_str());
  MB_NVRTC_CHECK_DETAIL(nvrtcCompileProgram(program_, static_cast<int>(argv.size()), argv.data()),
                        "compile log:\n" + log());
  return log();
}

std::string NvrtcProgram::log() const {
  std::size_t size = 0;
  MB_NVRTC_CHECK(nvrtcGetProgramLogSize(program_, &size));
  std::string text(size, '\0');
  if (size > 0) MB_NVRTC_CHECK(nvrtcGetProgramLog(program_, text.data()));
  while (!text.empty() && (text.back() == '\0' || text.back() == '\n')) text.pop_back();
  return text;
}

std::string NvrtcProgram::ptx() const {
  std::size_t size = 0;
  MB_NVRTC_CHECK(nvrtcGetPTXSize(program_, &size));
  std::string text(size, '\0');
  if (size > 0) MB_NVRTC_CHECK(nvrtcGetPTX(program_, text.data()));
  while (!text.empty() && text.back() == '\0') text.pop_back();
  return text;
}

std::string NvrtcProgram::cubin() const {
  std::size_t size = 0;
  MB_NVRTC_CHECK(nvrtcGetCUBINSize(program_, &size));
  std::string bytes(size, '\0');
  if (size > 0) MB_NVRTC_CHECK(nvrtcGetCUBIN(program_, bytes.data()));
  return bytes;
}

CompiledKernel compile_cuda(const CompileRequest& request) {
  NvrtcProgram program(request.source, request.name, request.headers);
  CompiledKernel kernel;
  try {
    kernel.log = program.compile(request.options.to_strings());
  } catch (const Error& e) {
    // The program name says which kernel; the options say how it was built.
    std::string options;
    for (const auto& option : request.options.to_strings()) options += " " + option;
    throw Error(
        detail::concat("compiling ", request.name, " (options:", options, ") failed: ", e.what()));
  }
  kernel.kind = request.options.target.cubin ? ImageKind::Cubin : ImageKind::Ptx;
  kernel.image = kernel.kind == ImageKind::Cubin ? program.cubin() : program.ptx();
  MB_ASSERT(!kernel.image.empty(), "NVRTC compiled ", request.name, " but returned an empty image");
  return kernel;
}

std::string nvrtc_version() {
  int major = 0;
  int minor = 0;
  MB_NVRTC_CHECK(nvrtcVersion(&major, &minor));
  return std::to_string(major) + "." + std::to_string(minor);
}

std::vector<int> nvrtc_supported_archs() {
  int count = 0;
  MB_NVRTC_CHECK(nvrtcGetNumSupportedArchs(&count));
  std::vector<int> archs(static_cast<std::size_t>(count));
  if (count > 0) MB_NVRTC_CHECK(nvrtcGetSupportedArchs(archs.data()));
  return archs;
}

}  // namespace mybackend
