#include "kernels/cuda/group_norm.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/group_norm_resident.h"
#include "kernels/cuda/resources.h"
#include "kernels/reference/error_metrics.h"
#include "kernels/reference/ops.h"
#include "kernels/reference/test_data.h"
#include "tests/kernels/cuda/gpu_test_fixtures.h"

namespace fuseserve::cuda {
namespace {

using reference::CompareToReference;
using reference::ErrorStats;
using reference::kFp32Tolerance;

// Copies `host` into a new device buffer (plus `pad_floats` leading floats,
// for tests that need a misaligned start).
DeviceBuffer ToDevice(const std::vector<float>& host, size_t pad_floats = 0) {
  auto buffer = DeviceBuffer::Allocate((host.size() + pad_floats) * sizeof(float));
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  if (!buffer.ok()) return DeviceBuffer();
  EXPECT_EQ(cudaMemcpy(buffer->as<float>() + pad_floats, host.data(), host.size() * sizeof(float),
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  // Pageable cudaMemcpy may return before its DMA lands, on the legacy
  // stream the kernels' non-blocking stream does not wait for.
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return std::move(*buffer);
}

// A device buffer of `count` floats (plus padding) filled with NaN (all bits
// set), so that elements a kernel fails to write fail the comparison.
DeviceBuffer PoisonedDevice(int64_t count, size_t pad_floats = 0) {
  auto buffer = DeviceBuffer::Allocate((count + pad_floats) * sizeof(float));
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  if (!buffer.ok()) return DeviceBuffer();
  EXPECT_EQ(cudaMemset(buffer->data(), 0xFF, buffer->bytes()), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // cudaMemset is asynchronous
  return std::move(*buffer);
}

std::vector<float> ToHost(const float* device, int64_t count) {
  std::vector<float> host(count);
  EXPECT_EQ(cudaMemcpy(host.data(), device, count * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return host;
}

struct Case {
  int64_t batch;
  int64_t channels;
  std::vector<int64_t> spatial_dims;  // dims after C: empty for rank 2
  int64_t num_groups;

  int64_t spatial_size() const {
    int64_t size = 1;
    for (int64_t d : spatial_dims) size *= d;
    return size;
  }
  int64_t count() const { return batch * channels * spatial_size(); }
  std::string ToString() const {
    return absl::StrCat("[", batch, ", ", channels, spatial_dims.empty() ? "" : ", ",
                        absl::StrJoin(spatial_dims, ", "), "] G=", num_groups);
  }
  GroupNormParams params(GroupNormPrologue prologue = GroupNormPrologue::kNone) const {
    GroupNormParams p;
    p.batch = batch;
    p.channels = channels;
    p.spatial_size = spatial_size();
    p.num_groups = num_groups;
    p.prologue = prologue;
    return p;
  }
};

// Ranks 2 to 5; C=6,G=3 and C=64,G=8; batch 1; odd spatial sizes (scalar
// path); multiples of 4 (vector path); groups of one and of several chunks.
const std::vector<Case>& Cases() {
  static const auto* cases = new std::vector<Case>{
      {4, 6, {}, 3},         {1, 64, {}, 8},      {5, 96, {}, 8},       {2, 6, {7}, 3},
      {3, 64, {33}, 8},      {1, 64, {7, 5}, 8},  {2, 6, {7, 5}, 3},    {2, 64, {16, 16}, 8},
      {1, 8, {100, 100}, 1}, {1, 6, {91, 91}, 3}, {2, 6, {3, 4, 5}, 3}, {1, 64, {4, 5, 7}, 8},
      {1, 1, {1}, 1},        {3, 16, {4}, 16},
  };
  return *cases;
}

// The float64 reference of GroupNorm(prologue(input)).
std::vector<double> Reference(const Case& c, GroupNormPrologue prologue,
                              const std::vector<float>& input, const std::vector<float>& weight,
                              const std::vector<float>& bias) {
  reference::GroupNormShape shape;
  shape.batch = c.batch;
  shape.channels = c.channels;
  shape.spatial_size = c.spatial_size();
  shape.num_groups = c.num_groups;
  if (prologue == GroupNormPrologue::kNone) {
    return reference::GroupNorm(shape, input.data(), weight.data(), bias.data());
  }
  const std::vector<double> activated = reference::Gelu(input.data(), c.count());
  const std::vector<double> w(weight.begin(), weight.end());
  const std::vector<double> b(bias.begin(), bias.end());
  return reference::GroupNorm(shape, activated.data(), w.data(), b.data());
}

class CudaGroupNormTest : public GpuStreamTest {
 protected:
  // GroupNorm on the GPU into a NaN-poisoned output (or in place), with the
  // input and output starting `pad_floats` floats into their buffers.
  std::vector<float> Run(const GroupNormParams& params, const std::vector<float>& input,
                         const std::vector<float>& weight, const std::vector<float>& bias,
                         bool in_place = false, size_t pad_floats = 0,
                         const GroupNormOptions& options = {}) {
    DeviceBuffer in = ToDevice(input, pad_floats);
    DeviceBuffer w = ToDevice(weight);
    DeviceBuffer b = ToDevice(bias);
    DeviceBuffer out;
    if (!in_place) out = PoisonedDevice(static_cast<int64_t>(input.size()), pad_floats);
    auto workspace = DeviceBuffer::Allocate(GroupNormWorkspaceBytes(params));
    EXPECT_TRUE(workspace.ok()) << workspace.status();
    if (!workspace.ok()) return {};
    float* output = (in_place ? in.as<float>() : out.as<float>()) + pad_floats;
    const absl::Status status =
        GroupNorm(params, in.as<float>() + pad_floats, w.as<float>(), b.as<float>(), output,
                  workspace->data(), stream_.get(), options);
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_TRUE(stream_.Synchronize().ok());
    return ToHost(output, static_cast<int64_t>(input.size()));
  }

  // GroupNormApply in place on `input`, from (sum, sum of squares) pairs
  // computed here in double, as a producer kernel would accumulate them.
  std::vector<float> RunApply(const Case& c, const std::vector<float>& input,
                              const std::vector<float>& weight, const std::vector<float>& bias) {
    const int64_t group_size = c.channels / c.num_groups * c.spatial_size();
    std::vector<double> sums(2 * c.batch * c.num_groups, 0.0);
    for (int64_t i = 0; i < c.count(); ++i) {
      sums[2 * (i / group_size)] += input[i];
      sums[2 * (i / group_size) + 1] += static_cast<double>(input[i]) * input[i];
    }
    DeviceBuffer data = ToDevice(input);
    DeviceBuffer w = ToDevice(weight);
    DeviceBuffer b = ToDevice(bias);
    auto device_sums = DeviceBuffer::Allocate(sums.size() * sizeof(double));
    EXPECT_TRUE(device_sums.ok()) << device_sums.status();
    if (!device_sums.ok()) return {};
    EXPECT_EQ(
        cudaMemcpy(device_sums->data(), sums.data(), device_sums->bytes(), cudaMemcpyHostToDevice),
        cudaSuccess);
    const absl::Status status = GroupNormApply(c.params(), device_sums->as<double>(), w.as<float>(),
                                               b.as<float>(), data.as<float>(), stream_.get());
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_TRUE(stream_.Synchronize().ok());
    return ToHost(data.as<float>(), c.count());
  }

  void ExpectMatchesReference(const Case& c, GroupNormPrologue prologue, bool normal_input,
                              uint64_t seed) {
    SCOPED_TRACE(absl::StrCat(c.ToString(), normal_input ? " N(0,1)" : " U[0,1)",
                              prologue == GroupNormPrologue::kGeluErf ? " GELU" : ""));
    const std::vector<float> input = normal_input ? reference::RandomNormal(c.count(), seed)
                                                  : reference::RandomUniform(c.count(), seed);
    const std::vector<float> weight = reference::RandomNormal(c.channels, seed + 1);
    const std::vector<float> bias = reference::RandomNormal(c.channels, seed + 2);
    const std::vector<float> actual = Run(c.params(prologue), input, weight, bias);
    const ErrorStats error =
        CompareToReference(actual, Reference(c, prologue, input, weight, bias));
    EXPECT_TRUE(error.Within(kFp32Tolerance)) << error;
  }
};

TEST_F(CudaGroupNormTest, MatchesFloat64ReferenceOverRanksAndGroupings) {
  uint64_t seed = 100;
  for (const Case& c : Cases()) {
    ExpectMatchesReference(c, GroupNormPrologue::kNone, /*normal_input=*/false, seed++);
    ExpectMatchesReference(c, GroupNormPrologue::kNone, /*normal_input=*/true, seed++);
  }
}

TEST_F(CudaGroupNormTest, GeluPrologueMatchesGroupNormOfGelu) {
  uint64_t seed = 200;
  for (const Case& c : Cases()) {
    ExpectMatchesReference(c, GroupNormPrologue::kGeluErf, /*normal_input=*/false, seed++);
    ExpectMatchesReference(c, GroupNormPrologue::kGeluErf, /*normal_input=*/true, seed++);
  }
}

TEST_F(CudaGroupNormTest, KeepsAccuracyWhenTheMeanDwarfsTheSpread) {
  const Case c{2, 64, {40, 40}, 8};
  const std::vector<float> input = reference::RandomNormal(c.count(), 7, /*mean=*/100.0f);
  const std::vector<float> weight = reference::RandomUniform(c.channels, 8, 0.5f, 1.5f);
  const std::vector<float> bias = reference::RandomNormal(c.channels, 9);
  const ErrorStats error =
      CompareToReference(Run(c.params(), input, weight, bias),
                         Reference(c, GroupNormPrologue::kNone, input, weight, bias));
  EXPECT_TRUE(error.Within(kFp32Tolerance)) << error;
}

TEST_F(CudaGroupNormTest, RunsInPlace) {
  const Case c{3, 64, {9, 11}, 8};
  const std::vector<float> input = reference::RandomNormal(c.count(), 11);
  const std::vector<float> weight = reference::RandomNormal(c.channels, 12);
  const std::vector<float> bias = reference::RandomNormal(c.channels, 13);
  for (GroupNormPrologue prologue : {GroupNormPrologue::kNone, GroupNormPrologue::kGeluErf}) {
    const ErrorStats error =
        CompareToReference(Run(c.params(prologue), input, weight, bias, /*in_place=*/true),
                           Reference(c, prologue, input, weight, bias));
    EXPECT_TRUE(error.Within(kFp32Tolerance)) << error;
  }
}

TEST_F(CudaGroupNormTest, HandlesPointersThatAreNotSixteenByteAligned) {
  const Case c{2, 8, {16, 16}, 4};
  const std::vector<float> input = reference::RandomNormal(c.count(), 21);
  const std::vector<float> weight = reference::RandomNormal(c.channels, 22);
  const std::vector<float> bias = reference::RandomNormal(c.channels, 23);
  const ErrorStats error =
      CompareToReference(Run(c.params(), input, weight, bias, /*in_place=*/false, /*pad_floats=*/1),
                         Reference(c, GroupNormPrologue::kNone, input, weight, bias));
  EXPECT_TRUE(error.Within(kFp32Tolerance)) << error;
}

// PyTorch: an Inf or NaN anywhere in a group makes the whole group NaN (its
// variance is NaN); the other groups are untouched. Both the statistics
// kernel and the apply-only path (from a producer's sums).
TEST_F(CudaGroupNormTest, NonFiniteValueMakesItsWholeGroupNan) {
  const Case c{2, 8, {4, 4}, 2};  // groups of 64 elements
  for (const float bad :
       {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
        std::numeric_limits<float>::quiet_NaN()}) {
    SCOPED_TRACE(bad);
    std::vector<float> input = reference::RandomNormal(c.count(), 45);
    input[2 * 64 + 7] = bad;  // group 2 of 4
    const std::vector<float> weight = reference::RandomNormal(c.channels, 46);
    const std::vector<float> bias = reference::RandomNormal(c.channels, 47);
    const std::vector<float> output = Run(c.params(), input, weight, bias);
    for (size_t i = 0; i < output.size(); ++i) {
      EXPECT_EQ(std::isnan(output[i]), i / 64 == 2) << i << ": " << output[i];
    }
    const std::vector<float> applied = RunApply(c, input, weight, bias);
    for (size_t i = 0; i < applied.size(); ++i) {
      EXPECT_EQ(std::isnan(applied[i]), i / 64 == 2) << "apply " << i << ": " << applied[i];
    }
  }
}

TEST_F(CudaGroupNormTest, NullAffineParametersMeanWeightOneAndBiasZero) {
  const Case c{2, 6, {5, 5}, 3};
  const std::vector<float> input = reference::RandomNormal(c.count(), 31);
  DeviceBuffer in = ToDevice(input);
  DeviceBuffer out = PoisonedDevice(c.count());
  auto workspace = DeviceBuffer::Allocate(GroupNormWorkspaceBytes(c.params()));
  ASSERT_TRUE(workspace.ok());
  ASSERT_TRUE(GroupNorm(c.params(), in.as<float>(), nullptr, nullptr, out.as<float>(),
                        workspace->data(), stream_.get())
                  .ok());
  ASSERT_TRUE(stream_.Synchronize().ok());
  const std::vector<float> ones(c.channels, 1.0f);
  const std::vector<float> zeros(c.channels, 0.0f);
  const ErrorStats error =
      CompareToReference(ToHost(out.as<float>(), c.count()),
                         Reference(c, GroupNormPrologue::kNone, input, ones, zeros));
  EXPECT_TRUE(error.Within(kFp32Tolerance)) << error;
}

TEST_F(CudaGroupNormTest, IsDeterministic) {
  const Case c{1, 64, {64, 64}, 8};
  const std::vector<float> input = reference::RandomNormal(c.count(), 41);
  const std::vector<float> weight = reference::RandomNormal(c.channels, 42);
  const std::vector<float> bias = reference::RandomNormal(c.channels, 43);
  const std::vector<float> first = Run(c.params(), input, weight, bias);
  const std::vector<float> second = Run(c.params(), input, weight, bias);
  ASSERT_EQ(first.size(), second.size());
  EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)), 0);
}

GroupNormOptions Pinned(GroupNormSchedule schedule, int64_t lag_chunks = 0,
                        int lagged_ctas_per_sm = GroupNormOptions{}.lagged_ctas_per_sm) {
  GroupNormOptions options;
  options.schedule = schedule;
  options.lag_chunks = lag_chunks;
  options.lagged_ctas_per_sm = lagged_ctas_per_sm;
  return options;
}

// Chunks of 16384 elements (512 threads x 8 float4) per (sample, group), as
// the kernels cut them.
int64_t ChunksPerGroup(const Case& c) {
  constexpr int64_t kChunkElements = 16384;
  return (c.channels / c.num_groups * c.spatial_size() + kChunkElements - 1) / kChunkElements;
}

// The multiprocessors of the current device, and whether it can run the
// resident schedule (cooperative launch, 192 KiB of shared memory a CTA).
int DeviceSms() {
  int device = 0;
  int sms = 0;
  EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  return sms;
}

bool DeviceRunsResident() {
  int device = 0;
  int cooperative = 0;
  int shared_optin = 0;
  EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device),
            cudaSuccess);
  EXPECT_EQ(cudaDeviceGetAttribute(&shared_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
            cudaSuccess);
  return cooperative != 0 && shared_optin >= 194 * 1024;
}

// The one-read schedules (lagged, resident) sum the same chunks in the same
// order as the two-read one, so all three agree bit for bit; all match the
// float64 reference. Over every case they can run (spatial sizes that are
// multiples of 4), with and without the GELU prologue.
TEST_F(CudaGroupNormTest, OneReadSchedulesAgreeBitForBitWithTwoReads) {
  if (!DeviceRunsResident()) GTEST_SKIP() << "the device cannot run the resident schedule";
  uint64_t seed = 400;
  int compared = 0;
  for (const Case& c : Cases()) {
    if (c.spatial_size() % 4 != 0) continue;
    for (GroupNormPrologue prologue : {GroupNormPrologue::kNone, GroupNormPrologue::kGeluErf}) {
      SCOPED_TRACE(absl::StrCat(c.ToString(), prologue == GroupNormPrologue::kNone ? "" : " GELU"));
      const std::vector<float> input = reference::RandomNormal(c.count(), seed++);
      const std::vector<float> weight = reference::RandomNormal(c.channels, seed++);
      const std::vector<float> bias = reference::RandomNormal(c.channels, seed++);
      const std::vector<float> two_read = Run(c.params(prologue), input, weight, bias, false, 0,
                                              Pinned(GroupNormSchedule::kTwoRead));
      for (GroupNormSchedule schedule : {GroupNormSchedule::kLagged, GroupNormSchedule::kResident}) {
        SCOPED_TRACE(schedule == GroupNormSchedule::kLagged ? "lagged" : "resident");
        const std::vector<float> one_read =
            Run(c.params(prologue), input, weight, bias, false, 0, Pinned(schedule));
        ASSERT_EQ(one_read.size(), two_read.size());
        EXPECT_EQ(std::memcmp(one_read.data(), two_read.data(), one_read.size() * sizeof(float)),
                  0);
        ++compared;
      }
      const ErrorStats error =
          CompareToReference(two_read, Reference(c, prologue, input, weight, bias));
      EXPECT_TRUE(error.Within(kFp32Tolerance)) << error;
    }
  }
  EXPECT_EQ(compared, 20);  // 5 cases x 2 prologues x 2 schedules
}

// The resident schedule's grid over group sizes, each against the two-read
// schedule bit for bit, out of place and in place: groups under one chunk
// (a CTA per group, fewer chunks than SMs); 5 chunks a group over 4 steps
// (a step of whole groups: 130 CTAs on 132 SMs); exactly as many chunks a
// group as SMs, the last one partial (the largest group it runs, every CTA
// owning a chunk of every group). One chunk more than the SMs: refused when
// pinned, and kAuto still exact (the lagged schedule).
TEST_F(CudaGroupNormTest, ResidentScheduleIsExactFromOneChunkPerGroupToOnePerSm) {
  if (!DeviceRunsResident()) GTEST_SKIP() << "the device cannot run the resident schedule";
  const absl::StatusOr<double> bandwidth = group_norm_detail::PeakDramBandwidth();
  ASSERT_TRUE(bandwidth.ok()) << bandwidth.status();
  EXPECT_GT(*bandwidth, 1e12);  // an H100's is 3.35e12, an H200's 4.8e12
  EXPECT_LT(*bandwidth, 2e13);
  const int64_t sms = DeviceSms();
  // Groups of 2 channels x (sms * 8192 -/+ 4): sms chunks (the last 8
  // elements short) or sms + 1 (8 elements into the next).
  const Case one_per_sm{3, 2, {sms * 8192 - 4}, 1};
  const Case over_sms{3, 2, {sms * 8192 + 4}, 1};
  ASSERT_EQ(ChunksPerGroup(one_per_sm), sms);
  ASSERT_EQ(ChunksPerGroup(over_sms), sms + 1);
  uint64_t seed = 520;
  for (const Case& c : {Case{6, 16, {32, 32}, 4}, Case{12, 64, {96, 96}, 8}, one_per_sm}) {
    SCOPED_TRACE(absl::StrCat(c.ToString(), ", ", ChunksPerGroup(c), " chunks a group"));
    const std::vector<float> input = reference::RandomUniform(c.count(), seed++, -1.0f, 3.0f);
    const std::vector<float> weight = reference::RandomNormal(c.channels, seed++);
    const std::vector<float> bias = reference::RandomNormal(c.channels, seed++);
    const std::vector<float> two_read =
        Run(c.params(), input, weight, bias, false, 0, Pinned(GroupNormSchedule::kTwoRead));
    const ErrorStats error =
        CompareToReference(two_read, Reference(c, GroupNormPrologue::kNone, input, weight, bias));
    EXPECT_TRUE(error.Within(kFp32Tolerance)) << error;
    // The default grid, then every SM (steps that cut groups: a CTA may wait
    // for chunks of the step it is in) and the fewest CTAs a group allows.
    const int64_t fewest = std::max<int64_t>(ChunksPerGroup(c) - 1, 1);
    for (int64_t ctas : {int64_t{0}, sms, fewest}) {
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(absl::StrCat(ctas, " CTAs", in_place ? ", in place" : ""));
        GroupNormOptions options = Pinned(GroupNormSchedule::kResident);
        options.resident_ctas = static_cast<int>(ctas);
        const std::vector<float> resident =
            Run(c.params(), input, weight, bias, in_place, 0, options);
        ASSERT_EQ(resident.size(), two_read.size());
        EXPECT_EQ(std::memcmp(resident.data(), two_read.data(), resident.size() * sizeof(float)),
                  0);
      }
    }
  }
  {
    SCOPED_TRACE(absl::StrCat(over_sms.ToString(), ", one chunk a group more than the SMs"));
    const std::vector<float> input = reference::RandomNormal(over_sms.count(), seed++);
    const std::vector<float> weight = reference::RandomNormal(over_sms.channels, seed++);
    const std::vector<float> bias = reference::RandomNormal(over_sms.channels, seed++);
    auto in = DeviceBuffer::Allocate(over_sms.count() * sizeof(float));
    auto workspace = DeviceBuffer::Allocate(GroupNormWorkspaceBytes(over_sms.params()));
    ASSERT_TRUE(in.ok() && workspace.ok());
    const absl::Status refused =
        GroupNorm(over_sms.params(), in->as<float>(), nullptr, nullptr, in->as<float>(),
                  workspace->data(), stream_.get(), Pinned(GroupNormSchedule::kResident));
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
    // A grid of more CTAs than SMs, or too few for a group (here sms - 2
    // for groups of sms chunks), is refused too.
    for (int64_t ctas : {sms + 1, sms - 2}) {
      GroupNormOptions options = Pinned(GroupNormSchedule::kResident);
      options.resident_ctas = static_cast<int>(ctas);
      const absl::Status bad_grid =
          GroupNorm(one_per_sm.params(), in->as<float>(), nullptr, nullptr, in->as<float>(),
                    workspace->data(), stream_.get(), options);
      EXPECT_EQ(bad_grid.code(), absl::StatusCode::kInvalidArgument) << ctas << ": " << bad_grid;
    }
    const std::vector<float> automatic = Run(over_sms.params(), input, weight, bias);
    const std::vector<float> two_read = Run(over_sms.params(), input, weight, bias, false, 0,
                                            Pinned(GroupNormSchedule::kTwoRead));
    ASSERT_EQ(automatic.size(), two_read.size());
    EXPECT_EQ(std::memcmp(automatic.data(), two_read.data(), automatic.size() * sizeof(float)), 0);
  }
}

// Captured in a CUDA graph, as the GPU instances capture each batch size,
// the cooperative launch replays with the graph: exact on the input of each
// replay.
TEST_F(CudaGroupNormTest, ResidentScheduleReplaysFromACapturedGraph) {
  if (!DeviceRunsResident()) GTEST_SKIP() << "the device cannot run the resident schedule";
  const Case c{2, 64, {128, 128}, 8};  // 8 chunks a group, 16 groups
  const std::vector<float> weight = reference::RandomNormal(c.channels, 531);
  const std::vector<float> bias = reference::RandomNormal(c.channels, 532);
  DeviceBuffer w = ToDevice(weight);
  DeviceBuffer b = ToDevice(bias);
  auto in = DeviceBuffer::Allocate(c.count() * sizeof(float));
  auto out = DeviceBuffer::Allocate(c.count() * sizeof(float));
  auto workspace = DeviceBuffer::Allocate(GroupNormWorkspaceBytes(c.params()));
  ASSERT_TRUE(in.ok() && out.ok() && workspace.ok());
  const absl::StatusOr<GraphExecPtr> exec = CaptureOnStream([&] {
    return GroupNorm(c.params(), in->as<float>(), w.as<float>(), b.as<float>(), out->as<float>(),
                     workspace->data(), stream_.get(), Pinned(GroupNormSchedule::kResident));
  });
  ASSERT_TRUE(exec.ok()) << exec.status();
  for (uint64_t replay = 0; replay < 2; ++replay) {
    SCOPED_TRACE(absl::StrCat("replay ", replay));
    const std::vector<float> input = reference::RandomNormal(c.count(), 533 + replay);
    ASSERT_EQ(cudaMemcpy(in->data(), input.data(), in->bytes(), cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_EQ(cudaMemset(out->data(), 0xFF, out->bytes()), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec->get(), stream_.get()), cudaSuccess);
    ASSERT_TRUE(stream_.Synchronize().ok());
    const std::vector<float> replayed = ToHost(out->as<float>(), c.count());
    const std::vector<float> two_read =
        Run(c.params(), input, weight, bias, false, 0, Pinned(GroupNormSchedule::kTwoRead));
    EXPECT_EQ(std::memcmp(replayed.data(), two_read.data(), replayed.size() * sizeof(float)), 0);
  }
}

// Resident grids on two streams at once, beside lagged grids on a third
// that hold SMs while they run: a cooperative grid starts all its CTAs
// together, so none waits forever for a chunk owned by a CTA that has not
// started. Every output exact (and the test finishes).
TEST_F(CudaGroupNormTest, ResidentGridsRunBesideOtherGridsOnOtherStreams) {
  if (!DeviceRunsResident()) GTEST_SKIP() << "the device cannot run the resident schedule";
  const Case c{4, 64, {128, 128}, 8};  // 8 chunks a group, 32 groups
  const std::vector<float> input = reference::RandomNormal(c.count(), 541);
  const std::vector<float> weight = reference::RandomNormal(c.channels, 542);
  const std::vector<float> bias = reference::RandomNormal(c.channels, 543);
  const std::vector<float> expected =
      Run(c.params(), input, weight, bias, false, 0, Pinned(GroupNormSchedule::kTwoRead));
  DeviceBuffer in = ToDevice(input);
  DeviceBuffer w = ToDevice(weight);
  DeviceBuffer b = ToDevice(bias);
  constexpr int kStreams = 3;
  constexpr int kRounds = 20;
  std::vector<Stream> streams;
  std::vector<DeviceBuffer> outputs;
  std::vector<DeviceBuffer> workspaces;
  for (int i = 0; i < kStreams; ++i) {
    auto stream = Stream::Create();
    auto workspace = DeviceBuffer::Allocate(GroupNormWorkspaceBytes(c.params()));
    ASSERT_TRUE(stream.ok() && workspace.ok());
    streams.push_back(std::move(*stream));
    workspaces.push_back(std::move(*workspace));
    outputs.push_back(PoisonedDevice(c.count()));
  }
  for (int round = 0; round < kRounds; ++round) {
    for (int i = 0; i < kStreams; ++i) {
      const GroupNormSchedule schedule =
          i == kStreams - 1 ? GroupNormSchedule::kLagged : GroupNormSchedule::kResident;
      const absl::Status status =
          GroupNorm(c.params(), in.as<float>(), w.as<float>(), b.as<float>(),
                    outputs[i].as<float>(), workspaces[i].data(), streams[i].get(),
                    Pinned(schedule));
      ASSERT_TRUE(status.ok()) << status;
    }
  }
  for (int i = 0; i < kStreams; ++i) {
    SCOPED_TRACE(absl::StrCat("stream ", i));
    ASSERT_TRUE(streams[i].Synchronize().ok());
    const std::vector<float> got = ToHost(outputs[i].as<float>(), c.count());
    EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)), 0);
  }
}

