#include "server/runtime/batch_trace.h"

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/test_dir.h"

namespace fuseserve {
namespace {

using json = nlohmann::json;

json ReadJson(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return json::parse(text.str());
}

BatchTrace Batch(const std::string& instance, int device, absl::Time start) {
  return {instance, device, 4, 2, start, absl::Microseconds(100), absl::Microseconds(150),
          absl::Microseconds(400)};
}

TEST(BatchTraceWriterTest, WritesEachBatchAsThreePhasesOnItsInstancesTimeline) {
  const TestDir directory("batch_trace_test");
  const std::string path = directory.Path("phases.json");
  {
    absl::StatusOr<std::unique_ptr<BatchTraceWriter>> writer = BatchTraceWriter::Open(path);
    ASSERT_TRUE(writer.ok()) << writer.status();
    const absl::Time now = absl::Now();
    (*writer)->Record(Batch("conv/1 gpu0#0", 0, now));
    (*writer)->Record(Batch("conv/1 gpu0#1", 0, now + absl::Microseconds(120)));
    (*writer)->Record(Batch("conv/1 gpu1#2", 1, now));
  }
  const json events = ReadJson(path);
  ASSERT_TRUE(events.is_array());
  std::map<std::string, int> thread_of;
  std::vector<json> phases;
  for (const json& event : events) {
    if (event["ph"] == "M" && event["name"] == "thread_name") {
      thread_of[event["args"]["name"]] = event["tid"];
    } else if (event["ph"] == "X") {
      phases.push_back(event);
    }
  }
  ASSERT_EQ(thread_of.size(), 3u);
  EXPECT_NE(thread_of["conv/1 gpu0#0"], thread_of["conv/1 gpu0#1"]);
  ASSERT_EQ(phases.size(), 9u);
  // The first batch: input [0, 100), compute [100, 150), output [150, 400) us.
  EXPECT_EQ(phases[0]["name"], "input");
  EXPECT_EQ(phases[1]["name"], "compute");
  EXPECT_EQ(phases[2]["name"], "output");
  EXPECT_NEAR(phases[0]["dur"].get<double>(), 100, 1e-3);
  EXPECT_NEAR(phases[1]["ts"].get<double>() - phases[0]["ts"].get<double>(), 100, 1e-3);
  EXPECT_NEAR(phases[1]["dur"].get<double>(), 50, 1e-3);
  EXPECT_NEAR(phases[2]["dur"].get<double>(), 250, 1e-3);
  EXPECT_EQ(phases[0]["args"]["batch_size"], 4);
  EXPECT_EQ(phases[0]["args"]["requests"], 2);
  // The second instance's input starts while the first computes: the
  // overlap the trace is for.
  EXPECT_NEAR(phases[3]["ts"].get<double>() - phases[0]["ts"].get<double>(), 120, 1e-3);
  EXPECT_EQ(phases[6]["pid"], 1);
}

TEST(BatchTraceWriterTest, EscapesInstanceNamesInJson) {
  const TestDir directory("batch_trace_test");
  const std::string path = directory.Path("escape.json");
  {
    absl::StatusOr<std::unique_ptr<BatchTraceWriter>> writer = BatchTraceWriter::Open(path);
    ASSERT_TRUE(writer.ok());
    (*writer)->Record(Batch("odd \"name\" \\ with\ttab", 0, absl::Now()));
  }
  const json events = ReadJson(path);
  bool found = false;
  for (const json& event : events) {
    if (event["name"] == "thread_name") {
      EXPECT_EQ(event["args"]["name"], "odd \"name\" \\ with\ttab");
      found = true;
    }
  }
  EXPECT_TRUE(found);
}

TEST(BatchTraceWriterTest, AnUnwritablePathIsInvalidArgumentNamingIt) {
  absl::StatusOr<std::unique_ptr<BatchTraceWriter>> writer =
      BatchTraceWriter::Open("/nonexistent-dir/trace.json");
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(writer.status().message().find("/nonexistent-dir/trace.json"), std::string::npos);
}

}  // namespace
}  // namespace fuseserve
