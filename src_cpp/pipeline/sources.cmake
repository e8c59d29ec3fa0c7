list(APPEND RUNTIME_SOURCES pipeline/pipeline.cpp pipeline/environment.cpp)
# The plan's archive is torch-free: the core's (Note [Plan archive]).
list(APPEND CORE_SOURCES pipeline/plan_archive.cpp)
