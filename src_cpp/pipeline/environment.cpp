#include "pipeline/environment.h"

#include <cstdlib>
#include <string>

namespace mybackend {
namespace {

const char* process_environment_variable(const char* name) { return std::getenv(name); }

bool switched_off(const char* value) {
  if (value == nullptr) return false;
  const std::string text(value);
  return text == "0" || text == "off" || text == "false";
}

bool switched_on(const char* value) {
  if (value == nullptr) return false;
  const std::string text(value);
  return text == "1" || text == "on" || text == "true";
}

}  // namespace

CompileOptions options_from_environment(const char* (*env)(const char*)) {
  CompileOptions options;
  options.fusion.tuning = launch_tuning_from(env);
  if (switched_off(env("MYBACKEND_GENERATED_KERNELS")))
    options.codegen.switched_off =
        "generated kernels are switched off by MYBACKEND_GENERATED_KERNELS";
  options.view_replay = !switched_off(env("MYBACKEND_VIEW_REPLAY"));
  options.host_times = switched_on(env("MYBACKEND_HOST_TIMES"));
  options.fusion.concatenations = !switched_off(env("MYBACKEND_FUSED_CATS"));
  options.fusion.row_epilogues = !switched_off(env("MYBACKEND_ROW_EPILOGUES"));
  if (const char* target = env("MYBACKEND_NVRTC_TARGET"); target != nullptr)
    options.codegen.forced_target = target;
  return options;
}

CompileOptions options_from_environment() {
  return options_from_environment(&process_environment_variable);
}

}  // namespace mybackend
