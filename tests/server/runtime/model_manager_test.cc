#include "server/runtime/model_manager.h"

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/default_repository.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/repository/safetensors_writer.h"
#include "tests/testing/test_dir.h"

namespace fuseserve {
namespace {

namespace fs = std::filesystem;

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr char kConvModel[] = "convtranspose_gelu_groupnorm";
constexpr char kGemmModel[] = "gemm_bias_hardtanh_mish_groupnorm";
constexpr char kGroupNormModel[] = "groupnorm";

// A small groupnorm model: 8 channels in 4 groups, any spatial size.
// `extra` is appended verbatim (instance groups, version policy).
std::string GroupNormConfig(const std::string& name, const std::string& extra = "") {
  return absl::StrCat(R"(name: ")", name, R"("
platform: "groupnorm"
max_batch_size: 8
input [ { name: "input", data_type: TYPE_FP32, dims: [ 8, -1, -1 ] } ]
output [ { name: "output", data_type: TYPE_FP32, dims: [ 8, -1, -1 ] } ]
parameters { key: "num_channels" value: { string_value: "8" } }
parameters { key: "num_groups" value: { string_value: "4" } }
)",
                      extra);
}

std::string TestParameter(const std::string& key, const std::string& value) {
  return absl::StrCat("parameters { key: \"", key, "\" value: { string_value: \"", value,
                      "\" } }\n");
}

// What one request sent through a model's batcher got back.
struct InferResult {
  bool answered = false;
  int answers = 0;
  absl::Status status = absl::UnknownError("never answered");
  Shape output_shape;
  std::vector<float> output;
};

// Sends `input` as one [1, 8, 2, 3] request through the record's batcher and
// waits (up to 30 s) for its answer.
InferResult Infer(const ModelVersionRecord& record, const std::vector<float>& input) {
  // Shared with the callbacks, which may outlive a wait that timed out.
  struct State {
    absl::Mutex mu;
    InferResult result ABSL_GUARDED_BY(mu);
    absl::Notification done;
    std::vector<float> input;
  };
  auto state = std::make_shared<State>();
  state->input = input;
  auto request = std::make_unique<InferenceRequest>();
  request->id = "r1";
  request->input_shape = {1, 8, 2, 3};
  request->batch_size = 1;
  request->input = state->input.data();
  request->allocate_output = [state](const Shape& shape) {
    absl::MutexLock lock(&state->mu);
    state->result.output_shape = shape;
    state->result.output.assign(NumElements(shape), -1.0f);
    return state->result.output.data();
  };
  request->on_complete = [state](const absl::Status& status, const RequestTimestamps&) {
    {
      absl::MutexLock lock(&state->mu);
      state->result.status = status;
      ++state->result.answers;
    }
    state->done.Notify();
  };
  record.batcher().Enqueue(std::move(request));
  const bool answered = state->done.WaitForNotificationWithTimeout(absl::Seconds(30));
  absl::MutexLock lock(&state->mu);
  InferResult result = state->result;
  result.answered = answered;
  return result;
}

std::vector<NamedF32Tensor> GroupNormWeights() {
  return {{"gn.weight", {8}, std::vector<float>(8, 1.5f)},
          {"gn.bias", {8}, std::vector<float>(8, 0.25f)}};
}

// A fresh repository directory per test: the small default repository (three
// working models) plus the broken and multi-version models the tests name.
class ModelManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(WriteDefaultRepository(dir_.path(), RepositorySize::kSmall).ok());
  }

  void TearDown() override { manager_.reset(); }

  void WriteFile(const std::string& relative, const std::string& contents) {
    dir_.WriteFile(relative, contents);
  }

  void WriteWeights(const std::string& relative, const std::vector<NamedF32Tensor>& tensors) {
    const fs::path path = fs::path(dir_.path()) / relative;
    fs::create_directories(path.parent_path());
    const absl::Status status = WriteSafetensorsFile(path.string(), tensors);
    ASSERT_TRUE(status.ok()) << status;
  }

  // A groupnorm model `name` with version 1: GroupNormConfig(name, extra) and
  // its weights.
  void WriteGroupNormModel(const std::string& name, const std::string& extra = "") {
    WriteFile(name + "/config.pbtxt", GroupNormConfig(name, extra));
    WriteWeights(name + "/1/model.safetensors", GroupNormWeights());
  }

  // Models that fail to load, each for a different reason.
  void AddBrokenModels() {
    WriteWeights("no_config/1/model.safetensors", GroupNormWeights());

    WriteFile("bad_config/config.pbtxt",
              "name: \"bad_config\"\nplatform: \"groupnorm\"\n"
              "max_batch_size: eight\n");
    WriteWeights("bad_config/1/model.safetensors", GroupNormWeights());

    WriteFile("missing_tensor/config.pbtxt", GroupNormConfig("missing_tensor"));
    WriteWeights("missing_tensor/1/model.safetensors", {GroupNormWeights()[0]});

    WriteGroupNormModel("gpu_only", "instance_group [ { count: 1, kind: KIND_GPU } ]\n");
  }

  // "two_versions": versions 1 and 2 both load. "newer_broken": version 1
  // loads, version 2 lacks gn.bias.
  void AddVersionedModels() {
    WriteGroupNormModel("two_versions", "version_policy: { all: {} }\n");
    WriteWeights("two_versions/2/model.safetensors", GroupNormWeights());

    WriteGroupNormModel("newer_broken", "version_policy: { all: {} }\n");
    WriteWeights("newer_broken/2/model.safetensors", {GroupNormWeights()[0]});
  }

  void Load() {
    ModelManagerOptions options;
    options.repository = dir_.path();
    options.clock = Clock::Real();
    options.metrics = metrics_.get();
    options.cpu_pool = &pool_;
    absl::StatusOr<std::unique_ptr<ModelManager>> manager = ModelManager::Load(options);
    ASSERT_TRUE(manager.ok()) << manager.status();
    manager_ = *std::move(manager);
  }

  // The record that Find returns, or a test failure.
  const ModelVersionRecord* MustFind(const std::string& name, const std::string& version) {
    absl::StatusOr<const ModelVersionRecord*> record = manager_->Find(name, version);
    EXPECT_TRUE(record.ok()) << name << " version \"" << version << "\": " << record.status();
    return record.ok() ? *record : nullptr;
  }

  // The repository; outlives the manager (declared first).
  TestDir dir_{"model_manager_test"};
  std::unique_ptr<MetricsRegistry> metrics_ = MetricsRegistry::Create();
  ThreadPool pool_{1};
  std::unique_ptr<ModelManager> manager_;
};

