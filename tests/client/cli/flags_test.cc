// The fuseserve-cli option parser: the shared-memory flags (--shared-memory,
// --output-shared-memory-size) as `infer` accepts them.

#include "client/cli/flags.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fuseserve::client::cli {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<SharedMemoryFlags> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "infer");
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  const auto parsed = ParseServerCommandArgs(static_cast<int>(argv.size()), argv.data(),
                                             {kSharedMemoryFlag, kOutputSharedMemorySizeFlag}, {});
  if (!parsed.ok()) return parsed.status();
  return ParseSharedMemoryFlags(*parsed);
}

TEST(SharedMemoryFlagsTest, DefaultIsNoSharedMemory) {
  const auto flags = Parse({"model"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->type, SharedMemoryType::kNone);
  EXPECT_FALSE(flags->output_byte_size.has_value());
}

TEST(SharedMemoryFlagsTest, ParsesBothFlagsInBothSpellings) {
  auto flags = Parse({"model", "--shared-memory", "system", "--output-shared-memory-size=4096"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->type, SharedMemoryType::kSystem);
  EXPECT_EQ(flags->output_byte_size, 4096u);

  flags = Parse({"--shared-memory=system", "model"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->type, SharedMemoryType::kSystem);
  EXPECT_FALSE(flags->output_byte_size.has_value());

  flags = Parse({"model", "--shared-memory", "none"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->type, SharedMemoryType::kNone);
}

TEST(SharedMemoryFlagsTest, RejectsUnknownTypesAndBadSizesNamingTheFlag) {
  const auto cuda = Parse({"model", "--shared-memory", "cuda"});
  EXPECT_EQ(cuda.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(cuda.status().message(), HasSubstr("--shared-memory expects none or system"));

  for (const std::string size : {"0", "-5", "12kb", ""}) {
    const auto bad =
        Parse({"model", "--shared-memory=system", "--output-shared-memory-size=" + size});
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << size;
    EXPECT_THAT(bad.status().message(), HasSubstr("--output-shared-memory-size")) << size;
  }

  const auto without_system = Parse({"model", "--output-shared-memory-size", "64"});
  EXPECT_THAT(without_system.status().message(), HasSubstr("needs --shared-memory system"));

  const auto missing_value = Parse({"model", "--shared-memory"});
  EXPECT_THAT(missing_value.status().message(), HasSubstr("--shared-memory needs a value"));
}

TEST(SharedMemoryFlagsTest, UsageNamesBothFlags) {
  EXPECT_THAT(kSharedMemoryUsage, HasSubstr("--shared-memory none|system"));
  EXPECT_THAT(kSharedMemoryUsage, HasSubstr("--output-shared-memory-size BYTES"));
}

}  // namespace
}  // namespace fuseserve::client::cli
