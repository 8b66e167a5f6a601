# simulate: one training step through the discrete-event simulator (issue 3).
if(TARGET trainplan_simulator)
  add_executable(simulate ${CMAKE_CURRENT_SOURCE_DIR}/simulate.cc)
  target_link_libraries(simulate PRIVATE trainplan::simulator trainplan::validation trainplan::cli trainplan::warnings)
endif()
