// Launch parameters of generated kernels that are worth sweeping on a GPU:
// part of the compile options (FusionOptions::tuning), copied into the
// specs that read them (Note [Tuning in the specs] in fusion/tuned_specs.h).
//
// Note [Launch tuning knobs]
// Each knob is a compile option whose default an environment variable can
// override for A/B runs, read at each compile (pipeline/environment.h, the
// one place the core reads them); a value that is not one of the allowed
// ones is ignored (the default applies) so that a typo cannot break a run.
// The fusion plan copies the tuning into the specs of the kernels that read
// it; there the knobs change the emitted source (compile-time constants)
// and, through KernelEntry, the launch. A spec prints a tuning other than
// the defaults, so its text, the source's comment block and the kernel
// cache's key all change with it. Every combination is correct because the
// kernels loop (grid-stride, predicated tails) and compute their row layout
// themselves. See docs/performance.md for what each knob trades.
#pragma once

#include <cstdint>
#include <string>

namespace mybackend {

struct LaunchTuning {
  // Pointwise kernels. 128 threads with one vector each: as fast as any
  // setting on 256 MiB chains, and the most blocks for the small tensors of
  // batch-1 models (docs/performance-history.md, "Pointwise launch shape").
  int pw_block = 128;         // MYBACKEND_PW_BLOCK: threads per block
  int pw_vec_per_thread = 1;  // MYBACKEND_PW_VEC_PER_THREAD: 16-byte vectors per thread and step
  int pw_blocks_per_sm = 0;   // MYBACKEND_PW_BLOCKS_PER_SM: grid cap (0: one tile per block)
  // MYBACKEND_PW_COALESCE_DIMS: merge the dims every tensor walks as one at
  // launch (Note [Coalesced dims] in runtime/coalesced_dims.h); 0 for A/B runs.
  int pw_coalesce_dims = 1;
  // MYBACKEND_PW_FAST_DIVISORS: the 32-bit variant's index math divides by
  // multiply and shift (Note [Divisors as multipliers] in
  // runtime/fast_divisors.h); 0 for A/B runs.
  int pw_fast_divisors = 1;
  // Row-wise norm / softmax kernels.
  int norm_block = 256;         // MYBACKEND_NORM_BLOCK: threads per block (a power of two)
  int norm_vec_per_thread = 4;  // MYBACKEND_NORM_VEC_PER_THREAD: vectors of a row one thread holds
  int norm_blocks_per_sm = 8;   // MYBACKEND_NORM_BLOCKS_PER_SM: grid cap (0: uncapped)
  // MYBACKEND_NORM_WIDE_WARPS_PER_SM: a forward layer or RMS norm takes its
  // row-per-block entry below this many warps a SM of the register path
  // (Note [Wide rows for few rows]; 0: never, 1024: always when it fits).
  int norm_wide_warps_per_sm = 8;
  // Softmax and log-softmax forward kernels (one input, one output per row)
  // favour smaller, uncapped blocks than the norms (docs/performance-history.md sweep).
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
  // against fp32 where 2 and 8 passes did not (docs/performance-history.md, 2026-11-26).
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

  // "pw_block=256 pw_vec_per_thread=2 ..." for reports, benchmarks and the
  // spec text (Note [Spec text is the identity]).
  std::string to_string() const;
  bool operator==(const LaunchTuning& other) const { return to_string() == other.to_string(); }
  bool operator!=(const LaunchTuning& other) const { return !(*this == other); }
};

// Sets knob `name` ("pw_block", as to_string() prints it) of `tuning`; the
// empty string, or why not (an unknown knob, a value it does not allow).
std::string set_launch_knob(LaunchTuning& tuning, const std::string& name, int value);

// The tuning `env` (a getenv-like lookup) selects: the defaults, each
// overridden by its MYBACKEND_* variable when that holds an allowed value.
// The compile options read the process's environment through it, in one
// place (pipeline/environment.h).
LaunchTuning launch_tuning_from(const char* (*env)(const char*));

}  // namespace mybackend