// The lag's two bounds: one group's chunks (the wait targets the group just
// read) and the whole tensor (every chunk summed before any is normalised);
// out of place and in place, on groups of several chunks (the last one
// partial); at every residency (3 CTAs per SM, the default; 2 and 1,
// capped; 4, more than shared memory allows: the same as 3; 0, left to
// shared memory).
TEST_F(CudaGroupNormTest, LaggedScheduleIsExactAtItsShortestAndLongestLag) {
  const Case c{3, 64, {96, 96}, 8};  // groups of 73728 elements: 5 chunks, 24 groups
  const int64_t per_group = ChunksPerGroup(c);
  ASSERT_EQ(per_group, 5);
  const int64_t total = per_group * c.batch * c.num_groups;
  const std::vector<float> input = reference::RandomUniform(c.count(), 501, -1.0f, 3.0f);
  const std::vector<float> weight = reference::RandomNormal(c.channels, 502);
  const std::vector<float> bias = reference::RandomNormal(c.channels, 503);
  const std::vector<float> two_read =
      Run(c.params(), input, weight, bias, false, 0, Pinned(GroupNormSchedule::kTwoRead));
  const ErrorStats error =
      CompareToReference(two_read, Reference(c, GroupNormPrologue::kNone, input, weight, bias));
  EXPECT_TRUE(error.Within(kFp32Tolerance)) << error;
  for (int64_t lag : {per_group, per_group + 1, total - 1, total}) {
    for (int ctas : {4, 3, 2, 1, 0}) {
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(absl::StrCat("lag ", lag, " ctas ", ctas, in_place ? " in place" : ""));
        const std::vector<float> lagged = Run(c.params(), input, weight, bias, in_place, 0,
                                              Pinned(GroupNormSchedule::kLagged, lag, ctas));
        ASSERT_EQ(lagged.size(), two_read.size());
        EXPECT_EQ(std::memcmp(lagged.data(), two_read.data(), lagged.size() * sizeof(float)), 0);
      }
    }
  }
}

