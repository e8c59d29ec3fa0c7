list(APPEND CORE_SOURCES partition/dynamic_order.cpp partition/cycle_free_merger.cpp
  partition/greedy_merge.cpp partition/select.cpp partition/schedule.cpp partition/partitioner.cpp)