TEST_F(ModelManagerTest, LoadsEveryWorkingModelOnTheCpu) {
  Load();

  for (const char* name : {kConvModel, kGemmModel, kGroupNormModel}) {
    SCOPED_TRACE(name);
    absl::StatusOr<const ModelVersionRecord*> record = manager_->FindReady(name, "");
    ASSERT_TRUE(record.ok()) << record.status();
    EXPECT_EQ((*record)->name(), name);
    EXPECT_EQ((*record)->version(), 1);
    EXPECT_EQ((*record)->version_string(), "1");
    EXPECT_TRUE((*record)->loaded());
    EXPECT_TRUE((*record)->ready());
    EXPECT_EQ((*record)->reason(), "");
    EXPECT_EQ((*record)->device(), "cpu");
    EXPECT_EQ((*record)->config().name(), name);
    EXPECT_EQ((*record)->model().family(), name);
  }
}

TEST_F(ModelManagerTest, AcceptsTritonsCudaGraphsSetting) {
  // Triton's optimization { cuda { graphs } } field: accepted either way (it
  // only changes how GPU instances launch) and served back as given.
  WriteGroupNormModel("graphs_off", "optimization { cuda { graphs: false } }\n");
  WriteGroupNormModel("graphs_on", "optimization { cuda { graphs: true } }\n");
  Load();
  const ModelVersionRecord* off = MustFind("graphs_off", "");
  const ModelVersionRecord* on = MustFind("graphs_on", "");
  ASSERT_NE(off, nullptr);
  ASSERT_NE(on, nullptr);
  EXPECT_TRUE(off->ready());
  EXPECT_EQ(off->config().optimization().cuda().graphs_setting_case(),
            inference::ModelOptimizationPolicy::Cuda::kGraphs);
  EXPECT_FALSE(off->config().optimization().cuda().graphs());
  EXPECT_TRUE(on->config().optimization().cuda().graphs());
}

