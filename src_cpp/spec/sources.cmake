# The specs: the vocabulary between planning and running. Every kind of
# kernel group carries one (generated kernels' KernelSpecs, MatmulSpec,
# ConvSpec, AttentionSpec); fusion/ writes them, codegen/, libs/ and runtime/
# read them. Below all three, above ir/ and common/: no torch, no CUDA.
list(APPEND CORE_SOURCES
  spec/hexfloat.cpp
  spec/kernel_kind.cpp
  spec/kernel_spec.cpp
  spec/launch_tuning.cpp
  spec/pointwise_ops.cpp
  spec/spec_validate.cpp
  spec/matmul_spec.cpp
  spec/attention_spec.cpp
  spec/conv_spec.cpp
  spec/transpose_spec.cpp
  spec/spec_archive.cpp)
