# calibrate: measure this machine and write a hardware profile (calibration/).
if(TARGET trainplan::calibration AND TARGET MPI::MPI_CXX)  # its collectives and ranks are MPI
  add_executable(calibrate ${CMAKE_CURRENT_LIST_DIR}/calibrate.cc)
  target_link_libraries(calibrate PRIVATE trainplan::calibration trainplan::cli trainplan::warnings)
endif()
