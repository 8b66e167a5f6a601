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
  trainplan_add_backend_tool(execute ${_execute_cpu} trainplan::executor_cpu)
endif()
