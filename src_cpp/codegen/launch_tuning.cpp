#include "codegen/launch_tuning.h"

#include <algorithm>
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
         " pw_coalesce_dims=" + std::to_string(pw_coalesce_dims) +
         " norm_block=" + std::to_string(norm_block) +
         " norm_vec_per_thread=" + std::to_string(norm_vec_per_thread) +
         " norm_blocks_per_sm=" + std::to_string(norm_blocks_per_sm) +
         " softmax_block=" + std::to_string(softmax_block) +
         " softmax_blocks_per_sm=" + std::to_string(softmax_blocks_per_sm) +
         " bn_row_unroll=" + std::to_string(bn_row_unroll) +
         " bn_blocks_per_sm=" + std::to_string(bn_blocks_per_sm) +
         " bn_chunk_passes=" + std::to_string(bn_chunk_passes) +
         " bn_min_blocks=" + std::to_string(bn_min_blocks) +
         " bn_max_lanes=" + std::to_string(bn_max_lanes) +
         " norm_wide_warps_per_sm=" + std::to_string(norm_wide_warps_per_sm);
}

LaunchTuning launch_tuning_from(const char* (*env)(const char*)) {
  LaunchTuning t;
  t.pw_block = knob(env, "MYBACKEND_PW_BLOCK", t.pw_block, {64, 128, 256, 512, 1024});
  t.pw_vec_per_thread = knob(env, "MYBACKEND_PW_VEC_PER_THREAD", t.pw_vec_per_thread, {1, 2, 4, 8});
  t.pw_blocks_per_sm =
      knob(env, "MYBACKEND_PW_BLOCKS_PER_SM", t.pw_blocks_per_sm, {0, 1, 2, 4, 8, 16, 32});
  t.pw_coalesce_dims = knob(env, "MYBACKEND_PW_COALESCE_DIMS", t.pw_coalesce_dims, {0, 1});
  t.norm_block = knob(env, "MYBACKEND_NORM_BLOCK", t.norm_block, {64, 128, 256, 512, 1024});
  t.norm_vec_per_thread =
      knob(env, "MYBACKEND_NORM_VEC_PER_THREAD", t.norm_vec_per_thread, {1, 2, 4, 8, 16});
  t.norm_blocks_per_sm =
      knob(env, "MYBACKEND_NORM_BLOCKS_PER_SM", t.norm_blocks_per_sm, {0, 1, 2, 4, 8, 16, 32});
  t.softmax_block =
      knob(env, "MYBACKEND_SOFTMAX_BLOCK", t.softmax_block, {64, 128, 256, 512, 1024});
  t.softmax_blocks_per_sm = knob(env, "MYBACKEND_SOFTMAX_BLOCKS_PER_SM", t.softmax_blocks_per_sm,
                                 {0, 1, 2, 4, 8, 16, 32});
  t.bn_row_unroll = knob(env, "MYBACKEND_BN_ROW_UNROLL", t.bn_row_unroll, {1, 2, 4, 8});
  t.bn_blocks_per_sm =
      knob(env, "MYBACKEND_BN_BLOCKS_PER_SM", t.bn_blocks_per_sm, {0, 1, 2, 4, 8, 16, 32});
  t.bn_chunk_passes =
      knob(env, "MYBACKEND_BN_CHUNK_PASSES", t.bn_chunk_passes, {1, 2, 4, 8, 16, 32, 64});
  t.bn_min_blocks = knob(env, "MYBACKEND_BN_MIN_BLOCKS", t.bn_min_blocks, {0, 1, 2, 3, 4});
  t.bn_max_lanes = knob(env, "MYBACKEND_BN_MAX_LANES", t.bn_max_lanes, {8, 16, 32, 64, 128, 256});
  t.norm_wide_warps_per_sm = knob(env, "MYBACKEND_NORM_WIDE_WARPS_PER_SM", t.norm_wide_warps_per_sm,
                                  {0, 1, 2, 4, 8, 16, 32, 64, 1024});
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

int norm_row_threads(const KernelEntry& entry, std::int64_t cols) {
  const int vec = std::max(1, entry.elements_per_thread);
  const std::int64_t per_thread = entry.row_elements_per_thread;
  if (per_thread <= 0 || cols % vec != 0) return 0;
  int block = 1;
  while (block * 2 <= entry.block_x) block *= 2;
  int tpr = 1;
  while (tpr < block && tpr * per_thread < cols) tpr *= 2;
  return tpr * per_thread < cols ? 0 : tpr;
}

std::int64_t norm_rows_per_block(const KernelEntry& entry, std::int64_t cols) {
  const int tpr = norm_row_threads(entry, cols);
  return tpr == 0 ? 1 : entry.block_x / tpr;
}

bool norm_prefers_wide_rows(const KernelEntry& narrow, const KernelEntry& wide, std::int64_t rows,
                            std::int64_t cols, int sm_count) {
  const int narrow_tpr = norm_row_threads(narrow, cols);
  if (narrow_tpr == 0 || norm_row_block_threads(wide, cols) == 0) return false;
  const std::int64_t warps = (rows * narrow_tpr + 31) / 32;
  return warps <
         static_cast<std::int64_t>(launch_tuning().norm_wide_warps_per_sm) * std::max(1, sm_count);
}

int norm_row_block_threads(const KernelEntry& wide, std::int64_t cols) {
  const int vec = std::max(1, wide.elements_per_thread);
  if (cols <= 0 || cols % vec != 0) return 0;
  const std::int64_t threads = (cols / vec + 31) / 32 * 32;
  return threads > wide.block_x ? 0 : static_cast<int>(threads);
}

KernelEntry norm_launch_shape(const KernelEntry& entry, std::int64_t rows, std::int64_t cols,
                              int sm_count) {
  KernelEntry out = entry;
  while (out.block_x > 32) {
    const std::int64_t per_block = norm_rows_per_block(out, cols);
    if (per_block <= 1 || (rows + per_block - 1) / per_block >= sm_count) break;
    KernelEntry smaller = out;
    smaller.block_x /= 2;
    if (norm_rows_per_block(smaller, cols) * 2 != per_block) break;  // tpr would change
    out = smaller;
  }
  return out;
}

std::string outer_tile_assert() {
  return "static_assert(mb::kOuterTileColumns == " + std::to_string(kOuterTileColumns) +
         ", \"the host sizes outer-reduction grids by another tile width\");\n\n";
}

std::int64_t outer_column_tiles(std::int64_t outer, std::int64_t inner) {
  return outer * ((inner + kOuterTileColumns - 1) / kOuterTileColumns);
}

std::int64_t outer_row_splits(std::int64_t tiles, std::int64_t n, int sm_count,
                              std::int64_t min_rows) {
  const std::int64_t wanted_blocks = 4 * static_cast<std::int64_t>(std::max(1, sm_count));
  const std::int64_t wanted = (wanted_blocks + tiles - 1) / std::max<std::int64_t>(1, tiles);
  return std::max<std::int64_t>(1, std::min(wanted, n / std::max<std::int64_t>(1, min_rows)));
}

}  // namespace mybackend
