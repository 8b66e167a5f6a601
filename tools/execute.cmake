# execute: train a plan on CPUs with Eigen + MPI and write the measured step report (issue 4).
# Its end-to-end tests (faults, input errors, loss on the corpus) are registered by
# tests/executor/CMakeLists.txt (tests/ is configured after tools/).
if(TARGET trainplan_executor AND TRAINPLAN_WITH_MPI)
  add_executable(execute ${CMAKE_CURRENT_LIST_DIR}/execute.cc)
  target_link_libraries(execute PRIVATE trainplan::executor trainplan::cli trainplan::warnings)
endif()
