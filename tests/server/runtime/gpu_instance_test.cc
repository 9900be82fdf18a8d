#include "server/runtime/gpu_instance.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/resources.h"
#include "server/batching/clock.h"
#include "tests/server/models/model_test_util.h"

namespace fuseserve {
namespace {

using Batch = std::vector<std::unique_ptr<InferenceRequest>>;

constexpr int64_t kChannels = 6;
constexpr int64_t kHeight = 4;
constexpr int64_t kWidth = 5;
constexpr int64_t kSample = kChannels * kHeight * kWidth;

testing::ModelSpec GroupNormSpec() {
  testing::ModelSpec spec;
  spec.platform = "groupnorm";
  spec.max_batch_size = 4;
  spec.input_dims = {kChannels, kHeight, kWidth};
  spec.output_dims = {kChannels, kHeight, kWidth};
  spec.parameters = {{"num_channels", "6"}, {"num_groups", "3"}};
  spec.tensors = {testing::UniformTensor("gn.weight", {kChannels}, 1, 0.5f, 1.5f),
                  testing::UniformTensor("gn.bias", {kChannels}, 2, -0.5f, 0.5f)};
  return spec;
}

// GroupNorm over 64 channels of any height and width: large samples.
testing::ModelSpec WideGroupNormSpec(int max_batch_size) {
  testing::ModelSpec spec;
  spec.platform = "groupnorm";
  spec.max_batch_size = max_batch_size;
  spec.input_dims = {64, -1, -1};
  spec.output_dims = {64, -1, -1};
  spec.parameters = {{"num_channels", "64"}, {"num_groups", "8"}};
  spec.tensors = {testing::UniformTensor("gn.weight", {64}, 1, 0.5f, 1.5f),
                  testing::UniformTensor("gn.bias", {64}, 2, -0.5f, 0.5f)};
  return spec;
}

// One request's memory: pageable vectors, or pinned buffers when `pinned`.
struct RequestMemory {
  bool pinned = false;
  std::vector<float> pageable_input, pageable_output;
  cuda::PinnedBuffer pinned_input, pinned_output;
  absl::Status status = absl::UnknownError("not answered");
  int answers = 0;

  const float* input() const {
    return pinned ? pinned_input.as<float>() : pageable_input.data();
  }
  const float* output() const {
    return pinned ? pinned_output.as<float>() : pageable_output.data();
  }
};

class GpuInstanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    auto model = GroupNormSpec().Create();
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
  }

  std::unique_ptr<Instance> CreateInstance(bool cuda_graphs, BatchTraceSink* trace = nullptr,
                                           bool busy_wait_events = false) {
    GpuInstanceOptions options;
    options.busy_wait_events = busy_wait_events;
    options.trace = trace;
    options.name = "groupnorm gpu0#0";
    options.model = model_.get();
    options.clock = Clock::Real();
    options.max_input_shape = {4, kChannels, kHeight, kWidth};
    options.cuda_graphs = cuda_graphs;
    auto instance = CreateGpuInstance(options);
    EXPECT_TRUE(instance.ok()) << instance.status();
    return instance.ok() ? *std::move(instance) : nullptr;
  }

  // A request of `rows` samples with values from `seed`, in `memory`.
  std::unique_ptr<InferenceRequest> MakeRequest(int64_t rows, int seed, bool pinned,
                                                RequestMemory* memory) {
    const int64_t count = rows * kSample;
    memory->pinned = pinned;
    std::vector<float> values(count);
    for (int64_t i = 0; i < count; ++i) values[i] = std::sin(0.37f * (i + 11 * seed)) * 3.0f;
    if (pinned) {
      auto input = cuda::PinnedBuffer::Allocate(count * sizeof(float));
      auto output = cuda::PinnedBuffer::Allocate(count * sizeof(float));
      EXPECT_TRUE(input.ok() && output.ok());
      memory->pinned_input = *std::move(input);
      memory->pinned_output = *std::move(output);
      std::copy(values.begin(), values.end(), memory->pinned_input.as<float>());
    } else {
      memory->pageable_input = values;
    }
    auto request = std::make_unique<InferenceRequest>();
    request->input_shape = {rows, kChannels, kHeight, kWidth};
    request->batch_size = rows;
    request->input = memory->input();
    request->input_pinned = pinned;
    request->output_pinned = pinned;
    request->allocate_output = [memory](const Shape& shape) {
      if (memory->pinned) return memory->pinned_output.as<float>();
      memory->pageable_output.assign(NumElements(shape), NAN);
      return memory->pageable_output.data();
    };
    request->on_complete = [memory](const absl::Status& status, const RequestTimestamps&) {
      ++memory->answers;
      memory->status = status;
    };
    return request;
  }

