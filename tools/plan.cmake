if(TARGET trainplan_simulator)
  add_executable(plan ${CMAKE_CURRENT_SOURCE_DIR}/plan.cc)
  target_link_libraries(plan PRIVATE trainplan::planner trainplan::simulator trainplan::validation trainplan::cli
                                     trainplan::warnings)
endif()