// kAuto takes the two-read schedule where the lagged one cannot run (here a
// misaligned start and a spatial size that is not a multiple of 4): the
// results stay exact.
TEST_F(CudaGroupNormTest, AutoFallsBackToTwoReadsWhereTheLaggedScheduleCannotRun) {
  for (const Case& c : {Case{2, 8, {16, 16}, 4}, Case{2, 6, {7, 5}, 3}}) {
    SCOPED_TRACE(c.ToString());
    const std::vector<float> input = reference::RandomNormal(c.count(), 511);
    const std::vector<float> weight = reference::RandomNormal(c.channels, 512);
    const std::vector<float> bias = reference::RandomNormal(c.channels, 513);
    const size_t pad = c.spatial_size() % 4 == 0 ? 1 : 0;
    const ErrorStats error =
        CompareToReference(Run(c.params(), input, weight, bias, false, pad),
                           Reference(c, GroupNormPrologue::kNone, input, weight, bias));
    EXPECT_TRUE(error.Within(kFp32Tolerance)) << error;
  }
}

TEST_F(CudaGroupNormTest, ApplyNormalisesFromHostComputedSums) {
  uint64_t seed = 300;
  for (const Case& c :
       std::vector<Case>{{2, 64, {7, 5}, 8}, {1, 6, {9}, 3}, {3, 64, {16, 16}, 8}, {4, 6, {}, 3}}) {
    SCOPED_TRACE(c.ToString());
    const std::vector<float> input = reference::RandomUniform(c.count(), seed++);
    const std::vector<float> weight = reference::RandomNormal(c.channels, seed++);
    const std::vector<float> bias = reference::RandomNormal(c.channels, seed++);
    const ErrorStats error =
        CompareToReference(RunApply(c, input, weight, bias),
                           Reference(c, GroupNormPrologue::kNone, input, weight, bias));
    EXPECT_TRUE(error.Within(kFp32Tolerance)) << error;
  }
}

