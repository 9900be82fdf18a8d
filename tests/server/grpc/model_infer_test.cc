// ModelInferHandler's contract with its transport: the outcome of a call is
// handed over as an Answer when the request completes, and only
// Answer::Finish serialises the answer and records the request in the
// model's metrics, on whichever thread the transport calls it (so that a
// GPU instance does neither). Against the small default repository on the
// CPU backend.

#include "server/grpc/model_infer.h"


#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/default_repository.h"
#include "common/logging.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "proto/grpc_service.pb.h"
#include "server/batching/clock.h"
#include "server/metrics/metrics_registry.h"
#include "server/runtime/model_manager.h"
#include "tests/testing/test_dir.h"

namespace fuseserve {
namespace {

// groupnorm of the small repository: [N, 8, H, W] in and out.
constexpr char kModel[] = "groupnorm";

grpc::ByteBuffer Serialized(const inference::ModelInferRequest& request) {
  const std::string bytes = request.SerializeAsString();
  grpc::Slice slice(bytes.data(), bytes.size());
  return grpc::ByteBuffer(&slice, 1);
}

inference::ModelInferRequest GroupNormRequest(const std::string& model) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  request.set_id("answer-1");
  auto* input = request.add_inputs();
  input->set_name("input");
  input->set_datatype("FP32");
  for (int64_t dim : {1, 8, 2, 3}) input->add_shape(dim);
  std::vector<float> values(48);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * static_cast<float>(i % 7);
  request.add_raw_input_contents(
      std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
  return request;
}

// The Answer handed to `done`, and the thread that handed it over.
struct Handed {
  absl::Mutex mu;
  std::optional<ModelInferHandler::Answer> answer ABSL_GUARDED_BY(mu);
  std::thread::id thread ABSL_GUARDED_BY(mu);

  ModelInferHandler::Done Callback() {
    return [this](ModelInferHandler::Answer handed) {
      absl::MutexLock lock(&mu);
      answer = std::move(handed);
      thread = std::this_thread::get_id();
    };
  }
  ModelInferHandler::Answer Await() {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(
        +[](std::optional<ModelInferHandler::Answer>* a) { return a->has_value(); }, &answer));
    ModelInferHandler::Answer taken = std::move(*answer);
    answer.reset();
    return taken;
  }
};

class ModelInferHandlerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    SetMinLogSeverity(LogSeverity::kWarning);
    repository_ = new TestDir("fuseserve-answer-repo");
    ASSERT_TRUE(WriteDefaultRepository(repository_->path(), RepositorySize::kSmall).ok());
  }
  static void TearDownTestSuite() {
    delete repository_;  // and the directory
  }

  void SetUp() override {
    metrics_ = MetricsRegistry::Create();
    pool_ = std::make_unique<ThreadPool>(2);
    ModelManagerOptions options;
    options.repository = repository_->path();
    options.clock = Clock::Real();
    options.metrics = metrics_.get();
    options.cpu_pool = pool_.get();
    absl::StatusOr<std::unique_ptr<ModelManager>> models = ModelManager::Load(options);
    ASSERT_TRUE(models.ok()) << models.status();
    models_ = *std::move(models);
    handler_ = std::make_unique<ModelInferHandler>(models_.get(), Clock::Real(),
                                                   /*shared_memory=*/nullptr,
                                                   /*page_locked_outputs=*/false);
  }

  void TearDown() override {
    handler_.reset();
    if (models_ != nullptr) models_->Shutdown(absl::Now() + absl::Seconds(5));
    models_.reset();
  }

  ModelStatisticsSnapshot Statistics() { return metrics_->ForModel(kModel, "1").Snapshot(); }

  static TestDir* repository_;
  std::unique_ptr<MetricsRegistry> metrics_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<ModelManager> models_;
  std::unique_ptr<ModelInferHandler> handler_;
};

TestDir* ModelInferHandlerTest::repository_ = nullptr;

TEST_F(ModelInferHandlerTest, AComputedRequestIsRecordedAndSerialisedOnlyByFinish) {
  Handed handed;
  handler_->Start(Serialized(GroupNormRequest(kModel)), {}, handed.Callback());
  ModelInferHandler::Answer answer = handed.Await();
  {
    absl::MutexLock lock(&handed.mu);
    EXPECT_NE(handed.thread, std::this_thread::get_id()) << "handed over by the instance";
  }
  EXPECT_EQ(Statistics().success.count, 0u) << "recorded before Finish";

  grpc::ByteBuffer serialized;
  const absl::Status status = answer.Finish(&serialized);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(Statistics().success.count, 1u);
  EXPECT_EQ(Statistics().inference_count, 1u);

  grpc::Slice whole;
  ASSERT_TRUE(serialized.DumpToSingleSlice(&whole).ok());
  inference::ModelInferResponse response;
  ASSERT_TRUE(response.ParseFromArray(whole.begin(), static_cast<int>(whole.size())));
  EXPECT_EQ(response.model_name(), kModel);
  EXPECT_EQ(response.id(), "answer-1");
  ASSERT_EQ(response.outputs_size(), 1);
  ASSERT_EQ(response.raw_output_contents_size(), 1);
  EXPECT_EQ(response.raw_output_contents(0).size(), 48 * sizeof(float));
}

TEST_F(ModelInferHandlerTest, AnAnswerDroppedUnfinishedRecordsNothing) {
  Handed handed;
  handler_->Start(Serialized(GroupNormRequest(kModel)), {}, handed.Callback());
  { ModelInferHandler::Answer answer = handed.Await(); }
  const ModelStatisticsSnapshot statistics = Statistics();
  EXPECT_EQ(statistics.success.count, 0u);
  EXPECT_EQ(statistics.fail.count, 0u);
  EXPECT_EQ(statistics.execution_count, 1u);
}

TEST_F(ModelInferHandlerTest, ARequestForNoModelIsAnsweredBeforeStartReturns) {
  Handed handed;
  handler_->Start(Serialized(GroupNormRequest("no_such_model")), {}, handed.Callback());
  {
    absl::MutexLock lock(&handed.mu);
    ASSERT_TRUE(handed.answer.has_value());
    EXPECT_EQ(handed.thread, std::this_thread::get_id());
  }
  ModelInferHandler::Answer answer = handed.Await();
  grpc::ByteBuffer serialized;
  const absl::Status status = answer.Finish(&serialized);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_EQ(serialized.Length(), 0u);
}

}  // namespace
}  // namespace fuseserve
