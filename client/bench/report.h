#pragma once

// The bench report: an aligned table for people (stdout) and JSON with every
// field for machines (schema in README.md, section "Bench").

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/bench/bench_options.h"
#include "client/bench/level_runner.h"
#include "client/bench/request_pool.h"
#include "nlohmann/json.hpp"

namespace fuseserve::client {

struct BenchReport {
  BenchOptions options;
  RequestPlan plan;
  int shared_memory_slots = 0;  // with --shared-memory system
  std::vector<LevelResult> levels;
};

// Every request of the run, over all levels.
struct RunSummary {
  int64_t sent = 0;
  int64_t answered = 0;
  int64_t succeeded = 0;
  int64_t failed = 0;
  int64_t lost = 0;
  std::map<std::string, int64_t> errors_by_code;

  bool ok() const { return failed == 0 && lost == 0; }
};

RunSummary Summarize(const std::vector<LevelResult>& levels);

// The header, the client-side table, the server-side table and the verdict
// ("all N requests answered, none failed" or what failed / was lost).
void PrintReport(const BenchReport& report, std::ostream& out);

nlohmann::json ReportToJson(const BenchReport& report);

// Writes ReportToJson(report) to `path` (indented, newline-terminated).
absl::Status WriteJsonReport(const BenchReport& report, const std::string& path);

}  // namespace fuseserve::client