  // The CPU backend's answer for `memory`'s input of `rows` samples.
  void ExpectCpuAnswer(const RequestMemory& memory, int64_t rows) {
    ASSERT_EQ(memory.answers, 1);
    ASSERT_TRUE(memory.status.ok()) << memory.status;
    const Shape shape = {rows, kChannels, kHeight, kWidth};
    std::vector<float> expected(NumElements(shape));
    ASSERT_TRUE(model_->RunOnCpu(memory.input(), shape, expected.data(), pool_).ok());
    for (size_t i = 0; i < expected.size(); ++i) {
      ASSERT_NEAR(memory.output()[i], expected[i], 1e-4f * (1.0f + std::fabs(expected[i])))
          << "element " << i;
    }
  }

  // Mixed batches (a pinned request between pageable ones) run repeatedly, so
  // that with graphs the shape is run plainly, then captured, then replayed.
  void RunMixedBatches(Instance* instance) {
    for (int round = 0; round < 4; ++round) {
      RequestMemory a, b, c;
      Batch batch;
      batch.push_back(MakeRequest(1, round, /*pinned=*/false, &a));
      batch.push_back(MakeRequest(2, round + 10, /*pinned=*/true, &b));
      batch.push_back(MakeRequest(1, round + 20, /*pinned=*/false, &c));
      instance->Execute(batch);
      SCOPED_TRACE(::testing::Message() << "round " << round);
      ExpectCpuAnswer(a, 1);
      ExpectCpuAnswer(b, 2);
      ExpectCpuAnswer(c, 1);
    }
  }

  std::unique_ptr<Model> model_;
  ThreadPool pool_{1};
};

TEST_F(GpuInstanceTest, ReplayedGraphsGiveTheCpuAnswerForEveryBatch) {
  std::unique_ptr<Instance> instance = CreateInstance(/*cuda_graphs=*/true);
  ASSERT_NE(instance, nullptr);
  RunMixedBatches(instance.get());
  EXPECT_TRUE(instance->healthy());
}

TEST_F(GpuInstanceTest, PlainLaunchesGiveTheCpuAnswerForEveryBatch) {
  std::unique_ptr<Instance> instance = CreateInstance(/*cuda_graphs=*/false);
  ASSERT_NE(instance, nullptr);
  RunMixedBatches(instance.get());
}

// Both ways of waiting for a batch (the driver's blocking wait, the default,
// and Triton's busy_wait_events spin) answer every batch once it is done.
TEST_F(GpuInstanceTest, BusyWaitingOnEventsGivesTheCpuAnswerForEveryBatch) {
  std::unique_ptr<Instance> instance =
      CreateInstance(/*cuda_graphs=*/true, /*trace=*/nullptr, /*busy_wait_events=*/true);
  ASSERT_NE(instance, nullptr);
  RunMixedBatches(instance.get());
  EXPECT_TRUE(instance->healthy());
}

TEST_F(GpuInstanceTest, PinnedRequestsAreNeverCopiedOnTheHost) {
  std::unique_ptr<Instance> instance = CreateInstance(/*cuda_graphs=*/true);
  ASSERT_NE(instance, nullptr);
  RequestMemory pageable, pinned;
  Batch batch;
  batch.push_back(MakeRequest(1, 1, /*pinned=*/false, &pageable));
  batch.push_back(MakeRequest(1, 2, /*pinned=*/true, &pinned));
  instance->Execute(batch);
  ExpectCpuAnswer(pageable, 1);
  ExpectCpuAnswer(pinned, 1);
  // Staged in, staged out.
  EXPECT_EQ(batch[0]->host_copies, 2);
  // Device <-> its own memory only.
  EXPECT_EQ(batch[1]->host_copies, 0);
}

