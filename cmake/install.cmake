# `cmake --install`: the tools, the libraries with their headers, the model zoo, and a CMake
# package so that another project can `find_package(trainplan)` and link trainplan::planner.
# Checked by tests/install/ (a consumer project built against the installed tree).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TRAINPLAN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/trainplan)
set(TRAINPLAN_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/trainplan)

# The libraries a consumer links: the ground floor, the simulator, the planner and validation
# (the executors need MPI and Eigen at link time and are used through the tools).
set(_trainplan_exported trainplan_warnings trainplan_core trainplan_simulator trainplan_planner
                        trainplan_validation)
foreach(lib IN LISTS _trainplan_exported)
  if(NOT lib STREQUAL "trainplan_warnings")
    target_include_directories(${lib} PUBLIC
      $<INSTALL_INTERFACE:${TRAINPLAN_INSTALL_INCLUDEDIR}>)
  endif()
  string(REPLACE "trainplan_" "" _export_name ${lib})
  set_target_properties(${lib} PROPERTIES EXPORT_NAME ${_export_name})
endforeach()
install(TARGETS ${_trainplan_exported} EXPORT trainplanTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT trainplanTargets NAMESPACE trainplan:: DESTINATION ${TRAINPLAN_INSTALL_CMAKEDIR})

# Headers of the exported libraries, under include/trainplan/ with the source layout kept.
foreach(dir core simulator planner validation)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/ DESTINATION ${TRAINPLAN_INSTALL_INCLUDEDIR}/${dir}
          FILES_MATCHING PATTERN "*.h")
endforeach()

foreach(tool plan simulate execute calibrate compare)
  if(TARGET ${tool})
    install(TARGETS ${tool} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/models/ DESTINATION ${CMAKE_INSTALL_DATADIR}/trainplan/models)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/examples/ DESTINATION ${CMAKE_INSTALL_DATADIR}/trainplan/examples
        OPTIONAL)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/trainplanConfig.cmake.in
  ${PROJECT_BINARY_DIR}/trainplanConfig.cmake INSTALL_DESTINATION ${TRAINPLAN_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/trainplanConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/trainplanConfig.cmake
              ${PROJECT_BINARY_DIR}/trainplanConfigVersion.cmake
        DESTINATION ${TRAINPLAN_INSTALL_CMAKEDIR})
