# cuDNN for CUDA engine II (convolution and attention graphs).
#
# Note [Which cuDNN]
# The library is the one torch already loads: the nvidia-cudnn-cu13 wheel that
# torch's own wheel depends on (site-packages/nvidia/cudnn). Linking a second
# libcudnn from the toolkit would put two copies in one process. Its headers
# come from the same wheel, so headers and library always agree. The cuDNN
# frontend (header-only C++ API) comes from the nvidia-cudnn-frontend wheel,
# a declared build dependency (pyproject.toml); both are found through the
# Python interpreter the build uses, so a `pip install --target` folder on
# PYTHONPATH works as well as site-packages. MYBACKEND_CUDNN_ROOT and
# MYBACKEND_CUDNN_FRONTEND_INCLUDE override the search.
#
# Sets MYBACKEND_WITH_CUDNN and the imported target mybackend::cudnn.

set(MYBACKEND_WITH_CUDNN OFF)
if(NOT MYBACKEND_WITH_CUDA)
  return()
endif()

execute_process(
  COMMAND ${Python_EXECUTABLE} -c [=[
import importlib.metadata as md, importlib.util, os
def frontend():
    try:
        for f in md.files("nvidia-cudnn-frontend") or []:
            if f.name == "cudnn_frontend.h":
                return os.path.dirname(str(f.locate()))
    except md.PackageNotFoundError:
        pass
    return ""
def cudnn_root():
    spec = importlib.util.find_spec("nvidia.cudnn")
    return list(spec.submodule_search_locations)[0] if spec else ""
print(frontend()); print(cudnn_root())
]=]
  OUTPUT_VARIABLE _cudnn_probe OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _cudnn_probe_rc)
set(_frontend_dir "")
set(_cudnn_root "")
if(_cudnn_probe_rc EQUAL 0)
  string(REPLACE "\n" ";" _cudnn_probe "${_cudnn_probe};;")
  list(GET _cudnn_probe 0 _frontend_dir)
  list(GET _cudnn_probe 1 _cudnn_root)
endif()
if(DEFINED MYBACKEND_CUDNN_FRONTEND_INCLUDE)
  set(_frontend_dir ${MYBACKEND_CUDNN_FRONTEND_INCLUDE})
endif()
if(DEFINED MYBACKEND_CUDNN_ROOT)
  set(_cudnn_root ${MYBACKEND_CUDNN_ROOT})
endif()

find_path(MYBACKEND_CUDNN_INCLUDE_DIR cudnn.h HINTS ${_cudnn_root}/include NO_DEFAULT_PATH)
find_library(MYBACKEND_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 HINTS ${_cudnn_root}/lib
             NO_DEFAULT_PATH)
if(NOT _frontend_dir OR NOT EXISTS ${_frontend_dir}/cudnn_frontend.h)
  message(WARNING "mybackend: the cuDNN frontend headers were not found (pip install "
                  "nvidia-cudnn-frontend); convolution and attention run as ATen ops")
  return()
endif()
if(NOT MYBACKEND_CUDNN_INCLUDE_DIR OR NOT MYBACKEND_CUDNN_LIBRARY)
  message(WARNING "mybackend: torch's cuDNN (the nvidia-cudnn wheel) was not found under "
                  "'${_cudnn_root}'; convolution and attention run as ATen ops")
  return()
endif()

add_library(mybackend::cudnn INTERFACE IMPORTED)
# The frontend's headers are third-party: SYSTEM keeps their warnings out of ours.
target_include_directories(mybackend::cudnn SYSTEM INTERFACE ${_frontend_dir}
                           ${MYBACKEND_CUDNN_INCLUDE_DIR})
target_link_libraries(mybackend::cudnn INTERFACE ${MYBACKEND_CUDNN_LIBRARY})
# The frontend's JSON support (graph serialisation, errata files) is unused
# here, and its header library is most of what the two frontend units
# compile: 64 and 53 s of the 2-core build with it, 42 and 32 s without.
target_compile_definitions(mybackend::cudnn INTERFACE CUDNN_FRONTEND_SKIP_JSON_LIB)
set(MYBACKEND_WITH_CUDNN ON)
message(STATUS "mybackend: cuDNN from ${MYBACKEND_CUDNN_LIBRARY}, frontend headers ${_frontend_dir}")
