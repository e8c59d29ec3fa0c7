list(APPEND RUNTIME_SOURCES runtime/aten_call.cpp runtime/builtin_ops.cpp
  runtime/symbol_binder.cpp runtime/executor.cpp runtime/cuda_graph_runner.cpp)
list(APPEND RUNTIME_SOURCES runtime/cuda_driver.cpp runtime/generated_kernel.cpp
  runtime/kernel_launch.cpp runtime/pointwise_kernel.cpp runtime/reduction_kernel.cpp
  runtime/norm_kernel.cpp runtime/matmul_group.cpp runtime/attention_group.cpp
  runtime/conv_group.cpp)
