#include "server/repository/model_repository.h"

#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_dir.h"

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

// A repository "repo" with a well-formed model "good" and, beside the
// repository, a directory "outside" holding a model's files.
class RepositoryConfinementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.MakeDir("repo");
    dir_.WriteFile("repo/good/config.pbtxt", "platform: \"groupnorm\"");
    dir_.WriteFile("repo/good/1/model.safetensors", "weights");
    dir_.WriteFile("outside/config.pbtxt", "platform: \"groupnorm\"");
    dir_.WriteFile("outside/1/model.safetensors", "weights");
  }

  // ListRepository's model names, expecting `skipped_count` skips (their
  // reasons go to `skipped_`).
  std::vector<std::string> Listed(size_t skipped_count) {
    skipped_.clear();
    auto entries = ListRepository(root_, &skipped_);
    EXPECT_TRUE(entries.ok()) << entries.status();
    EXPECT_THAT(skipped_, SizeIs(skipped_count));
    return entries.ok() ? Names(*entries) : std::vector<std::string>{};
  }

  TestDir dir_;
  std::string root_;
  std::vector<std::string> skipped_;
};

TEST_F(RepositoryConfinementTest, SkipsModelWhoseConfigLinksOutside) {
  dir_.MakeDir("repo/leaky/1");
  dir_.WriteFile("repo/leaky/1/model.safetensors", "weights");
  fs::create_symlink(dir_.Path("outside/config.pbtxt"), dir_.Path("repo/leaky/config.pbtxt"));

  EXPECT_THAT(Listed(1), ElementsAre("good"));
  EXPECT_THAT(skipped_[0],
              AllOf(HasSubstr("skipping model " + dir_.Path("repo/leaky")),
                    HasSubstr(dir_.Path("repo/leaky/config.pbtxt") + " is a symbolic link to " +
                              fs::canonical(dir_.Path("outside/config.pbtxt")).string()),
                    HasSubstr("not inside the repository")));
}

TEST_F(RepositoryConfinementTest, SkipsModelWhoseVersionDirectoryLinksOutside) {
  dir_.WriteFile("repo/leaky/config.pbtxt", "platform: \"groupnorm\"");
  fs::create_directory_symlink(dir_.Path("outside/1"), dir_.Path("repo/leaky/1"));

  EXPECT_THAT(Listed(1), ElementsAre("good"));
  EXPECT_THAT(skipped_[0], HasSubstr(dir_.Path("repo/leaky/1") + " is a symbolic link to"));
}

TEST_F(RepositoryConfinementTest, SkipsModelWhoseWeightsLinkOutside) {
  dir_.WriteFile("repo/leaky/config.pbtxt", "platform: \"groupnorm\"");
  dir_.MakeDir("repo/leaky/1");
  fs::create_symlink(dir_.Path("outside/1/model.safetensors"),
                     dir_.Path("repo/leaky/1/model.safetensors"));

  EXPECT_THAT(Listed(1), ElementsAre("good"));
  EXPECT_THAT(skipped_[0],
              HasSubstr(dir_.Path("repo/leaky/1/model.safetensors") + " is a symbolic link to"));
}

TEST_F(RepositoryConfinementTest, SkipsModelWithRelativeLinkClimbingOut) {
  dir_.WriteFile("repo/leaky/config.pbtxt", "platform: \"groupnorm\"");
  dir_.MakeDir("repo/leaky/1");
  fs::create_symlink("../../../outside/1/model.safetensors",
                     dir_.Path("repo/leaky/1/model.safetensors"));

  EXPECT_THAT(Listed(1), ElementsAre("good"));
}

TEST_F(RepositoryConfinementTest, FindsLinksOutBehindALinkThatStaysInside) {
  // repo/leaky/1 -> repo/store/1 (inside), whose weights link out: the loader
  // would read repo/leaky/1/model.safetensors, i.e. the outside file.
  dir_.WriteFile("repo/leaky/config.pbtxt", "platform: \"groupnorm\"");
  dir_.MakeDir("repo/.store/1");
  fs::create_symlink(dir_.Path("outside/1/model.safetensors"),
                     dir_.Path("repo/.store/1/model.safetensors"));
  fs::create_directory_symlink(dir_.Path("repo/.store/1"), dir_.Path("repo/leaky/1"));

  EXPECT_THAT(Listed(1), ElementsAre("good"));
  EXPECT_THAT(skipped_[0], HasSubstr(dir_.Path("repo/leaky/1/model.safetensors")));
}

TEST_F(RepositoryConfinementTest, SkipsModelWithBrokenLink) {
  dir_.WriteFile("repo/leaky/config.pbtxt", "platform: \"groupnorm\"");
  fs::create_directory_symlink(dir_.Path("nowhere"), dir_.Path("repo/leaky/1"));

  EXPECT_THAT(Listed(1), ElementsAre("good"));
  EXPECT_THAT(skipped_[0], HasSubstr("symbolic link that cannot be resolved"));
}

TEST_F(RepositoryConfinementTest, SkipsModelWithLinkToTheRepositoryItself) {
  dir_.WriteFile("repo/leaky/config.pbtxt", "platform: \"groupnorm\"");
  fs::create_directory_symlink(root_, dir_.Path("repo/leaky/1"));

  EXPECT_THAT(Listed(1), ElementsAre("good"));
}

TEST_F(RepositoryConfinementTest, KeepsModelsWhoseLinksStayInside) {
  // Versions shared between models through links inside the repository are
  // fine, as are links to the model's own files.
  dir_.WriteFile("repo/alias/config.pbtxt", "platform: \"groupnorm\"");
  fs::create_directory_symlink(dir_.Path("repo/good/1"), dir_.Path("repo/alias/1"));
  fs::create_directory_symlink("1", dir_.Path("repo/good/2"));
  fs::create_symlink("../good/config.pbtxt", dir_.Path("repo/alias/copy.pbtxt"));

  EXPECT_THAT(Listed(0), ElementsAre("alias", "good"));
}

TEST_F(RepositoryConfinementTest, IgnoresLinksDeeperThanTheLoaderReads) {
  // Deeper than <version>/<file> nothing is opened, so nothing is checked.
  dir_.MakeDir("repo/good/1/notes");
  fs::create_symlink(dir_.Path("outside/config.pbtxt"), dir_.Path("repo/good/1/notes/link"));

  EXPECT_THAT(Listed(0), ElementsAre("good"));
}

TEST_F(RepositoryConfinementTest, LogsTheReasonWhenNoListIsGiven) {
  fs::create_symlink(dir_.Path("outside/config.pbtxt"), dir_.Path("repo/good/extra.pbtxt"));
  ::testing::internal::CaptureStderr();
  auto entries = ListRepository(root_);
  const std::string log = ::testing::internal::GetCapturedStderr();

  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_THAT(*entries, IsEmpty());
  EXPECT_THAT(log, AllOf(HasSubstr("skipping model " + dir_.Path("repo/good")),
                         HasSubstr("not inside the repository")));
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
