# Note [Private libstdc++]
# Some GCC toolchains do not link the C++ runtime as one shared library:
# devtoolset-style GCCs, whose libstdc++.so is a linker script that adds
# libstdc++_nonshared.a, and GCCs built without a shared libstdc++. An
# extension built with them carries static copies of parts of libstdc++ (the
# locale machinery among them) while the rest binds to the libstdc++.so.6 that
# Python and torch have already loaded. The two halves disagree on facet
# indices and the first `ostream << integer` in the module crashes (seen on a
# GPU machine whose default compiler was such a GCC 13).
#
# With such a toolchain the module links libstdc++ statically and keeps it
# private (--exclude-libs), the way manylinux wheels do: one consistent copy
# inside _C, and nothing of it exported to interpose on torch's copy.
#
# The unwinder is not made private (no -static-libgcc): exceptions that torch
# throws (an ATen op's TORCH_CHECK) unwind through _C's frames, and a second,
# private libgcc unwinder cannot read the shared unwinder's context. With one,
# every ATen error inside the runtime ended in std::terminate (SIGABRT) on the
# GPU machine instead of reaching the fallback to eager. There is one
# libgcc_s.so.1 per process, so it is safe to share.
#
# mybackend_libstdcxx_link_mode(<out-var>) sets <out-var> to "shared" or
# "private"; MYBACKEND_LIBSTDCXX (AUTO, SHARED, PRIVATE) overrides the probe.
set(MYBACKEND_LIBSTDCXX "AUTO" CACHE STRING "How _C links libstdc++: AUTO, SHARED or PRIVATE")
set_property(CACHE MYBACKEND_LIBSTDCXX PROPERTY STRINGS AUTO SHARED PRIVATE)

function(mybackend_libstdcxx_link_mode out_var)
  if(MYBACKEND_LIBSTDCXX STREQUAL "SHARED" OR MYBACKEND_LIBSTDCXX STREQUAL "PRIVATE")
    string(TOLOWER "${MYBACKEND_LIBSTDCXX}" mode)
    set(${out_var} "${mode}" PARENT_SCOPE)
    return()
  endif()
  set(mode "shared")
  set(why "")
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_SYSTEM_NAME STREQUAL "Linux")
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so
                    OUTPUT_VARIABLE so_path OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT IS_ABSOLUTE "${so_path}" OR NOT EXISTS "${so_path}")
      set(mode "private")
      set(why "the compiler has no shared libstdc++")
    else()
      file(READ "${so_path}" head LIMIT 256)
      if(head MATCHES "INPUT|GROUP")
        set(mode "private")
        set(why "the compiler's libstdc++.so is a linker script (${so_path})")
      endif()
    endif()
  endif()
  if(why)
    message(STATUS "mybackend: linking libstdc++ statically and privately into _C: ${why} "
                   "(Note [Private libstdc++] in cmake/libstdcxx_linkage.cmake)")
  endif()
  set(${out_var} "${mode}" PARENT_SCOPE)
endfunction()
