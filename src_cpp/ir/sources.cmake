list(APPEND CORE_SOURCES ir/dtype.cpp ir/sym_expr.cpp ir/graph.cpp ir/printer.cpp)
