# Stage 8a: CUDA C++ code generation. Built into mybackend_codegen only when
# CUDA is enabled (see src_cpp/CMakeLists.txt): NVRTC, no torch.
#
# The specs themselves are in spec/. emit_common (KernelParam's sizes) and
# the launch tuning need neither NVRTC nor torch: they are in the core
# library, because the fusion planner (stage 7, core) reads the tuning in
# every build, CPU-only ones included.
list(APPEND CORE_SOURCES
  codegen/emit_common.cpp
  codegen/launch_tuning.cpp)
list(APPEND CODEGEN_SOURCES
  codegen/emit_pointwise.cpp
  codegen/emit_reduction.cpp
  codegen/emit_norm.cpp
  codegen/emit_cast_group.cpp
  codegen/emit_pool.cpp
  codegen/emit_transpose.cpp
  codegen/device_sources.cpp
  codegen/nvrtc.cpp
  codegen/compile_pool.cpp
  codegen/kernel_cache.cpp
  codegen/cache_file.cpp)

# The device helpers are compiled by NVRTC at run time, so their text is
# embedded in the library (Note [No toolkit headers] in device/mb_types.cuh).
# The list is explicit so that the embedded order, and with it every source
# hash, is stable; editing any of them re-runs this step.
set(_mb_device_headers
  mb_types.cuh
  mb_vector_io.cuh
  mb_math.cuh
  mb_reduce.cuh
  mb_reduction.cuh
  mb_norm.cuh
  mb_cross_entropy.cuh
  mb_batch_norm.cuh
  mb_group_norm.cuh
  mb_cast_table.cuh
  mb_cast_group.cuh
  mb_pool.cuh
  mb_transpose.cuh)
set(MB_DEVICE_SOURCE_ENTRIES "")
foreach(_mb_header ${_mb_device_headers})
  set(_mb_path ${CMAKE_CURRENT_LIST_DIR}/device/${_mb_header})
  file(READ ${_mb_path} _mb_text)
  string(FIND "${_mb_text}" ")mbcuh\"" _mb_clash)
  if(NOT _mb_clash EQUAL -1)
    message(FATAL_ERROR "${_mb_path} contains the raw-string delimiter )mbcuh\"")
  endif()
  string(APPEND MB_DEVICE_SOURCE_ENTRIES
    "    {\"${_mb_header}\", R\"mbcuh(${_mb_text})mbcuh\"},\n")
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_mb_path})
endforeach()
configure_file(${CMAKE_CURRENT_LIST_DIR}/embedded_device_sources.h.in
               ${CMAKE_CURRENT_BINARY_DIR}/generated/embedded_device_sources.h @ONLY)
unset(_mb_text)
unset(MB_DEVICE_SOURCE_ENTRIES)
