# calibrate: measure this machine and write a hardware profile (calibration/). One program, a
# backend per dependency found: cpu (its collectives and ranks are MPI, calibrate_cpu.cc) and
# cuda (the CUDA executor's kernels and NCCL, calibrate_cuda.cc; MPI optional).
set(_calibrate_cpu OFF)
if(TARGET trainplan::calibration AND TARGET MPI::MPI_CXX)
  set(_calibrate_cpu ON)
endif()
if(TARGET trainplan::calibration AND (_calibrate_cpu OR TARGET trainplan_executor_cuda))
  add_executable(calibrate ${CMAKE_CURRENT_LIST_DIR}/calibrate.cc ${CMAKE_CURRENT_LIST_DIR}/backend.cc)
  target_link_libraries(calibrate PRIVATE trainplan::calibration trainplan::cli trainplan::warnings)
  if(_calibrate_cpu)
    target_sources(calibrate PRIVATE ${CMAKE_CURRENT_LIST_DIR}/calibrate_cpu.cc)
    target_compile_definitions(calibrate PRIVATE TRAINPLAN_TOOL_CPU_BACKEND=1)
  endif()
  if(TARGET trainplan_executor_cuda)
    target_sources(calibrate PRIVATE ${CMAKE_CURRENT_LIST_DIR}/calibrate_cuda.cc
                                     ${CMAKE_CURRENT_LIST_DIR}/cuda_tool.cc)
    target_link_libraries(calibrate PRIVATE trainplan::executor_cuda)
    target_compile_definitions(calibrate PRIVATE TRAINPLAN_TOOL_CUDA_BACKEND=1)
  endif()
endif()
