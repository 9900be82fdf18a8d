# Sanitizer and fuzzer builds of fuseserve's own targets (third-party
# libraries from Debian stay uninstrumented).
#
#   -DFUSESERVE_SANITIZE=address,undefined   ASan + UBSan (LeakSanitizer included)
#   -DFUSESERVE_SANITIZE=thread              TSan (needs instrumented Abseil at
#                                            run time: scripts/tsan_abseil.sh)
#   -DFUSESERVE_FUZZ=ON                      libFuzzer targets in fuzz/ (clang
#                                            only; implies address,undefined)
#
# Sets FUSESERVE_SANITIZER_FLAGS (compile and link flags of every target) and
# FUSESERVE_FUZZER_COMPILE_FLAGS (coverage instrumentation for libFuzzer).
# Commas and semicolons both separate sanitizer names.

string(REPLACE "," ";" _fuseserve_sanitizers "${FUSESERVE_SANITIZE}")
if(FUSESERVE_FUZZ AND NOT _fuseserve_sanitizers)
  set(_fuseserve_sanitizers address undefined)
endif()

foreach(_sanitizer IN LISTS _fuseserve_sanitizers)
  if(NOT _sanitizer MATCHES "^(address|undefined|thread|leak)$")
    message(FATAL_ERROR "FUSESERVE_SANITIZE: unknown sanitizer \"${_sanitizer}\" "
                        "(use address,undefined or thread)")
  endif()
endforeach()
if("thread" IN_LIST _fuseserve_sanitizers AND "address" IN_LIST _fuseserve_sanitizers)
  message(FATAL_ERROR "FUSESERVE_SANITIZE: thread and address cannot be combined")
endif()

set(FUSESERVE_SANITIZER_FLAGS "")
if(_fuseserve_sanitizers)
  list(JOIN _fuseserve_sanitizers "," _fuseserve_sanitizer_list)
  set(FUSESERVE_SANITIZER_FLAGS -fsanitize=${_fuseserve_sanitizer_list} -fno-omit-frame-pointer)
  # Undefined behaviour must fail the test that triggers it, not print a
  # warning and carry on.
  if("undefined" IN_LIST _fuseserve_sanitizers)
    list(APPEND FUSESERVE_SANITIZER_FLAGS -fno-sanitize-recover=undefined)
  endif()
  message(STATUS "fuseserve: sanitizers ${_fuseserve_sanitizer_list}")
endif()

set(FUSESERVE_FUZZER_COMPILE_FLAGS "")
if(FUSESERVE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "FUSESERVE_FUZZ=ON needs clang (libFuzzer): "
                        "-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang")
  endif()
  if("thread" IN_LIST _fuseserve_sanitizers)
    message(FATAL_ERROR "FUSESERVE_FUZZ=ON runs under address,undefined, not thread")
  endif()
  # Coverage feedback for libFuzzer in every library the targets call; only
  # the fuzz targets themselves link libFuzzer's main (-fsanitize=fuzzer).
  set(FUSESERVE_FUZZER_COMPILE_FLAGS -fsanitize=fuzzer-no-link)
endif()
