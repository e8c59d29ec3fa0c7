#include "codegen/launch_tuning.h"

#include <cstdlib>
#include <initializer_list>

namespace mybackend {
namespace {

// The value of `name` when it parses as one of `allowed`, else `fallback`.
int knob(const char* (*env)(const char*), const char* name, int fallback,
         std::initializer_list<int> allowed) {
  const char* text = env(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0') return fallback;
  for (int a : allowed) {
    if (a == value) return a;
  }
  return fallback;
}

const char* process_env(const char* name) { return std::getenv(name); }

const LaunchTuning* g_override = nullptr;

}  // namespace

std::string LaunchTuning::to_string() const {
  return "pw_block=" + std::to_string(pw_block) +
         " pw_vec_per_thread=" + std::to_string(pw_vec_per_thread) +
         " pw_blocks_per_sm=" + std::to_string(pw_blocks_per_sm) +
         " norm_block=" + std::to_string(norm_block) +
         " norm_vec_per_thread=" + std::to_string(norm_vec_per_thread) +
         " norm_blocks_per_sm=" + std::to_string(norm_blocks_per_sm) +
         " softmax_block=" + std::to_string(softmax_block) +
         " softmax_blocks_per_sm=" + std::to_string(softmax_blocks_per_sm);
}

LaunchTuning launch_tuning_from(const char* (*env)(const char*)) {
  LaunchTuning t;
  t.pw_block = knob(env, "MYBACKEND_PW_BLOCK", t.pw_block, {64, 128, 256, 512, 1024});
  t.pw_vec_per_thread = knob(env, "MYBACKEND_PW_VEC_PER_THREAD", t.pw_vec_per_thread, {1, 2, 4, 8});
  t.pw_blocks_per_sm =
      knob(env, "MYBACKEND_PW_BLOCKS_PER_SM", t.pw_blocks_per_sm, {0, 1, 2, 4, 8, 16, 32});
  t.norm_block = knob(env, "MYBACKEND_NORM_BLOCK", t.norm_block, {64, 128, 256, 512, 1024});
  t.norm_vec_per_thread =
      knob(env, "MYBACKEND_NORM_VEC_PER_THREAD", t.norm_vec_per_thread, {1, 2, 4, 8, 16});
  t.norm_blocks_per_sm =
      knob(env, "MYBACKEND_NORM_BLOCKS_PER_SM", t.norm_blocks_per_sm, {0, 1, 2, 4, 8, 16, 32});
  t.softmax_block =
      knob(env, "MYBACKEND_SOFTMAX_BLOCK", t.softmax_block, {64, 128, 256, 512, 1024});
  t.softmax_blocks_per_sm = knob(env, "MYBACKEND_SOFTMAX_BLOCKS_PER_SM", t.softmax_blocks_per_sm,
                                 {0, 1, 2, 4, 8, 16, 32});
  return t;
}

const LaunchTuning& launch_tuning() {
  static const LaunchTuning tuning = launch_tuning_from(&process_env);
  return g_override != nullptr ? *g_override : tuning;
}

ScopedLaunchTuning::ScopedLaunchTuning(const LaunchTuning& tuning)
    : previous_(g_override), tuning_(tuning) {
  g_override = &tuning_;
}

ScopedLaunchTuning::~ScopedLaunchTuning() { g_override = previous_; }

}  // namespace mybackend
