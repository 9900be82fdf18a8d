#include "server/repository/model_repository.h"

#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/repository/test_dir.h"

namespace fuseserve {
namespace {

namespace fs = std::filesystem;

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

std::vector<std::string> Names(const std::vector<RepositoryModelEntry>& entries) {
  std::vector<std::string> names;
  for (const RepositoryModelEntry& entry : entries) names.push_back(entry.name);
  return names;
}

std::vector<int64_t> Numbers(const std::vector<ModelVersion>& versions) {
  std::vector<int64_t> numbers;
  for (const ModelVersion& version : versions) numbers.push_back(version.version);
  return numbers;
}

TEST(ListRepositoryTest, ListsVisibleSubdirectoriesSortedByName) {
  TestDir dir;
  dir.MakeDir("zeta");
  dir.MakeDir("alpha");
  dir.MakeDir("mid/1");
  dir.MakeDir(".hidden");
  dir.WriteFile("README.md", "not a model");
  std::vector<std::string> skipped;
  auto entries = ListRepository(dir.path(), &skipped);
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_THAT(Names(*entries), ElementsAre("alpha", "mid", "zeta"));
  EXPECT_EQ((*entries)[0].directory, dir.Path("alpha"));
  EXPECT_THAT(skipped, IsEmpty());
}

TEST(ListRepositoryTest, ReportsMissingRootAsNotFound) {
  TestDir dir;
  const absl::Status status = ListRepository(dir.Path("absent")).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()), HasSubstr(dir.Path("absent")));
}

TEST(ListRepositoryTest, RejectsRootThatIsAFile) {
  TestDir dir;
  const absl::Status status = ListRepository(dir.WriteFile("file", "x")).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("is not a directory"));
}

TEST(ListRepositoryTest, FollowsLinksInsideRootAndSkipsOthersWithReason) {
  TestDir dir;
  const std::string root = dir.MakeDir("repo");
  dir.MakeDir("repo/real");
  const std::string outside = dir.MakeDir("outside_model");
  fs::create_directory_symlink(dir.Path("repo/real"), dir.Path("repo/alias"));
  fs::create_directory_symlink(outside, dir.Path("repo/escape"));
  fs::create_directory_symlink(dir.Path("repo/nowhere"), dir.Path("repo/broken"));
  fs::create_directory_symlink(root, dir.Path("repo/self"));

  std::vector<std::string> skipped;
  auto entries = ListRepository(root, &skipped);
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_THAT(Names(*entries), ElementsAre("alias", "real"));
  ASSERT_THAT(skipped, SizeIs(3));
  const std::string reasons = skipped[0] + "\n" + skipped[1] + "\n" + skipped[2];
  EXPECT_THAT(reasons, AllOf(HasSubstr(dir.Path("repo/escape") + ": symbolic link to"),
                             HasSubstr("not inside the repository"),
                             HasSubstr(dir.Path("repo/broken") + ": symbolic link cannot be"),
                             HasSubstr(dir.Path("repo/self"))));
}

class SelectVersionsTest : public ::testing::Test {
 protected:
  // A model directory "m" with version directories holding model.safetensors.
  std::string ModelWithVersions(const std::vector<std::string>& versions) {
    for (const std::string& version : versions) {
      dir_.WriteFile("m/" + version + "/model.safetensors", "weights");
    }
    return dir_.MakeDir("m");
  }

  TestDir dir_;
};

TEST_F(SelectVersionsTest, DefaultPolicyPicksHighestVersion) {
  const std::string model_dir = ModelWithVersions({"1", "3", "2"});
  auto versions = SelectVersions(model_dir, inference::ModelConfig());
  ASSERT_TRUE(versions.ok()) << versions.status();
  ASSERT_THAT(Numbers(*versions), ElementsAre(3));
  EXPECT_EQ((*versions)[0].directory, model_dir + "/3");
  EXPECT_EQ((*versions)[0].weights_path, model_dir + "/3/model.safetensors");
}

