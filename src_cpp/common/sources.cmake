list(APPEND CORE_SOURCES common/error.cpp common/archive.cpp)
