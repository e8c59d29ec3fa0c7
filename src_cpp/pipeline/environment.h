// The environment variables the compile options read, in one place.
//
// Note [Options from the environment]
// A few knobs are for A/B runs and debugging on a GPU machine, where
// changing the program's options is awkward: the launch tuning's
// MYBACKEND_PW_* / NORM_* / SOFTMAX_* / BN_* (Note [Launch tuning knobs]) and
// the generated-kernel kill switch MYBACKEND_GENERATED_KERNELS (Note
// [Generated-kernel kill switch]), MYBACKEND_VIEW_REPLAY=0 (views through
// the dispatcher on every call, Note [Views replayed without the
// dispatcher]), MYBACKEND_HOST_TIMES=1 (the executor's host time by step,
// Note [Host time by step]), MYBACKEND_FUSED_CATS=0 (concatenations left to ATen, Note
// [Concatenations in pointwise kernels]), MYBACKEND_ROW_EPILOGUES=0 (a row
// reduction's broadcast readers in a kernel of their own, Note [Row epilogues
// in the graph]) and MYBACKEND_NVRTC_TARGET, the target
// NVRTC compiles for instead of the GPU's. They are read here, at each compile, into
// the compile options that the options the caller passes then override; no
// other code of the core reads them, and nothing keeps them process-wide.
// (Where kernels are cached, MYBACKEND_CACHE_DIR, is resolved with the
// cache's location, and the compile trace MYBACKEND_DEBUG_POINTWISE where it
// prints, runtime/generated/generated_kernel.cpp.)
#pragma once

#include "pipeline/pipeline.h"

namespace mybackend {

// The defaults, with what this process's environment sets now.
CompileOptions options_from_environment();

// The same from a getenv-like lookup (tests).
CompileOptions options_from_environment(const char* (*env)(const char*));

}  // namespace mybackend
