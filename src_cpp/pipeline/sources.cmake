list(APPEND RUNTIME_SOURCES pipeline/pipeline.cpp pipeline/environment.cpp)
