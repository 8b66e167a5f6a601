# One INTERFACE target carries the project's warning flags; every target links it.
# TRAINPLAN_WERROR turns them into errors (scripts/test.sh, and so CI, sets it ON).
option(TRAINPLAN_WERROR "Treat the project's compiler warnings as errors (ON in CI)" OFF)
add_library(trainplan_warnings INTERFACE)
add_library(trainplan::warnings ALIAS trainplan_warnings)
target_compile_options(trainplan_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow>)
if(TRAINPLAN_WERROR)
  target_compile_options(trainplan_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  # GCC 12 (Debian 12's compiler) reports -Wrestrict inside libstdc++ for `"literal" +
  # std::string&&` under C++20: a false positive in basic_string's inlined memcpy, seen by many
  # projects (e.g. dyninst issue 1422; executor/params.cc hits it). It stays a warning there.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(trainplan_warnings INTERFACE
      $<$<COMPILE_LANGUAGE:CXX>:-Wno-error=restrict>)
  endif()
endif()
