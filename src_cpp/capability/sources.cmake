list(APPEND CORE_SOURCES
  capability/registry.cpp capability/predicates.cpp capability/pointwise.cpp
  capability/reduction.cpp capability/normalization.cpp capability/matmul.cpp
  capability/convolution.cpp capability/attention.cpp capability/view.cpp
  capability/unclaimed_layouts.cpp)
