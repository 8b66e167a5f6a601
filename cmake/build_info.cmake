# The build record (core/build_info.h): the git commit at configure time, written with the
# project version and the compiler into build_info.cc in the build tree. Nothing is fetched;
# outside a git checkout (a release tarball) the commit is "unknown".
set(TRAINPLAN_GIT_COMMIT "unknown")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} describe --always --dirty --abbrev=12
                  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                  OUTPUT_VARIABLE _trainplan_git OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE _trainplan_git_rc ERROR_QUIET)
  if(_trainplan_git_rc EQUAL 0 AND NOT _trainplan_git STREQUAL "")
    set(TRAINPLAN_GIT_COMMIT "${_trainplan_git}")
  endif()
endif()
configure_file(${PROJECT_SOURCE_DIR}/core/build_info.cc.in
               ${PROJECT_BINARY_DIR}/generated/core/build_info.cc @ONLY)
