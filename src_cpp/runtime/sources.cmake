# The memory plan and the dims coalescing are torch-free (Note [Memory plan],
# Note [Coalesced dims]): they sit in the core library, so tests/cpp tests
# them without torch.
list(APPEND CORE_SOURCES runtime/memory_plan.cpp runtime/coalesced_dims.cpp)
list(APPEND RUNTIME_SOURCES runtime/aten_call.cpp runtime/builtin_ops.cpp
  runtime/symbol_binder.cpp runtime/executor.cpp runtime/cuda_graph_runner.cpp
  runtime/graph_memory.cpp runtime/planned_outputs.cpp runtime/recovery_window.cpp
  runtime/input_versions.cpp runtime/background_compile.cpp runtime/rng_state.cpp)
list(APPEND RUNTIME_SOURCES runtime/cuda_driver.cpp runtime/generated_kernel.cpp
  runtime/kernel_launch.cpp runtime/pointwise_kernel.cpp runtime/cast_group_kernel.cpp runtime/pool_kernel.cpp
  runtime/reduction_kernel.cpp
  runtime/norm_kernel.cpp runtime/cross_entropy_kernel.cpp runtime/batch_norm_kernel.cpp runtime/matmul_group.cpp runtime/attention_group.cpp
  runtime/conv_group.cpp)
