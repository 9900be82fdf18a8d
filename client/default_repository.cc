#include "client/default_repository.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/repository/safetensors_writer.h"

namespace fuseserve {
namespace {

struct ModelFiles {
  std::string name;
  std::string config;
  std::vector<NamedF32Tensor> tensors;
};

class WeightSource {
 public:
  explicit WeightSource(uint64_t seed) : engine_(seed) {}

  // kaiming_uniform_(a=sqrt(5)) and PyTorch's bias init both reduce to
  // U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  NamedF32Tensor FanInUniform(std::string name, Shape shape, int64_t fan_in) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
    std::uniform_real_distribution<float> dist(-bound, bound);
    return Fill(std::move(name), std::move(shape), dist);
  }

  // mean + stddev * N(0, 1).
  NamedF32Tensor Normal(std::string name, Shape shape, float mean, float stddev) {
    std::normal_distribution<float> dist(mean, stddev);
    return Fill(std::move(name), std::move(shape), dist);
  }

 private:
  template <typename Distribution>
  NamedF32Tensor Fill(std::string name, Shape shape, Distribution& dist) {
    NamedF32Tensor tensor{std::move(name), shape, {}};
    tensor.data.resize(NumElements(shape));
    for (float& value : tensor.data) value = dist(engine_);
    return tensor;
  }

