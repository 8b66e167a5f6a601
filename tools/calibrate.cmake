# calibrate: measure this machine and write a hardware profile (calibration/). One program, a
# backend per dependency found: cpu (its collectives and ranks are MPI, calibrate_cpu.cc) and
# cuda (the CUDA executor's kernels and NCCL, calibrate_cuda.cc; MPI optional).
set(_calibrate_cpu OFF)
if(TARGET trainplan::calibration AND TARGET MPI::MPI_CXX)
  set(_calibrate_cpu ON)
endif()
if(TARGET trainplan::calibration AND (_calibrate_cpu OR TARGET trainplan_executor_cuda))
  trainplan_add_backend_tool(calibrate ${_calibrate_cpu} trainplan::calibration)
endif()
