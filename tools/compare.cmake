# compare: predicted against measured step reports (validation/compare.h).
if(TARGET trainplan::validation)
  add_executable(compare ${CMAKE_CURRENT_LIST_DIR}/compare.cc)
  target_link_libraries(compare PRIVATE trainplan::validation trainplan::cli trainplan::warnings)
endif()
