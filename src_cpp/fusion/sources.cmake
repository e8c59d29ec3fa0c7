list(APPEND CORE_SOURCES
  fusion/fusion_plan.cpp
  fusion/type_promotion.cpp
  fusion/pointwise_lowering.cpp
  fusion/pointwise_planner.cpp
  fusion/matmul_spec.cpp
  fusion/matmul_planner.cpp)
