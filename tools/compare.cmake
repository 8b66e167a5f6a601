# compare: predicted against measured step reports (calibration/compare.h).
if(TARGET trainplan::calibration)
  add_executable(compare ${CMAKE_CURRENT_LIST_DIR}/compare.cc)
  target_link_libraries(compare PRIVATE trainplan::calibration trainplan::cli trainplan::warnings)
endif()