// One sample of the reference shape: 8 groups of 2 Mi elements, each split
// over 128 CTAs.
TEST_F(CudaGroupNormTest, LargeGroupsOfTwoMebiElementsKeepFp32Accuracy) {
  const Case c{1, 64, {512, 512}, 8};
  const std::vector<float> weight = reference::RandomNormal(c.channels, 51);
  const std::vector<float> bias = reference::RandomNormal(c.channels, 52);
  for (bool normal : {false, true}) {
    SCOPED_TRACE(normal ? "N(0,1)" : "U[0,1)");
    const std::vector<float> input =
        normal ? reference::RandomNormal(c.count(), 53) : reference::RandomUniform(c.count(), 54);
    const ErrorStats error =
        CompareToReference(Run(c.params(), input, weight, bias),
                           Reference(c, GroupNormPrologue::kNone, input, weight, bias));
    EXPECT_TRUE(error.Within(kFp32Tolerance)) << error;
  }
}

// The reference groupnorm shape (SPEC.md §1.3), 112x64x512x512: 7.5 GB in
// and out. Samples 0, 55 and 111 hold distinct data checked against the
// float64 reference; every other sample is a copy of sample 0, whose output
// must then equal sample 0's bit for bit.
TEST_F(CudaGroupNormTest, ReferenceShapeMatchesFloat64Reference) {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  if (free_bytes < (size_t{20} << 30)) GTEST_SKIP() << "needs 20 GiB of free GPU memory";
  const Case c{112, 64, {512, 512}, 8};
  const Case sample{1, 64, {512, 512}, 8};
  const int64_t sample_count = sample.count();
  const size_t sample_bytes = sample_count * sizeof(float);
  const std::vector<float> weight = reference::RandomNormal(c.channels, 61);
  const std::vector<float> bias = reference::RandomNormal(c.channels, 62);
  const std::vector<int64_t> distinct = {0, 55, 111};
  std::vector<std::vector<float>> inputs;
  inputs.push_back(reference::RandomUniform(sample_count, 63));
  inputs.push_back(reference::RandomNormal(sample_count, 64));
  inputs.push_back(reference::RandomUniform(sample_count, 65, -2.0f, 3.0f));

  auto in = DeviceBuffer::Allocate(c.count() * sizeof(float));
  auto out = DeviceBuffer::Allocate(c.count() * sizeof(float));
  auto workspace = DeviceBuffer::Allocate(GroupNormWorkspaceBytes(c.params()));
  ASSERT_TRUE(in.ok() && out.ok() && workspace.ok());
  ASSERT_EQ(cudaMemset(out->data(), 0xFF, out->bytes()), cudaSuccess);
  for (size_t i = 0; i < distinct.size(); ++i) {
    ASSERT_EQ(cudaMemcpy(in->as<float>() + distinct[i] * sample_count, inputs[i].data(),
                         sample_bytes, cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  for (int64_t n = 1; n < c.batch; ++n) {
    if (n == 55 || n == 111) continue;
    ASSERT_EQ(cudaMemcpy(in->as<float>() + n * sample_count, in->as<float>(), sample_bytes,
                         cudaMemcpyDeviceToDevice),
              cudaSuccess);
  }
  DeviceBuffer w = ToDevice(weight);
  DeviceBuffer b = ToDevice(bias);
  const absl::Status status = GroupNorm(c.params(), in->as<float>(), w.as<float>(), b.as<float>(),
                                        out->as<float>(), workspace->data(), stream_.get());
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_TRUE(stream_.Synchronize().ok());

  std::vector<float> first_output;
  for (size_t i = 0; i < distinct.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("sample ", distinct[i]));
    std::vector<float> actual = ToHost(out->as<float>() + distinct[i] * sample_count, sample_count);
    const ErrorStats error = CompareToReference(
        actual, Reference(sample, GroupNormPrologue::kNone, inputs[i], weight, bias));
    EXPECT_TRUE(error.Within(kFp32Tolerance)) << error;
    if (i == 0) first_output = std::move(actual);
  }
  for (int64_t n : {1, 54, 110}) {
    SCOPED_TRACE(absl::StrCat("copy of sample 0 at ", n));
    const std::vector<float> copy = ToHost(out->as<float>() + n * sample_count, sample_count);
    EXPECT_EQ(std::memcmp(copy.data(), first_output.data(), sample_bytes), 0);
  }

  // The default schedule here is the lagged one; the two-read schedule gives
  // the same bits.
  std::vector<std::vector<float>> lagged;
  for (int64_t n : distinct) {
    lagged.push_back(ToHost(out->as<float>() + n * sample_count, sample_count));
  }
  ASSERT_EQ(cudaMemset(out->data(), 0xFF, out->bytes()), cudaSuccess);
  ASSERT_TRUE(GroupNorm(c.params(), in->as<float>(), w.as<float>(), b.as<float>(), out->as<float>(),
                        workspace->data(), stream_.get(), Pinned(GroupNormSchedule::kTwoRead))
                  .ok());
  ASSERT_TRUE(stream_.Synchronize().ok());
  for (size_t i = 0; i < distinct.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("two-read sample ", distinct[i]));
    const std::vector<float> two_read =
        ToHost(out->as<float>() + distinct[i] * sample_count, sample_count);
    EXPECT_EQ(std::memcmp(two_read.data(), lagged[i].data(), sample_bytes), 0);
  }
}

// Validation happens before any CUDA call, so these run without a GPU.
TEST(CudaGroupNormValidationTest, RejectsInvalidParameters) {
  GroupNormParams valid;
  valid.batch = 2;
  valid.channels = 6;
  valid.spatial_size = 5;
  valid.num_groups = 3;
  EXPECT_TRUE(ValidateGroupNormParams(valid).ok());
  EXPECT_GT(GroupNormWorkspaceBytes(valid), 0u);

  GroupNormParams p = valid;
  p.num_groups = 4;
  EXPECT_EQ(ValidateGroupNormParams(p).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GroupNormWorkspaceBytes(p), 0u);
  p = valid;
  p.batch = 0;
  EXPECT_EQ(ValidateGroupNormParams(p).code(), absl::StatusCode::kInvalidArgument);
  p = valid;
  p.spatial_size = 0;
  EXPECT_EQ(ValidateGroupNormParams(p).code(), absl::StatusCode::kInvalidArgument);
  p = valid;
  p.eps = 0.0f;
  EXPECT_EQ(ValidateGroupNormParams(p).code(), absl::StatusCode::kInvalidArgument);
  p = valid;
  p.channels = int64_t{1} << 40;
  p.spatial_size = int64_t{1} << 40;
  p.num_groups = 1;
  EXPECT_EQ(ValidateGroupNormParams(p).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CudaGroupNormValidationTest, RejectsNullPointersAndApplyWithAPrologue) {
  GroupNormParams p;
  p.batch = 1;
  p.channels = 4;
  p.num_groups = 2;
  float dummy = 0.0f;
  EXPECT_EQ(GroupNorm(p, nullptr, nullptr, nullptr, &dummy, &dummy, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GroupNorm(p, &dummy, nullptr, nullptr, &dummy, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GroupNormApply(p, nullptr, nullptr, nullptr, &dummy, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  p.prologue = GroupNormPrologue::kGeluErf;
  const double sums[4] = {};
  EXPECT_EQ(GroupNormApply(p, sums, nullptr, nullptr, &dummy, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

// A pinned resident schedule refuses misaligned tensors and spatial sizes
// that are not multiples of 4 before any CUDA call (so this runs without a
// GPU).
TEST(CudaGroupNormValidationTest, PinnedResidentScheduleRefusesMisalignedOrOddShapes) {
  GroupNormParams p;
  p.batch = 2;
  p.channels = 8;
  p.spatial_size = 32 * 1024;
  p.num_groups = 4;
  alignas(16) float buffer[8] = {};
  float* aligned = buffer;
  const GroupNormOptions resident = Pinned(GroupNormSchedule::kResident);
  auto run = [&](const GroupNormParams& params, const float* in, float* out) {
    return GroupNorm(params, in, nullptr, nullptr, out, aligned, nullptr, resident);
  };
  EXPECT_EQ(run(p, aligned + 1, aligned).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(run(p, aligned, aligned + 1).code(), absl::StatusCode::kInvalidArgument);
  GroupNormParams odd = p;
  odd.spatial_size = 32 * 1024 + 2;
  const absl::Status status = run(odd, aligned, aligned);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("resident schedule"), std::string::npos) << status;
}

// kAuto's rule between the one-read schedules: the resident one from 4 TB/s
// of DRAM (an H200's 4.8), the lagged one below (an H100's 3.35).
TEST(CudaGroupNormValidationTest, AutoTakesTheResidentScheduleFromFourTerabytesASecond) {
  EXPECT_FALSE(group_norm_detail::ResidentPreferredAt(3.35e12));
  EXPECT_FALSE(group_norm_detail::ResidentPreferredAt(3.99e12));
  EXPECT_TRUE(group_norm_detail::ResidentPreferredAt(4.0e12));
  EXPECT_TRUE(group_norm_detail::ResidentPreferredAt(4.8e12));
}

// A pinned lagged schedule that cannot run its arguments is refused before
// anything is launched (so this runs without a GPU).
TEST(CudaGroupNormValidationTest, PinnedLaggedScheduleRefusesWhatItCannotRun) {
  GroupNormParams p;
  p.batch = 2;
  p.channels = 8;
  p.spatial_size = 32 * 1024;  // groups of 65536 elements: 4 chunks, 8 groups
  p.num_groups = 4;
  alignas(16) float buffer[8] = {};
  float* aligned = buffer;
  const GroupNormOptions lagged = Pinned(GroupNormSchedule::kLagged);
  auto code = [&](const GroupNormParams& params, const float* in, float* out,
                  const GroupNormOptions& options) {
    return GroupNorm(params, in, nullptr, nullptr, out, aligned, nullptr, options).code();
  };
  EXPECT_EQ(code(p, aligned + 1, aligned, lagged), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(p, aligned, aligned + 1, lagged), absl::StatusCode::kInvalidArgument);
  GroupNormParams odd = p;
  odd.spatial_size = 32 * 1024 + 2;
  EXPECT_EQ(code(odd, aligned, aligned, lagged), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(p, aligned, aligned, Pinned(GroupNormSchedule::kLagged, 3)),
            absl::StatusCode::kInvalidArgument);  // under one group's 4 chunks
  EXPECT_EQ(code(p, aligned, aligned, Pinned(GroupNormSchedule::kLagged, 33)),
            absl::StatusCode::kInvalidArgument);  // over the tensor's 32
  EXPECT_EQ(code(p, aligned, aligned, Pinned(GroupNormSchedule::kAuto, -1)),
            absl::StatusCode::kInvalidArgument);
  const absl::Status status =
      GroupNorm(p, aligned + 1, nullptr, nullptr, aligned, aligned, nullptr, lagged);
  EXPECT_NE(status.message().find("lagged schedule"), std::string::npos) << status;
}

}  // namespace
}  // namespace fuseserve::cuda