// Samples of 64x512x512 floats (67 MB): a whole batch of 16 would be 1 GiB of
// device memory each way, so the first batch reserves only its own samples.
TEST_F(GpuInstanceTest, LargeSamplesAreReservedInDoublingStepsNotAsAWholeBatch) {
  auto model = WideGroupNormSpec(/*max_batch_size=*/16).Create();
  ASSERT_TRUE(model.ok()) << model.status();
  GpuInstanceOptions options;
  options.name = "big groupnorm gpu0#0";
  options.model = model->get();
  options.clock = Clock::Real();
  options.max_input_shape = {16, 64, -1, -1};
  absl::StatusOr<std::unique_ptr<Instance>> instance = CreateGpuInstance(options);
  ASSERT_TRUE(instance.ok()) << instance.status();

  const Shape sample = {1, 64, 512, 512};
  const int64_t sample_bytes = NumElements(sample) * sizeof(float);
  absl::StatusOr<int64_t> before = cuda::DeviceMemoryUsedBytes(0);
  ASSERT_TRUE(before.ok()) << before.status();
  std::vector<float> input(NumElements(sample));
  for (size_t i = 0; i < input.size(); ++i) input[i] = static_cast<float>(i % 97) * 0.01f;
  std::vector<float> output;
  absl::Status answered = absl::UnknownError("not answered");
  const auto run_one_sample = [&] {
    Batch batch;
    auto request = std::make_unique<InferenceRequest>();
    request->input_shape = sample;
    request->input = input.data();
    request->allocate_output = [&output](const Shape& shape) {
      output.assign(NumElements(shape), NAN);
      return output.data();
    };
    request->on_complete = [&answered](const absl::Status& status, const RequestTimestamps&) {
      answered = status;
    };
    batch.push_back(std::move(request));
    (*instance)->Execute(batch);
  };
  run_one_sample();
  ASSERT_TRUE(answered.ok()) << answered;
  absl::StatusOr<int64_t> after = cuda::DeviceMemoryUsedBytes(0);
  ASSERT_TRUE(after.ok()) << after.status();
  // One sample each way (plus allocator granularity), far from 2 x 16.
  EXPECT_LT(*after - *before, 4 * sample_bytes);
  // Batches that fit what is held reserve nothing more.
  for (int i = 0; i < 3; ++i) run_one_sample();
  ASSERT_TRUE(answered.ok()) << answered;
  absl::StatusOr<int64_t> steady = cuda::DeviceMemoryUsedBytes(0);
  ASSERT_TRUE(steady.ok()) << steady.status();
  EXPECT_EQ(*steady, *after) << "a batch that fits grew the buffers";

  std::vector<float> expected(input.size());
  ASSERT_TRUE((*model)->RunOnCpu(input.data(), sample, expected.data(), pool_).ok());
  for (size_t i = 0; i < expected.size(); i += 4099) {
    ASSERT_NEAR(output[i], expected[i], 1e-4f * (1.0f + std::fabs(expected[i]))) << i;
  }
}

