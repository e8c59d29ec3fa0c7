list(APPEND CORE_SOURCES fusion/fusion_plan.cpp)
