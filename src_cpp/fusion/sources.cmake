list(APPEND CORE_SOURCES
  fusion/fusion_plan.cpp
  fusion/type_promotion.cpp
  fusion/pointwise_lowering.cpp
  fusion/pointwise_planner.cpp
  fusion/cast_groups.cpp
  fusion/graph_index.cpp
  fusion/claimed_groups.cpp
  fusion/matmul_spec.cpp
  fusion/matmul_planner.cpp
  fusion/ir_match.cpp
  fusion/attention_spec.cpp
  fusion/attention_planner.cpp
  fusion/conv_spec.cpp
  fusion/conv_planner.cpp
  fusion/reduction_lowering.cpp
  fusion/norm_lowering.cpp
  fusion/reduction_planner.cpp)
