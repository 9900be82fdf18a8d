# Build settings for fuseserve's own targets: warnings as errors (never on
# third-party code), optional sanitizers.

set(FUSESERVE_WARNINGS -Wall -Wextra -Wpedantic -Werror -Wno-unused-parameter)
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  list(APPEND FUSESERVE_WARNINGS -Wthread-safety)
endif()

include(${CMAKE_CURRENT_LIST_DIR}/Sanitizers.cmake)

# fuseserve_target(<target>): our compile options on a C++ (and CUDA) target.
function(fuseserve_target target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${FUSESERVE_WARNINGS} ${FUSESERVE_SANITIZER_FLAGS}
                              ${FUSESERVE_FUZZER_COMPILE_FLAGS}>
    $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings --expt-relaxed-constexpr -lineinfo>)
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR})
  if(FUSESERVE_SANITIZER_FLAGS)
    target_link_options(${target} PRIVATE ${FUSESERVE_SANITIZER_FLAGS})
  endif()
endfunction()

# fuseserve_library(<name> SOURCES ... DEPS ...)
function(fuseserve_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  fuseserve_target(${name})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

# fuseserve_test(<name> SOURCES ... DEPS ... [LABELS ...]): a GoogleTest
# binary registered with ctest (test names are discovered from the binary).
function(fuseserve_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  fuseserve_target(${name})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gmock GTest::gtest_main)
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  gtest_discover_tests(${name}
    DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${ARG_LABELS}"
               SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
endfunction()
