#include "codegen/launch_tuning.h"

#include <algorithm>

namespace mybackend {

int norm_row_threads(const KernelEntry& entry, std::int64_t cols) {
  const int vec = std::max(1, entry.elements_per_thread);
  std::int64_t per_thread = entry.row_elements_per_thread;
  if (per_thread <= 0) return 0;
  // A row of partial vectors holds scalars (Note [Scalar rows in registers]
  // in device/mb_norm.cuh).
  if (cols % vec != 0) per_thread /= vec;
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
                            std::int64_t cols, int sm_count, const LaunchTuning& tuning) {
  const int narrow_tpr = norm_row_threads(narrow, cols);
  if (narrow_tpr == 0 || norm_row_block_threads(wide, cols) == 0) return false;
  const std::int64_t warps = (rows * narrow_tpr + 31) / 32;
  return warps < static_cast<std::int64_t>(tuning.norm_wide_warps_per_sm) * std::max(1, sm_count);
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
         " && mb::kNarrowOuterTileColumns == " + std::to_string(kNarrowOuterTileColumns) +
         ", \"the host sizes outer-reduction grids by another tile width\");\n\n";
}

std::int64_t outer_column_tiles(std::int64_t outer, std::int64_t inner, std::int64_t width) {
  return outer * ((inner + width - 1) / width);
}

std::int64_t outer_row_splits(std::int64_t tiles, std::int64_t n, int sm_count,
                              std::int64_t min_rows) {
  const std::int64_t wanted_blocks = 4 * static_cast<std::int64_t>(std::max(1, sm_count));
  const std::int64_t wanted = (wanted_blocks + tiles - 1) / std::max<std::int64_t>(1, tiles);
  return std::max<std::int64_t>(1, std::min(wanted, n / std::max<std::int64_t>(1, min_rows)));
}

}  // namespace mybackend
