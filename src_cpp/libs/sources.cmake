# Stage 8b: library wrappers (cuBLASLt, cuDNN). They need torch (caching allocator,
# current stream) and the CUDA toolkit, so they are runtime sources of CUDA
# builds only; runtime/libraries/matmul_group.cpp reaches them under MYBACKEND_WITH_CUDA.
if(MYBACKEND_WITH_CUDA)
  list(APPEND RUNTIME_SOURCES
    libs/cublaslt_check.cpp
    libs/cublaslt_handles.cpp
    libs/cublaslt_algo_cache.cpp
    libs/cublaslt_gemm.cpp)
endif()

# cuDNN (cmake/cudnn.cmake, Note [Which cuDNN]): handles and status checks.
if(MYBACKEND_WITH_CUDNN)
  list(APPEND RUNTIME_SOURCES
    libs/cudnn_check.cpp
    libs/cudnn_handles.cpp
    # The frontend graphs: the only sources that include cudnn_frontend.h.
    libs/cudnn_sdpa.cpp
    libs/cudnn_conv.cpp)
endif()
