#pragma once

// Small models of every family, loaded the way the server loads them
// (config.pbtxt text through LoadModelConfigFromText, weights through
// SafetensorsFile and CreateModel), for the fuzz targets that need a real
// Model or a real config. Sizes are tiny so that a fuzz input can afford to
// run one.

#include <memory>
#include <string>
#include <vector>

#include "proto/model_config.pb.h"
#include "server/repository/safetensors_writer.h"
#include "server/runtime/model.h"

namespace fuseserve::fuzzing {

struct FuzzModelSpec {
  std::string config_pbtxt;             // the model directory's config.pbtxt
  std::vector<NamedF32Tensor> weights;  // its model.safetensors
};

struct FuzzModel {
  inference::ModelConfig config;
  std::unique_ptr<Model> model;
};

// groupnorm batching [N<=4, 4, H, W]; groupnorm without a batch dimension
// [2, 4, W]; the GEMM family [N<=8, 8] -> [N, 6]; the transposed convolution
// [N<=2, 2, H, W] -> [N, 4, 2H, 2W] (stride 2, padding 1, output_padding 1).
const std::vector<FuzzModelSpec>& FuzzModelSpecs();

// FuzzModelSpecs(), loaded. A spec that does not load aborts the process: the
// fixtures themselves are broken, which no fuzz input can explain.
const std::vector<FuzzModel>& FuzzModels();

// The directory name every fuzzed config is loaded as (a config's `name`
// must equal it or be empty).
inline constexpr char kFuzzModelDirectory[] = "/fuzz/model";

}  // namespace fuseserve::fuzzing
