#pragma once

// `fuseserve-cli bench MODEL ...`: a perf_analyzer-class load generator.

namespace fuseserve::client {

// argv[0] is "bench". Returns the process exit code (non-zero on failure).
int RunBenchCommand(int argc, char** argv);

}  // namespace fuseserve::client