TEST_F(ModelManagerTest, DefaultRepositoryModelsSpinOnTheirGpuEvents) {
  // The generated repository keeps the waiting its serving results were
  // measured with (client/default_repository.cc).
  Load();
  for (const char* name : {kConvModel, kGemmModel, kGroupNormModel}) {
    const ModelVersionRecord* record = MustFind(name, "");
    ASSERT_NE(record, nullptr);
    EXPECT_TRUE(record->config().optimization().cuda().busy_wait_events()) << name;
  }
}

TEST_F(ModelManagerTest, AcceptsTritonsBusyWaitEventsSetting) {
  // optimization { cuda { busy_wait_events } }: how GPU instances wait for a
  // batch; accepted either way and served back as given (false when absent).
  WriteGroupNormModel("spin", "optimization { cuda { busy_wait_events: true } }\n");
  WriteGroupNormModel("block");
  Load();
  const ModelVersionRecord* spin = MustFind("spin", "");
  const ModelVersionRecord* block = MustFind("block", "");
  ASSERT_NE(spin, nullptr);
  ASSERT_NE(block, nullptr);
  EXPECT_TRUE(spin->ready());
  EXPECT_TRUE(block->ready());
  EXPECT_TRUE(spin->config().optimization().cuda().busy_wait_events());
  EXPECT_FALSE(block->config().optimization().cuda().busy_wait_events());
}

TEST_F(ModelManagerTest, BrokenModelsDoNotStopTheOthersFromLoading) {
  AddBrokenModels();
  Load();

  for (const char* name : {kConvModel, kGemmModel, kGroupNormModel}) {
    EXPECT_TRUE(manager_->FindReady(name, "").ok()) << name;
  }
}

// SPEC.md §1.4: tf32 for the transposed convolution, fp32 for the others.
TEST_F(ModelManagerTest, ReportsEffectivePrecisionInTheConfig) {
  Load();

  const std::vector<std::pair<std::string, std::string>> expected = {
      {kConvModel, "tf32"}, {kGemmModel, "fp32"}, {kGroupNormModel, "fp32"}};
  for (const auto& [name, precision] : expected) {
    const ModelVersionRecord* record = MustFind(name, "");
    ASSERT_NE(record, nullptr);
    const auto& parameters = record->config().parameters();
    ASSERT_TRUE(parameters.contains("precision")) << name;
    EXPECT_EQ(parameters.at("precision").string_value(), precision) << name;
    EXPECT_EQ(PrecisionName(record->model().precision()), precision) << name;
  }
}

TEST_F(ModelManagerTest, ListsFailedModelsWithTheirReason) {
  AddBrokenModels();
  Load();

  struct Expected {
    const char* name;
    int64_t version;
    const char* reason;
  };
  for (const Expected& expected :
       {Expected{"no_config", 0, "config.pbtxt"}, Expected{"bad_config", 0, "config.pbtxt"},
        Expected{"missing_tensor", 1, "gn.bias"}, Expected{"gpu_only", 1, "KIND_GPU"}}) {
    SCOPED_TRACE(expected.name);
    const ModelVersionRecord* record = MustFind(expected.name, "");
    ASSERT_NE(record, nullptr);
    EXPECT_EQ(record->name(), expected.name);
    EXPECT_EQ(record->version(), expected.version);
    EXPECT_FALSE(record->loaded());
    EXPECT_FALSE(record->ready());
    EXPECT_THAT(record->reason(), HasSubstr(expected.reason));
  }
}

TEST_F(ModelManagerTest, ReasonForMissingTensorNamesTheTensorAndTheFile) {
  AddBrokenModels();
  Load();

  const ModelVersionRecord* record = MustFind("missing_tensor", "1");
  ASSERT_NE(record, nullptr);
  EXPECT_THAT(record->reason(),
              AllOf(HasSubstr("\"gn.bias\""), HasSubstr("missing_tensor/1/model.safetensors")));
}

