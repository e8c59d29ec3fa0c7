# The memory plan, the dims coalescing and the fast divisors are torch-free (Note [Memory plan],
# Note [Coalesced dims]): they sit in the core library, so tests/cpp tests
# them without torch.
list(APPEND CORE_SOURCES runtime/memory_plan.cpp runtime/coalesced_dims.cpp
  runtime/fast_divisors.cpp)
list(APPEND RUNTIME_SOURCES runtime/aten_call.cpp runtime/builtin_ops.cpp
  runtime/symbol_binder.cpp runtime/executor.cpp runtime/group_floor.cpp runtime/kernel_kinds.cpp
  runtime/cuda_graph_runner.cpp runtime/graph_memory.cpp runtime/planned_outputs.cpp
  runtime/recovery_window.cpp runtime/input_versions.cpp runtime/rng_state.cpp
  runtime/view_replay.cpp runtime/host_times.cpp runtime/tensor_alias.cpp)
# Generated kernels at run time: the compile batches, the driver API, and
# one launcher per generated kind (each compiles to nothing without CUDA).
list(APPEND RUNTIME_SOURCES runtime/generated/background_compile.cpp
  runtime/generated/cuda_driver.cpp runtime/generated/generated_kernel.cpp
  runtime/generated/kernel_launch.cpp runtime/generated/pointwise_kernel.cpp
  runtime/generated/cast_group_kernel.cpp runtime/generated/pool_kernel.cpp
  runtime/generated/transpose_kernel.cpp
  runtime/generated/reduction_kernel.cpp runtime/generated/norm_kernel.cpp
  runtime/generated/cross_entropy_kernel.cpp runtime/generated/batch_norm_kernel.cpp)
# Library runners: cuBLASLt products, cuDNN attention and convolutions.
list(APPEND RUNTIME_SOURCES runtime/libraries/matmul_group.cpp
  runtime/libraries/attention_group.cpp runtime/libraries/conv_group.cpp)