// Inputs larger than a staging piece (4 MiB) cross in pieces through the
// instance's pinned ring, copied by the pool's workers and the instance's
// thread: 4 pageable samples of 6 MiB (two of them reachable only through
// copy_input, as gRPC's slices are) around a page-locked one, 8 pieces for
// 6 slots, so that slots are reused within the batch. Twice (graphs are run
// plainly, then captured), with and without a pool.
TEST_F(GpuInstanceTest, LargeInputsCrossThePinnedRingInPiecesIntact) {
  auto model = WideGroupNormSpec(/*max_batch_size=*/8).Create();
  ASSERT_TRUE(model.ok()) << model.status();
  ThreadPool copiers(3, "test-copy");
  for (ThreadPool* copy_pool : {&copiers, static_cast<ThreadPool*>(nullptr)}) {
    SCOPED_TRACE(copy_pool == nullptr ? "no copy pool" : "3 copy workers");
    GpuInstanceOptions options;
    options.name = "ring groupnorm gpu0#0";
    options.model = model->get();
    options.clock = Clock::Real();
    options.max_input_shape = {8, 64, -1, -1};
    options.copy_pool = copy_pool;
    absl::StatusOr<std::unique_ptr<Instance>> instance = CreateGpuInstance(options);
    ASSERT_TRUE(instance.ok()) << instance.status();

    const Shape sample = {1, 64, 128, 192};  // 6 MiB
    const int64_t count = NumElements(sample);
    constexpr int kRequests = 5;
    constexpr int kPinned = 2;
    for (int round = 0; round < 2; ++round) {
      std::vector<std::vector<float>> inputs(kRequests), outputs(kRequests);
      std::vector<absl::Status> answers(kRequests, absl::UnknownError("not answered"));
      cuda::PinnedBuffer pinned_input, pinned_output;
      Batch batch;
      for (int r = 0; r < kRequests; ++r) {
        inputs[r].resize(count);
        for (int64_t i = 0; i < count; ++i) {
          inputs[r][i] = std::sin(0.013f * static_cast<float>(i % 100003) + r + 7 * round) * 2.0f;
        }
        auto request = std::make_unique<InferenceRequest>();
        request->input_shape = sample;
        if (r == kPinned) {
          auto in = cuda::PinnedBuffer::Allocate(count * sizeof(float));
          auto out = cuda::PinnedBuffer::Allocate(count * sizeof(float));
          ASSERT_TRUE(in.ok() && out.ok());
          pinned_input = *std::move(in);
          pinned_output = *std::move(out);
          std::copy(inputs[r].begin(), inputs[r].end(), pinned_input.as<float>());
          request->input = pinned_input.as<float>();
          request->input_pinned = true;
          request->output_pinned = true;
          request->allocate_output = [&pinned_output](const Shape&) {
            return pinned_output.as<float>();
          };
        } else {
          if (r % 2 == 1) {
            const char* data = reinterpret_cast<const char*>(inputs[r].data());
            request->copy_input = [data](size_t offset, size_t size, char* destination) {
              std::memcpy(destination, data + offset, size);
            };
          } else {
            request->input = inputs[r].data();
          }
          request->allocate_output = [&outputs, r](const Shape& shape) {
            outputs[r].assign(NumElements(shape), NAN);
            return outputs[r].data();
          };
        }
        request->on_complete = [&answers, r](const absl::Status& status,
                                             const RequestTimestamps&) { answers[r] = status; };
        batch.push_back(std::move(request));
      }
      (*instance)->Execute(batch);
      SCOPED_TRACE(::testing::Message() << "round " << round);
      std::vector<float> expected(count);
      for (int r = 0; r < kRequests; ++r) {
        ASSERT_TRUE(answers[r].ok()) << "request " << r << ": " << answers[r];
        EXPECT_EQ(batch[r]->host_copies, r == kPinned ? 0 : 2) << "request " << r;
        const float* output = r == kPinned ? pinned_output.as<float>() : outputs[r].data();
        ASSERT_TRUE((*model)->RunOnCpu(inputs[r].data(), sample, expected.data(), pool_).ok());
        for (int64_t i = 0; i < count; ++i) {  // every element: pieces end anywhere
          ASSERT_NEAR(output[i], expected[i], 1e-4f * (1.0f + std::fabs(expected[i])))
              << "request " << r << ", element " << i;
        }
      }
    }
  }
}

class RecordingSink final : public BatchTraceSink {
 public:
  void Record(const BatchTrace& batch) override { batches.push_back(batch); }
  std::vector<BatchTrace> batches;
};

TEST_F(GpuInstanceTest, TracesEachBatchsPhasesInOrder) {
  RecordingSink sink;
  std::unique_ptr<Instance> instance = CreateInstance(/*cuda_graphs=*/true, &sink);
  ASSERT_NE(instance, nullptr);
  const absl::Time before = absl::Now();
  RunMixedBatches(instance.get());
  ASSERT_EQ(sink.batches.size(), 4u) << "one trace per batch";
  for (const BatchTrace& batch : sink.batches) {
    EXPECT_EQ(batch.instance, "groupnorm gpu0#0");
    EXPECT_EQ(batch.device, 0);
    EXPECT_EQ(batch.batch_size, 4);
    EXPECT_EQ(batch.requests, 3);
    EXPECT_GE(batch.start, before);
    EXPECT_GT(batch.input_end, absl::ZeroDuration());
    EXPECT_GE(batch.compute_end, batch.input_end);
    EXPECT_GE(batch.output_end, batch.compute_end);
  }
}

}  // namespace
}  // namespace fuseserve