TEST_F(SelectVersionsTest, LatestPicksTheHighestNAscending) {
  const std::string model_dir = ModelWithVersions({"1", "10", "2", "9"});
  inference::ModelConfig config;
  config.mutable_version_policy()->mutable_latest()->set_num_versions(2);
  auto versions = SelectVersions(model_dir, config);
  ASSERT_TRUE(versions.ok()) << versions.status();
  EXPECT_THAT(Numbers(*versions), ElementsAre(9, 10));

  config.mutable_version_policy()->mutable_latest()->set_num_versions(7);
  versions = SelectVersions(model_dir, config);
  ASSERT_TRUE(versions.ok()) << versions.status();
  EXPECT_THAT(Numbers(*versions), ElementsAre(1, 2, 9, 10));
}

TEST_F(SelectVersionsTest, AllPicksEveryVersion) {
  const std::string model_dir = ModelWithVersions({"4", "1", "2"});
  inference::ModelConfig config;
  config.mutable_version_policy()->mutable_all();
  auto versions = SelectVersions(model_dir, config);
  ASSERT_TRUE(versions.ok()) << versions.status();
  EXPECT_THAT(Numbers(*versions), ElementsAre(1, 2, 4));
}

TEST_F(SelectVersionsTest, SpecificPicksListedVersions) {
  const std::string model_dir = ModelWithVersions({"1", "2", "3"});
  inference::ModelConfig config;
  config.mutable_version_policy()->mutable_specific()->add_versions(3);
  config.mutable_version_policy()->mutable_specific()->add_versions(1);
  auto versions = SelectVersions(model_dir, config);
  ASSERT_TRUE(versions.ok()) << versions.status();
  EXPECT_THAT(Numbers(*versions), ElementsAre(1, 3));
}

TEST_F(SelectVersionsTest, SpecificRejectsMissingVersion) {
  const std::string model_dir = ModelWithVersions({"1", "2"});
  inference::ModelConfig config;
  config.mutable_version_policy()->mutable_specific()->add_versions(1);
  config.mutable_version_policy()->mutable_specific()->add_versions(5);
  const absl::Status status = SelectVersions(model_dir, config).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("lists version 5"), HasSubstr(model_dir + "/5 does not exist"),
                    HasSubstr("available versions: 1, 2")));
}

TEST_F(SelectVersionsTest, IgnoresNonNumericEntries) {
  const std::string model_dir = ModelWithVersions({"2", "latest", "3a", "-4", "0", ".5"});
  dir_.WriteFile("m/7", "a file, not a version directory");
  dir_.WriteFile("m/config.pbtxt", "");
  inference::ModelConfig config;
  config.mutable_version_policy()->mutable_all();
  auto versions = SelectVersions(model_dir, config);
  ASSERT_TRUE(versions.ok()) << versions.status();
  EXPECT_THAT(Numbers(*versions), ElementsAre(2));
}

TEST_F(SelectVersionsTest, RejectsTwoDirectoriesForOneVersion) {
  const std::string model_dir = ModelWithVersions({"1", "01"});
  const absl::Status status = SelectVersions(model_dir, inference::ModelConfig()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("both denote version 1"));
}

TEST_F(SelectVersionsTest, ReportsMissingWeightsFileByPath) {
  const std::string model_dir = ModelWithVersions({"1"});
  dir_.MakeDir("m/2");
  const absl::Status status = SelectVersions(model_dir, inference::ModelConfig()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()), HasSubstr(model_dir + "/2/model.safetensors"));
}

TEST_F(SelectVersionsTest, UsesDefaultModelFilename) {
  const std::string model_dir = ModelWithVersions({"1"});
  inference::ModelConfig config;
  config.set_default_model_filename("weights.safetensors");
  EXPECT_EQ(SelectVersions(model_dir, config).status().code(), absl::StatusCode::kNotFound);

  dir_.WriteFile("m/1/weights.safetensors", "weights");
  auto versions = SelectVersions(model_dir, config);
  ASSERT_TRUE(versions.ok()) << versions.status();
  EXPECT_EQ((*versions)[0].weights_path, model_dir + "/1/weights.safetensors");
}

TEST_F(SelectVersionsTest, ReportsModelWithoutVersionsAsNotFound) {
  dir_.WriteFile("m/config.pbtxt", "");
  const absl::Status status = SelectVersions(dir_.Path("m"), inference::ModelConfig()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr(dir_.Path("m")), HasSubstr("has no version directories")));
}

}  // namespace
}  // namespace fuseserve
