# Compiler flags for ampc. Numerics rule: never -ffast-math / -Ofast (they let
# the compiler assume no inf/NaN, which breaks overflow detection). The check
# below refuses a configuration whose flags turn on finite-math-only, and
# src/internal.h repeats it as an #error for every translation unit.
include(CheckCSourceCompiles)

set(CMAKE_C_FLAGS_RELEASE "-O3 -DNDEBUG")
set(CMAKE_C_FLAGS_RELWITHDEBINFO "-O2 -g -DNDEBUG")

set(CMAKE_REQUIRED_FLAGS "${CMAKE_C_FLAGS} ${CMAKE_C_FLAGS_${CMAKE_BUILD_TYPE}}")
check_c_source_compiles("
#if defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#error finite-math-only
#endif
int main(void) { return 0; }" AMPC_NOT_FINITE_MATH_ONLY)
unset(CMAKE_REQUIRED_FLAGS)
if(NOT AMPC_NOT_FINITE_MATH_ONLY)
  unset(AMPC_NOT_FINITE_MATH_ONLY CACHE)
  message(FATAL_ERROR "ampc: the C flags enable finite-math-only (-ffast-math/-Ofast?); "
                      "ampc needs IEEE inf/NaN semantics. Remove those flags.")
endif()
unset(AMPC_NOT_FINITE_MATH_ONLY CACHE)

function(ampc_set_warnings target)
  # C sources only: a target's .cu files go to nvcc, which takes none of these
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:C>:-Wall;-Wextra;-Wpedantic;-Wshadow;-Wdouble-promotion;-Wstrict-prototypes;-Wmissing-prototypes;-fno-fast-math;-ffp-contract=off>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
endfunction()
