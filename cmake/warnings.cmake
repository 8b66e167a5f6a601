# One INTERFACE target carries the project's warning flags; every target links it.
add_library(trainplan_warnings INTERFACE)
add_library(trainplan::warnings ALIAS trainplan_warnings)
target_compile_options(trainplan_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow>)
