# Third-party dependencies, all from Debian 12 packages (see scripts/setup.sh).

find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(prometheus-cpp CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
find_program(GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)

# cpp-httplib: compile with its pkg-config flags, which define
# CPPHTTPLIB_OPENSSL/ZLIB/BROTLI_SUPPORT; without them the class layout differs
# from Debian's shared library and handlers crash (DESIGN.md).
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)

if(FUSESERVE_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
  include(GoogleTest)
endif()
