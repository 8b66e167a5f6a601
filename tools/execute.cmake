# execute: train a plan and write the measured step report (issue 4). One program, a backend per
# dependency found: cpu (Eigen + MPI, execute_cpu.cc) and cuda (the CUDA executor with NCCL,
# execute_cuda.cc, built wherever nvcc and NCCL are; MPI optional). Its end-to-end tests (faults,
# input errors, loss on the corpus) are registered by tests/executor/CMakeLists.txt (tests/ is
# configured after tools/).
set(_execute_cpu OFF)
if(TARGET trainplan_executor AND TRAINPLAN_WITH_MPI)
  set(_execute_cpu ON)
endif()
if(_execute_cpu OR TARGET trainplan_executor_cuda)
  add_executable(execute ${CMAKE_CURRENT_LIST_DIR}/execute.cc ${CMAKE_CURRENT_LIST_DIR}/backend.cc)
  target_link_libraries(execute PRIVATE trainplan::executor trainplan::cli trainplan::warnings)
  if(_execute_cpu)
    target_sources(execute PRIVATE ${CMAKE_CURRENT_LIST_DIR}/execute_cpu.cc)
    target_compile_definitions(execute PRIVATE TRAINPLAN_TOOL_CPU_BACKEND=1)
  endif()
  if(TARGET trainplan_executor_cuda)
    target_sources(execute PRIVATE ${CMAKE_CURRENT_LIST_DIR}/execute_cuda.cc
                                   ${CMAKE_CURRENT_LIST_DIR}/cuda_tool.cc)
    target_link_libraries(execute PRIVATE trainplan::executor_cuda)
    target_compile_definitions(execute PRIVATE TRAINPLAN_TOOL_CUDA_BACKEND=1)
  endif()
endif()
