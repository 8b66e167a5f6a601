# The instruction set the C++ code is compiled for. Eigen picks its SIMD kernels (SSE2 only on
# plain x86-64; AVX2+FMA or AVX-512 with a wider -march) at compile time from the compiler's
# target macros, so this option sets the executor's GEMM speed: issue 28 measured Eigen's GEMM
# at 36 GFLOP/s with the x86-64 baseline and 170 GFLOP/s with -march=native on the same core.
#   TRAINPLAN_ARCH=native    (default) the build machine's instruction set: fastest, but the
#                            binaries may not run on an older CPU
#   TRAINPLAN_ARCH=portable  the compiler's default target (x86-64 baseline on Debian): for
#                            packaged binaries
#   TRAINPLAN_ARCH=<value>   passed as -march=<value>, e.g. x86-64-v3 (AVX2+FMA), znver4
# Only C++ is affected (nvcc's host code includes no Eigen), and every C++ target gets the same
# flag, so that no two objects disagree on Eigen's vector sizes or alignment.
set(TRAINPLAN_ARCH "native" CACHE STRING
    "Instruction set for C++: native (the build machine's), portable, or a -march value")
if(NOT TRAINPLAN_ARCH STREQUAL "portable")
  include(CheckCXXCompilerFlag)
  string(MAKE_C_IDENTIFIER "TRAINPLAN_HAS_MARCH_${TRAINPLAN_ARCH}" arch_check)
  check_cxx_compiler_flag("-march=${TRAINPLAN_ARCH}" ${arch_check})
  if(NOT ${arch_check})
    message(FATAL_ERROR "TRAINPLAN_ARCH=${TRAINPLAN_ARCH}: the compiler does not accept "
                        "-march=${TRAINPLAN_ARCH}; use portable or a value it knows")
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-march=${TRAINPLAN_ARCH}>)
endif()
# No contraction of a*b+c into a fused multiply-add by the compiler (GCC's default for C++ is
# -ffp-contract=fast, which with FMA in the instruction set changes the last bits of plan's and
# simulate's figures): their JSON stays byte-identical whatever TRAINPLAN_ARCH is
# (scripts/zoo_golden.sh). Eigen's GEMM kernels call FMA instructions explicitly and keep them.
add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>)
message(STATUS "trainplan: C++ instruction set TRAINPLAN_ARCH=${TRAINPLAN_ARCH}")
# GCC 12 and later report -Wmaybe-uninitialized inside their own avx512fintrin.h when AVX-512
# intrinsics are inlined (the deliberately undefined `__m512 __Y = __Y` of
# _mm512_undefined_ps; seen by google/highway#710 and opencv/opencv#22512, Eigen's AVX-512
# kernels here). With warnings as errors that stops the build, so with GCC and a non-portable
# instruction set the warning is off.
if(NOT TRAINPLAN_ARCH STREQUAL "portable" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_compile_options(trainplan_warnings INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-Wno-maybe-uninitialized>)
endif()
