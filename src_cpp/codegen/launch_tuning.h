// How generated kernels' launches are shaped from their specs' tuning
// (Note [Launch tuning knobs] in spec/launch_tuning.h): rows per block, the
// wide-row entry, grid sizes.
#pragma once

#include <cstdint>
#include <string>

#include "codegen/emit.h"
#include "spec/launch_tuning.h"

namespace mybackend {

// Rows one block of a forward norm `entry` covers per step:
// mb::row_threads of device/mb_norm.cuh (Note [Rows in registers]) repeated
// on the host; 1 when rows take the loop path. Only the grid size depends
// on it; the kernel computes its own layout.
std::int64_t norm_rows_per_block(const KernelEntry& entry, std::int64_t cols);
// Threads per row of that register path (mb::row_threads); 0 for the loop path.
int norm_row_threads(const KernelEntry& entry, std::int64_t cols);

// Note [Wide rows for few rows]
// The register path spreads a row over tpr threads of `norm_vec_per_thread`
// 16-byte vectors each. Few rows make the kernel latency-bound, and then the
// per-thread chain (loads, two reductions, the normalized stores) sets its
// time: on an H200 (2026-11-26), 197 rows of 768 bf16 took 3.20 us with 4
// vectors a thread, 2.58 with 1, Inductor 1.53. A forward layer or RMS norm
// kernel therefore carries a second entry, "_wide": a block per row, one
// vector a thread (Note [A row per block] in device/mb_norm.cuh: 1.63 us as
// a prototype). The launch takes it while the register path would put fewer
// than norm_wide_warps_per_sm warps on each SM (8: between the measured
// points, 1.5 warps a SM where wide won and 24 where the register path was
// the default; the knob is there to sweep it) and the row fits one block of
// at most kRowBlockMaxThreads threads: its __launch_bounds__. 512 (rows of up
// to 4096 bf16): at 1024 ptxas gave the bf16 layer norm 32 registers and a
// stack, at 512 39 registers and none.
enum : int { kRowBlockMaxThreads = 512 };
bool norm_prefers_wide_rows(const KernelEntry& narrow, const KernelEntry& wide, std::int64_t rows,
                            std::int64_t cols, int sm_count, const LaunchTuning& tuning);
// Threads of the row-per-block entry for rows of `cols`: one vector each,
// rounded up to whole warps; 0 when the row has no whole vectors or does
// not fit one block.
int norm_row_block_threads(const KernelEntry& wide, std::int64_t cols);

// Note [Few rows, smaller blocks]
// A forward kernel holds blockDim.x / tpr rows per block, so a small problem
// (BERT's 128 rows of 768 at batch 1) fills only a few blocks and leaves
// most SMs idle while each block walks its rows. The kernel reads the block
// size at run time, so the launch halves it (down to one warp) while the
// grid has fewer blocks than the device has SMs and the smaller block still
// holds whole row groups: same threads per row, more blocks, shorter time.
KernelEntry norm_launch_shape(const KernelEntry& entry, std::int64_t rows, std::int64_t cols,
                              int sm_count);

// Columns one block of an outer (column) reduction owns: the device code's
// mb::kOuterTileColumns (Note [Outer reduction tiles]); every emitted outer
// reduction asserts the two agree.
constexpr std::int64_t kOuterTileColumns = 128;
// The narrow entry's tile (Note [Narrow outer tiles]): mb::kNarrowOuterTileColumns.
constexpr std::int64_t kNarrowOuterTileColumns = 32;

// The line an emitted source carries to assert that agreement.
std::string outer_tile_assert();

// Column tiles of an outer reduction over `outer` slices of `inner` columns,
// `width` columns a tile.
std::int64_t outer_column_tiles(std::int64_t outer, std::int64_t inner,
                                std::int64_t width = kOuterTileColumns);

// Chunks for a reduction over n whose one-pass kernel has `tiles` blocks
// (an outer reduction's column tiles, Note [Split outer reductions], Note
// [Split parameter grads]; an inner reduction's rows, Note [Split inner
// reductions]): enough blocks for about four per SM, each chunk at least
// min_rows long; 1 when the one-pass blocks alone fill the GPU.
std::int64_t outer_row_splits(std::int64_t tiles, std::int64_t n, int sm_count,
                              std::int64_t min_rows);

}  // namespace mybackend
