#include "spec/launch_tuning.h"

#include <cstdlib>
#include <vector>

namespace mybackend {
namespace {

// Every knob once: its name (the option key; the environment variable is
// MYBACKEND_ and the name in capitals), its field, and its allowed values.
struct Knob {
  const char* name;
  int LaunchTuning::*field;
  std::vector<int> allowed;
};

const std::vector<Knob>& knobs() {
  static const std::vector<Knob> table = {
      {"pw_block", &LaunchTuning::pw_block, {64, 128, 256, 512, 1024}},
      {"pw_vec_per_thread", &LaunchTuning::pw_vec_per_thread, {1, 2, 4, 8}},
      {"pw_blocks_per_sm", &LaunchTuning::pw_blocks_per_sm, {0, 1, 2, 4, 8, 16, 32}},
      {"pw_coalesce_dims", &LaunchTuning::pw_coalesce_dims, {0, 1}},
      {"pw_fast_divisors", &LaunchTuning::pw_fast_divisors, {0, 1}},
      {"norm_block", &LaunchTuning::norm_block, {64, 128, 256, 512, 1024}},
      {"norm_vec_per_thread", &LaunchTuning::norm_vec_per_thread, {1, 2, 4, 8, 16}},
      {"norm_blocks_per_sm", &LaunchTuning::norm_blocks_per_sm, {0, 1, 2, 4, 8, 16, 32}},
      {"softmax_block", &LaunchTuning::softmax_block, {64, 128, 256, 512, 1024}},
      {"softmax_blocks_per_sm", &LaunchTuning::softmax_blocks_per_sm, {0, 1, 2, 4, 8, 16, 32}},
      {"bn_row_unroll", &LaunchTuning::bn_row_unroll, {1, 2, 4, 8}},
      {"bn_blocks_per_sm", &LaunchTuning::bn_blocks_per_sm, {0, 1, 2, 4, 8, 16, 32}},
      {"bn_chunk_passes", &LaunchTuning::bn_chunk_passes, {1, 2, 4, 8, 16, 32, 64}},
      {"bn_min_blocks", &LaunchTuning::bn_min_blocks, {0, 1, 2, 3, 4}},
      {"bn_max_lanes", &LaunchTuning::bn_max_lanes, {8, 16, 32, 64, 128, 256}},
      {"norm_wide_warps_per_sm",
       &LaunchTuning::norm_wide_warps_per_sm,
       {0, 1, 2, 4, 8, 16, 32, 64, 1024}},
  };
  return table;
}

bool allowed(const Knob& knob, long value) {
  for (int a : knob.allowed)
    if (a == value) return true;
  return false;
}

std::string environment_name(const char* name) {
  std::string out = "MYBACKEND_";
  for (const char* c = name; *c != '\0'; ++c)
    out += static_cast<char>(*c >= 'a' && *c <= 'z' ? *c - 'a' + 'A' : *c);
  return out;
}

}  // namespace

std::string LaunchTuning::to_string() const {
  std::string out;
  for (const Knob& knob : knobs())
    out +=
        (out.empty() ? "" : " ") + std::string(knob.name) + "=" + std::to_string(this->*knob.field);
  return out;
}

std::string set_launch_knob(LaunchTuning& tuning, const std::string& name, int value) {
  for (const Knob& knob : knobs()) {
    if (name != knob.name) continue;
    if (!allowed(knob, value)) {
      std::string values;
      for (int a : knob.allowed) values += (values.empty() ? "" : ", ") + std::to_string(a);
      return "launch tuning knob " + name + " takes one of " + values + ", not " +
             std::to_string(value);
    }
    tuning.*knob.field = value;
    return {};
  }
  std::string names;
  for (const Knob& knob : knobs()) names += (names.empty() ? "" : ", ") + std::string(knob.name);
  return "unknown launch tuning knob '" + name + "'; the knobs are " + names;
}

LaunchTuning launch_tuning_from(const char* (*env)(const char*)) {
  LaunchTuning t;
  for (const Knob& knob : knobs()) {
    const char* text = env(environment_name(knob.name).c_str());
    if (text == nullptr || *text == '\0') continue;
    char* end = nullptr;
    const long value = std::strtol(text, &end, 10);
    if (end != text && *end == '\0' && allowed(knob, value))
      t.*knob.field = static_cast<int>(value);
  }
  return t;
}

}  // namespace mybackend