  std::mt19937_64 engine_;
};

std::string Dims(const Shape& dims) { return absl::StrJoin(dims, ", "); }

std::string Parameter(const std::string& key, const std::string& value) {
  return absl::StrCat("parameters { key: \"", key, "\" value: { string_value: \"", value,
                      "\" } }\n");
}

// GPU instances spin on each batch's completion event: the serving results in
// the README were measured so. Triton's default (and fuseserve's without
// this line) blocks in the driver instead, which frees a core per instance
// for a thread wake-up per batch.
constexpr char kOptimization[] = "optimization { cuda { busy_wait_events: true } }\n";

std::string Config(const std::string& name, int max_batch_size, const Shape& input_dims,
                   const Shape& output_dims, int instances, const std::string& batching,
                   const std::string& parameters) {
  return absl::StrCat("name: \"", name, "\"\nplatform: \"", name,
                      "\"\nmax_batch_size: ", max_batch_size,
                      "\ninput [ { name: \"input\", data_type: TYPE_FP32, dims: [ ",
                      Dims(input_dims),
                      " ] } ]\noutput [ { name: \"output\", data_type: TYPE_FP32, dims: [ ",
                      Dims(output_dims), " ] } ]\n", batching, "instance_group [ { count: ",
                      instances, ", kind: KIND_AUTO } ]\n", kOptimization, parameters);
}

// GroupNorm affine parameters: random around PyTorch's 1/0 defaults.
void AddGroupNormAffine(WeightSource& source, const std::string& prefix, int64_t channels,
                        std::vector<NamedF32Tensor>* tensors) {
  tensors->push_back(source.Normal(prefix + ".weight", {channels}, 1.0f, 0.1f));
  tensors->push_back(source.Normal(prefix + ".bias", {channels}, 0.0f, 0.1f));
}

// The conv and GroupNorm families batch what is queued when an instance comes
// free and never wait for more: one of their requests (16-64 MiB) already
// keeps the GPU and its copy engines busy, so waiting buys no throughput. On an
// H100 over system shared memory, a 500 us delay against none: conv 627 vs 1011
// infer/s at concurrency 1 and 1927 vs 2157 at 16, GroupNorm 287 vs 346 and 384
// vs 413 (bench/results/2026-11-25-h100-serving-delay.md).
constexpr char kLargeTensorBatching[] =
    "dynamic_batching {\n  max_queue_delay_microseconds: 0\n"
    "  default_queue_policy { max_queue_size: 256 }\n}\n";

ModelFiles ConvModel(WeightSource& source, bool small) {
  const int64_t channels = small ? 8 : 64, kernel = 3, groups = small ? 4 : 8;
  const int64_t size = small ? 16 : 256;
  ModelFiles files{"convtranspose_gelu_groupnorm", "", {}};
  files.config = Config(
      files.name, small ? 8 : 32, {channels, size, size},
      {channels, size + kernel - 1, size + kernel - 1}, 2, kLargeTensorBatching,
      absl::StrCat(Parameter("in_channels", absl::StrCat(channels)),
                   Parameter("out_channels", absl::StrCat(channels)),
                   Parameter("kernel_size", absl::StrCat(kernel)), Parameter("stride", "1"),
                   Parameter("padding", "0"), Parameter("output_padding", "0"),
                   Parameter("num_groups", absl::StrCat(groups))));
  // PyTorch computes ConvTranspose2d's fan_in from weight dim 1 (C_out) * k * k.
  const int64_t fan_in = channels * kernel * kernel;
  files.tensors.push_back(source.FanInUniform("conv_transpose.weight",
                                              {channels, channels, kernel, kernel}, fan_in));
  files.tensors.push_back(source.FanInUniform("conv_transpose.bias", {channels}, fan_in));
  AddGroupNormAffine(source, "group_norm", channels, &files.tensors);
  return files;
}

ModelFiles GemmModel(WeightSource& source, bool small) {
  const int64_t features = small ? 64 : 8192, groups = small ? 8 : 256;
  ModelFiles files{"gemm_bias_hardtanh_mish_groupnorm", "", {}};
  files.config = Config(
      files.name, small ? 16 : 1024, {features}, {features}, 2,
      // No delay here either (kLargeTensorBatching says why it is 0 there):
      // on an H100 at concurrency 64, 200 us against none gave the same
      // throughput (41.3k/37.3k vs 41.6k/37.2k infer/s in two rounds; batches of
      // 14 vs 6.5 form from what queues while both instances run), and at
      // concurrency 1 the delay was 0.25 ms of waiting in every request (p50
      // 0.62-0.72 vs 0.37-0.48 ms; bench/results/2026-11-25-h100-gemm-delay.md).
      "dynamic_batching {\n  max_queue_delay_microseconds: 0\n"
      "  default_queue_policy { max_queue_size: 4096 }\n}\n",
      absl::StrCat(Parameter("in_features", absl::StrCat(features)),
                   Parameter("out_features", absl::StrCat(features)),
                   Parameter("num_groups", absl::StrCat(groups))));
  files.tensors.push_back(
      source.FanInUniform("gemm.weight", {features, features}, features));
  files.tensors.push_back(source.FanInUniform("gemm.bias", {features}, features));
  // The family's second bias is a bare nn.Parameter(torch.randn(F_out)).
  files.tensors.push_back(source.Normal("bias", {features}, 0.0f, 1.0f));
  AddGroupNormAffine(source, "groupnorm", features, &files.tensors);
  return files;
}

ModelFiles GroupNormModel(WeightSource& source, bool small) {
  const int64_t channels = small ? 8 : 64, groups = small ? 4 : 8;
  ModelFiles files{"groupnorm", "", {}};
  files.config = Config(files.name, small ? 8 : 16, {channels, -1, -1}, {channels, -1, -1}, 2,
                        kLargeTensorBatching,
                        absl::StrCat(Parameter("num_channels", absl::StrCat(channels)),
                                     Parameter("num_groups", absl::StrCat(groups))));
  AddGroupNormAffine(source, "gn", channels, &files.tensors);
  return files;
}

absl::Status WriteModel(const std::filesystem::path& root, const ModelFiles& files) {
  const std::filesystem::path model_dir = root / files.name;
  std::error_code error;
  std::filesystem::create_directories(model_dir / "1", error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot create ", (model_dir / "1").string(), ": ", error.message()));
  }
  {
    std::ofstream config(model_dir / "config.pbtxt", std::ios::trunc);
    config << files.config;
    if (!config.good()) {
      return absl::InternalError(
          absl::StrCat("cannot write ", (model_dir / "config.pbtxt").string()));
    }
  }
  return WriteSafetensorsFile((model_dir / "1" / "model.safetensors").string(), files.tensors);
}

}  // namespace

absl::Status WriteDefaultRepository(const std::string& directory, RepositorySize size,
                                    uint64_t seed) {
  const bool small = size == RepositorySize::kSmall;
  WeightSource source(seed);
  const std::filesystem::path root(directory);
  RETURN_IF_ERROR(WriteModel(root, ConvModel(source, small)));
  RETURN_IF_ERROR(WriteModel(root, GemmModel(source, small)));
  RETURN_IF_ERROR(WriteModel(root, GroupNormModel(source, small)));
  return absl::OkStatus();
}

}  // namespace fuseserve
