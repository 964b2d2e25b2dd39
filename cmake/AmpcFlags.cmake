# Compiler flags for ampc. Numerics rule: never -ffast-math / -Ofast (they let
# the compiler assume no inf/NaN, which breaks overflow detection). The check
# below refuses a configuration whose flags turn on finite-math-only, and
# src/internal.h repeats it as an #error for every translation unit.
include(CheckCSourceCompiles)
include(CheckCXXSourceCompiles)

set(CMAKE_C_FLAGS_RELEASE "-O3 -DNDEBUG")
set(CMAKE_C_FLAGS_RELWITHDEBINFO "-O2 -g -DNDEBUG")
set(CMAKE_CXX_FLAGS_RELEASE "-O3 -DNDEBUG")
set(CMAKE_CXX_FLAGS_RELWITHDEBINFO "-O2 -g -DNDEBUG")

set(AMPC_FINITE_MATH_PROBE "
#if defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#error finite-math-only
#endif
int main(void) { return 0; }")
set(CMAKE_REQUIRED_FLAGS "${CMAKE_C_FLAGS} ${CMAKE_C_FLAGS_${CMAKE_BUILD_TYPE}}")
check_c_source_compiles("${AMPC_FINITE_MATH_PROBE}" AMPC_NOT_FINITE_MATH_ONLY)
# the same for the C++ flags (src/data/ingest/tokenizer_sp.cc)
set(CMAKE_REQUIRED_FLAGS "${CMAKE_CXX_FLAGS} ${CMAKE_CXX_FLAGS_${CMAKE_BUILD_TYPE}}")
check_cxx_source_compiles("${AMPC_FINITE_MATH_PROBE}" AMPC_CXX_NOT_FINITE_MATH_ONLY)
unset(CMAKE_REQUIRED_FLAGS)
if(NOT AMPC_NOT_FINITE_MATH_ONLY OR NOT AMPC_CXX_NOT_FINITE_MATH_ONLY)
  unset(AMPC_NOT_FINITE_MATH_ONLY CACHE)
  unset(AMPC_CXX_NOT_FINITE_MATH_ONLY CACHE)
  message(FATAL_ERROR "ampc: the C or C++ flags enable finite-math-only (-ffast-math/-Ofast?); "
                      "ampc needs IEEE inf/NaN semantics. Remove those flags.")
endif()
unset(AMPC_NOT_FINITE_MATH_ONLY CACHE)
unset(AMPC_CXX_NOT_FINITE_MATH_ONLY CACHE)

function(ampc_set_warnings target)
  # per language: a target's .cu files go to nvcc, which takes none of these;
  # C++ (the tokenizer) gets the same set less the C-only prototype warnings
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:C>:-Wall;-Wextra;-Wpedantic;-Wshadow;-Wdouble-promotion;-Wstrict-prototypes;-Wmissing-prototypes;-fno-fast-math;-ffp-contract=off>
    $<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra;-Wpedantic;-Wshadow;-Wdouble-promotion;-Wmissing-declarations;-fno-fast-math;-ffp-contract=off>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
endfunction()