TEST_F(ModelManagerTest, FindReadyOfFailedModelIsUnavailableWithTheReason) {
  AddBrokenModels();
  Load();

  absl::StatusOr<const ModelVersionRecord*> record = manager_->FindReady("missing_tensor", "");

  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), absl::StatusCode::kUnavailable) << record.status();
  EXPECT_THAT(record.status().message(), AllOf(HasSubstr("missing_tensor"), HasSubstr("gn.bias")));
  EXPECT_EQ(manager_->FindReady("no_config", "").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(manager_->FindReady("gpu_only", "1").status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(ModelManagerTest, UnknownModelIsNotFound) {
  Load();

  EXPECT_EQ(manager_->Find("resnet50", "").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(manager_->FindReady("resnet50", "1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(manager_->Versions("resnet50").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(manager_->Find("resnet50", "").status().message(), HasSubstr("\"resnet50\""));
}

TEST_F(ModelManagerTest, UnknownVersionIsNotFound) {
  Load();

  for (const char* version : {"2", "0"}) {
    absl::StatusOr<const ModelVersionRecord*> record = manager_->Find(kGroupNormModel, version);
    EXPECT_EQ(record.status().code(), absl::StatusCode::kNotFound) << version;
    EXPECT_EQ(manager_->FindReady(kGroupNormModel, version).status().code(),
              absl::StatusCode::kNotFound)
        << version;
  }
}

TEST_F(ModelManagerTest, VersionThatIsNotANumberIsInvalidArgument) {
  Load();

  for (const char* version : {"-1", "abc", "1.0"}) {
    absl::StatusOr<const ModelVersionRecord*> record = manager_->Find(kGroupNormModel, version);
    EXPECT_EQ(record.status().code(), absl::StatusCode::kInvalidArgument) << version;
    EXPECT_THAT(record.status().message(),
                AllOf(HasSubstr(absl::StrCat("\"", version, "\"")), HasSubstr("version number")));
    EXPECT_EQ(manager_->FindReady(kGroupNormModel, version).status().code(),
              absl::StatusCode::kInvalidArgument)
        << version;
  }
}

TEST_F(ModelManagerTest, EmptyVersionPicksTheHighestLoadedVersion) {
  AddVersionedModels();
  Load();

  absl::StatusOr<const ModelVersionRecord*> latest = manager_->FindReady("two_versions", "");
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ((*latest)->version(), 2);

  absl::StatusOr<const ModelVersionRecord*> first = manager_->FindReady("two_versions", "1");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)->version(), 1);
}

TEST_F(ModelManagerTest, EmptyVersionSkipsAHigherVersionThatFailed) {
  AddVersionedModels();
  Load();

  absl::StatusOr<const ModelVersionRecord*> latest = manager_->FindReady("newer_broken", "");
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ((*latest)->version(), 1);

  absl::StatusOr<const ModelVersionRecord*> broken = manager_->FindReady("newer_broken", "2");
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(broken.status().message(), HasSubstr("gn.bias"));
}

TEST_F(ModelManagerTest, VersionsListsLoadedAndFailedVersionsAscending) {
  AddVersionedModels();
  Load();

  absl::StatusOr<std::vector<const ModelVersionRecord*>> versions =
      manager_->Versions("newer_broken");
  ASSERT_TRUE(versions.ok()) << versions.status();
  ASSERT_EQ(versions->size(), 2u);
  EXPECT_EQ((*versions)[0]->version(), 1);
  EXPECT_TRUE((*versions)[0]->ready());
  EXPECT_EQ((*versions)[1]->version(), 2);
  EXPECT_FALSE((*versions)[1]->ready());
}

TEST_F(ModelManagerTest, AllListsEveryRecordSortedByNameAndVersion) {
  AddBrokenModels();
  AddVersionedModels();
  Load();

  std::vector<std::string> listed;
  for (const ModelVersionRecord* record : manager_->All()) {
    listed.push_back(absl::StrCat(record->name(), ":", record->version()));
  }

  EXPECT_THAT(listed,
              ElementsAre("bad_config:0", absl::StrCat(kConvModel, ":1"),
                          absl::StrCat(kGemmModel, ":1"), "gpu_only:1",
                          absl::StrCat(kGroupNormModel, ":1"), "missing_tensor:1", "newer_broken:1",
                          "newer_broken:2", "no_config:0", "two_versions:1", "two_versions:2"));
}

TEST_F(ModelManagerTest, ReadinessIsStrictOnlyWhenAsked) {
  AddBrokenModels();
  Load();

  EXPECT_TRUE(manager_->Ready(/*strict=*/false));
  EXPECT_FALSE(manager_->Ready(/*strict=*/true));
}

TEST_F(ModelManagerTest, RepositoryWithoutFailuresIsStrictlyReady) {
  AddVersionedModels();
  fs::remove_all(fs::path(dir_.path()) / "newer_broken");
  Load();

  EXPECT_TRUE(manager_->Ready(/*strict=*/true));
  EXPECT_TRUE(manager_->Ready(/*strict=*/false));
}

TEST_F(ModelManagerTest, ShutdownMakesEverythingNotReady) {
  AddVersionedModels();
  Load();
  ASSERT_FALSE(manager_->shutting_down());

  manager_->Shutdown(absl::Now());

  EXPECT_TRUE(manager_->shutting_down());
  EXPECT_FALSE(manager_->Ready(/*strict=*/false));
  for (const ModelVersionRecord* record : manager_->All()) {
    EXPECT_FALSE(record->ready()) << record->name() << " " << record->version();
    EXPECT_THAT(record->reason(), Not(IsEmpty())) << record->name();
  }
  absl::StatusOr<const ModelVersionRecord*> record = manager_->FindReady(kGroupNormModel, "");
  EXPECT_EQ(record.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(record.status().message(), HasSubstr("shutting down"));
  EXPECT_TRUE(manager_->Find(kGroupNormModel, "").ok()) << "records stay listed";
}

TEST_F(ModelManagerTest, BeginDrainMakesTheServerNotReadyWhileItsModelsStillServe) {
  AddVersionedModels();
  fs::remove_all(fs::path(dir_.path()) / "newer_broken");
  Load();
  ASSERT_TRUE(manager_->Ready(/*strict=*/false));

  manager_->BeginDrain();

  // Probes and load balancers see the server leave...
  EXPECT_FALSE(manager_->Ready(/*strict=*/false));
  EXPECT_FALSE(manager_->Ready(/*strict=*/true));
  EXPECT_FALSE(manager_->shutting_down());
  // ...while what still reaches it is served, not refused.
  absl::StatusOr<const ModelVersionRecord*> record = manager_->FindReady("two_versions", "");
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_TRUE((*record)->ready());
  const InferResult result = Infer(**record, std::vector<float>(1 * 8 * 2 * 3, 3.0f));
  ASSERT_TRUE(result.answered);
  EXPECT_TRUE(result.status.ok()) << result.status;
}

TEST_F(ModelManagerTest, LoadFailsWhenTheRepositoryDoesNotExist) {
  ModelManagerOptions options;
  options.repository = (fs::path(dir_.path()) / "absent").string();
  options.clock = Clock::Real();
  options.metrics = metrics_.get();
  options.cpu_pool = &pool_;

  absl::StatusOr<std::unique_ptr<ModelManager>> manager = ModelManager::Load(options);

  EXPECT_EQ(manager.status().code(), absl::StatusCode::kNotFound) << manager.status();
}

TEST_F(ModelManagerTest, LoadedModelAnswersAnInferenceThroughItsBatcher) {
  AddVersionedModels();
  Load();
  absl::StatusOr<const ModelVersionRecord*> record = manager_->FindReady("two_versions", "");
  ASSERT_TRUE(record.ok()) << record.status();

  // Constant input per group: GroupNorm maps it to the bias, 0.25.
  const InferResult result = Infer(**record, std::vector<float>(1 * 8 * 2 * 3, 3.0f));

  ASSERT_TRUE(result.answered);
  EXPECT_EQ(result.answers, 1);
  EXPECT_TRUE(result.status.ok()) << result.status;
  EXPECT_EQ(result.output_shape, (Shape{1, 8, 2, 3}));
  for (float value : result.output) EXPECT_NEAR(value, 0.25f, 1e-5f);
}

TEST_F(ModelManagerTest, RefusesTestParametersWithoutTheirEnvironmentVariable) {
  for (const char* key : {"fuseserve_test_fail_batch", "fuseserve_test_execution_delay_us"}) {
    WriteFile(absl::StrCat(key, "/config.pbtxt"), GroupNormConfig(key, TestParameter(key, "1")));
    WriteWeights(absl::StrCat(key, "/1/model.safetensors"), GroupNormWeights());
  }
  Load();

  for (const char* key : {"fuseserve_test_fail_batch", "fuseserve_test_execution_delay_us"}) {
    const ModelVersionRecord* record = MustFind(key, "");
    ASSERT_NE(record, nullptr);
    EXPECT_FALSE(record->loaded());
    EXPECT_THAT(record->reason(), AllOf(HasSubstr(absl::StrCat("\"", key, "\"")),
                                        HasSubstr("FUSESERVE_ENABLE_TEST_PARAMETERS=1")));
  }
}

// With FUSESERVE_ENABLE_TEST_PARAMETERS=1 in the environment for the test.
class ModelManagerTestParametersTest : public ModelManagerTest {
 protected:
  void SetUp() override {
    ModelManagerTest::SetUp();
    ASSERT_EQ(::setenv("FUSESERVE_ENABLE_TEST_PARAMETERS", "1", 1), 0);
  }
  void TearDown() override {
    ::unsetenv("FUSESERVE_ENABLE_TEST_PARAMETERS");
    ModelManagerTest::TearDown();
  }
};

TEST_F(ModelManagerTestParametersTest, InjectedDeviceErrorFailsTheBatchAndTheModelIsNotReady) {
  WriteFile(
      "faulty/config.pbtxt",
      GroupNormConfig("faulty", absl::StrCat("instance_group [ { count: 1, kind: KIND_CPU } ]\n",
                                             TestParameter("fuseserve_test_fail_batch", "2"))));
  WriteWeights("faulty/1/model.safetensors", GroupNormWeights());
  Load();
  absl::StatusOr<const ModelVersionRecord*> record = manager_->FindReady("faulty", "");
  ASSERT_TRUE(record.ok()) << record.status();
  const std::vector<float> input(1 * 8 * 2 * 3, 3.0f);

  const InferResult first = Infer(**record, input);
  ASSERT_TRUE(first.answered);
  EXPECT_TRUE(first.status.ok()) << first.status;
  EXPECT_TRUE((*record)->ready());

  const InferResult second = Infer(**record, input);
  ASSERT_TRUE(second.answered);
  EXPECT_EQ(second.status.code(), absl::StatusCode::kInternal) << second.status;
  EXPECT_THAT(second.status.message(),
              AllOf(HasSubstr("faulty/1 cpu#0"), HasSubstr("injected device error")));
  EXPECT_FALSE((*record)->ready());
  EXPECT_THAT((*record)->reason(), HasSubstr("unhealthy"));
  EXPECT_FALSE(manager_->Ready(/*strict=*/false));
  absl::StatusOr<const ModelVersionRecord*> unready = manager_->FindReady("faulty", "");
  EXPECT_EQ(unready.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(unready.status().message(), HasSubstr("unhealthy"));

  // The batcher answers at once instead of running the unhealthy instance.
  const InferResult third = Infer(**record, input);
  ASSERT_TRUE(third.answered);
  EXPECT_EQ(third.status.code(), absl::StatusCode::kUnavailable) << third.status;
}

TEST_F(ModelManagerTestParametersTest, ExecutionDelayMakesEveryBatchTakeAtLeastThatLong) {
  WriteGroupNormModel("slow", TestParameter("fuseserve_test_execution_delay_us", "20000"));
  Load();
  absl::StatusOr<const ModelVersionRecord*> record = manager_->FindReady("slow", "");
  ASSERT_TRUE(record.ok()) << record.status();

  const absl::Time start = absl::Now();
  const InferResult result = Infer(**record, std::vector<float>(1 * 8 * 2 * 3, 3.0f));

  ASSERT_TRUE(result.answered);
  EXPECT_TRUE(result.status.ok()) << result.status;
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(20));
  for (float value : result.output) EXPECT_NEAR(value, 0.25f, 1e-5f);
}

TEST_F(ModelManagerTestParametersTest, RejectsMalformedTestParameterValues) {
  WriteGroupNormModel("bad_fail_batch", TestParameter("fuseserve_test_fail_batch", "0"));
  WriteGroupNormModel("bad_delay", TestParameter("fuseserve_test_execution_delay_us", "-5"));
  Load();

  EXPECT_THAT(MustFind("bad_fail_batch", "")->reason(),
              HasSubstr("parameter \"fuseserve_test_fail_batch\" must be a positive integer"));
  EXPECT_THAT(
      MustFind("bad_delay", "")->reason(),
      HasSubstr("parameter \"fuseserve_test_execution_delay_us\" must be a non-negative integer"));
}

}  // namespace
}  // namespace fuseserve
