list(APPEND BINDING_SOURCES bindings/module.cpp bindings/ivalue.cpp bindings/ir.cpp
  bindings/capability.cpp bindings/partition.cpp bindings/compile.cpp bindings/matmul.cpp
  bindings/conv.cpp)
