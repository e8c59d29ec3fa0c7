// Launch parameters of generated kernels that are worth sweeping on a GPU,
// read once per process from the environment (Note [Launch tuning knobs]).
//
// Note [Launch tuning knobs]
// Each knob is an environment variable read the first time a kernel is
// planned or emitted; a value that is not one of the allowed ones is
// ignored (the default applies) so that a typo cannot break a run. The
// knobs change the emitted source (compile-time constants) and, through
// KernelEntry, the launch; every combination is correct because the
// kernels loop (grid-stride, predicated tails) and compute their row
// layout themselves, and the kernel cache keys on the source. See
// docs/performance.md for what each knob trades.
#pragma once

#include <cstdint>
#include <string>

#include "codegen/emit.h"

namespace mybackend {

struct LaunchTuning {
  // Pointwise kernels. 128 threads with one vector each: as fast as any
  // setting on 256 MiB chains, and the most blocks for the small tensors of
  // batch-1 models (docs/performance.md, "Pointwise launch shape").
  int pw_block = 128;         // MYBACKEND_PW_BLOCK: threads per block
  int pw_vec_per_thread = 1;  // MYBACKEND_PW_VEC_PER_THREAD: 16-byte vectors per thread and step
  int pw_blocks_per_sm = 0;   // MYBACKEND_PW_BLOCKS_PER_SM: grid cap (0: one tile per block)
  // MYBACKEND_PW_COALESCE_DIMS: merge the dims every tensor walks as one at
  // launch (Note [Coalesced dims] in runtime/coalesced_dims.h); 0 for A/B runs.
  int pw_coalesce_dims = 1;
  // Row-wise norm / softmax kernels.
  int norm_block = 256;         // MYBACKEND_NORM_BLOCK: threads per block (a power of two)
  int norm_vec_per_thread = 4;  // MYBACKEND_NORM_VEC_PER_THREAD: vectors of a row one thread holds
  int norm_blocks_per_sm = 8;   // MYBACKEND_NORM_BLOCKS_PER_SM: grid cap (0: uncapped)
  // MYBACKEND_NORM_WIDE_WARPS_PER_SM: a forward layer or RMS norm takes its
  // row-per-block entry below this many warps a SM of the register path
  // (Note [Wide rows for few rows]; 0: never, 1024: always when it fits).
  int norm_wide_warps_per_sm = 8;
  // Softmax and log-softmax forward kernels (one input, one output per row)
  // favour smaller, uncapped blocks than the norms (docs/performance.md sweep).
  int softmax_block = 128;        // MYBACKEND_SOFTMAX_BLOCK
  int softmax_blocks_per_sm = 0;  // MYBACKEND_SOFTMAX_BLOCKS_PER_SM
  // Batch-norm reductions' chunk stage (Note [Channel tiles] in
  // device/mb_batch_norm.cuh).
  int bn_row_unroll = 4;  // MYBACKEND_BN_ROW_UNROLL: rows a thread loads before accumulating
  // MYBACKEND_BN_BLOCKS_PER_SM: blocks wanted per SM (0: as many as one SM
  // holds at once, from the compiled kernel's occupancy: one full wave)
  int bn_blocks_per_sm = 0;
  int bn_chunk_passes = 2;  // MYBACKEND_BN_CHUNK_PASSES: unrolled passes a chunk has at least
  // MYBACKEND_BN_MAX_LANES: threads of a block across the channels at most
  // (the rest walk rows; Note [Channel tiles]). 32 lanes and 2 passes: the
  // best ResNet-50 training step of the H200 sweep with 4 passes (12.205 vs
  // 12.196 ms), whose bf16 gradients at batch 2 fell under eager's cosine
  // against fp32 where 2 and 8 passes did not (docs/performance.md, 2026-11-26).
  int bn_max_lanes = 32;
  // MYBACKEND_BN_MIN_BLOCKS: the chunk stage's __launch_bounds__ blocks per
  // SM (0: the compiler's register choice)
  int bn_min_blocks = 0;

  // Threads per block and grid cap of a row-wise kernel of `softmax_forward`
  // kind (softmax/log-softmax forward) or any other norm kind.
  int row_block(bool softmax_forward) const { return softmax_forward ? softmax_block : norm_block; }
  int row_blocks_per_sm(bool softmax_forward) const {
    return softmax_forward ? softmax_blocks_per_sm : norm_blocks_per_sm;
  }

  // "pw_block=256 pw_vec_per_thread=2 ..." for reports and benchmarks.
  std::string to_string() const;
};

// The process-wide tuning: defaults overridden by the environment, read on
// the first call.
const LaunchTuning& launch_tuning();

// The tuning `env` (a getenv-like lookup) selects; exposed for tests.
LaunchTuning launch_tuning_from(const char* (*env)(const char*));

// Replaces launch_tuning() while alive (tests that emit every knob value;
// not for concurrent use with planning or emitting on other threads).
class ScopedLaunchTuning {
 public:
  explicit ScopedLaunchTuning(const LaunchTuning& tuning);
  ~ScopedLaunchTuning();
  ScopedLaunchTuning(const ScopedLaunchTuning&) = delete;
  ScopedLaunchTuning& operator=(const ScopedLaunchTuning&) = delete;

 private:
  const LaunchTuning* previous_;
  LaunchTuning tuning_;
};

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
                            std::int64_t cols, int sm_count);
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

// The line an emitted source carries to assert that agreement.
std::string outer_tile_assert();

// Column tiles of an outer reduction over `outer` slices of `inner` columns.
std::int64_t outer_column_tiles(std::int64_t outer, std::int64_t inner);

// Chunks for a reduction over n whose one-pass kernel has `tiles` blocks
// (an outer reduction's column tiles, Note [Split outer reductions], Note
// [Split parameter grads]; an inner reduction's rows, Note [Split inner
// reductions]): enough blocks for about four per SM, each chunk at least
// min_rows long; 1 when the one-pass blocks alone fill the GPU.
std::int64_t outer_row_splits(std::int64_t tiles, std::int64_t n, int sm_count,
                              std::int64_t min_rows);

}  // namespace mybackend
