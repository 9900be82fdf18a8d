// `fuseserve-cli infer MODEL`: one inference from a .npy file (or a random
// input), the output summarised on stdout and optionally written as .npy.

#include <algorithm>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/cli/commands.h"
#include "client/client.h"
#include "client/npy.h"
#include "common/status_macros.h"

namespace fuseserve::client::cli {
namespace {

constexpr char kUsage[] =
    R"(Usage: fuseserve-cli [global options] infer MODEL (--input X.npy | --random SHAPE)
           [--output Y.npy] [--seed N] [--timeout-ms N] [--queue-timeout-us N]
           [--id ID] [--version V]

Sends one inference request to MODEL and prints the output's shape and
min/max/mean.
  --input X.npy          the input tensor: a NumPy .npy file, float32 ('<f4'),
                         C order (np.save(path, x.astype(np.float32)))
  --random SHAPE         instead of --input: uniform [0, 1) values of SHAPE,
                         e.g. 1,64,256,256 (the batch dimension included)
  --seed N               seed for --random (default 0)
  --output Y.npy         write the output tensor there (float32, C order)
  --timeout-ms N         the request's gRPC deadline (default 60000)
  --queue-timeout-us N   the request's `timeout` parameter: give up if it waits
                         in the server's queue longer than this
  --id ID                request id (echoed by the server)
  --version V            model version (default: the server's choice)
Exit code 0 on success, 1 when the request or a file fails, 2 on a bad command line.
)";

absl::StatusOr<Shape> ParseShape(const std::string& text) {
  Shape shape;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t dim = 0;
    if (!absl::SimpleAtoi(part, &dim) || dim <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--random: \"", text, "\" is not a shape like 1,64,256,256"));
    }
    shape.push_back(dim);
  }
  return shape;
}

absl::StatusOr<int64_t> ParseInt(const std::string& flag, const std::string& text) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": \"", text, "\" is not a non-negative integer"));
  }
  return value;
}

struct InferFlags {
  std::string model;
  std::string version;
  std::string input_path;
  std::string output_path;
  Shape random_shape;
  uint64_t seed = 0;
  InferOptions options;
};

absl::StatusOr<InferFlags> ToInferFlags(const ParsedArgs& args) {
  InferFlags flags;
  if (args.positional().size() != 1)
    return absl::InvalidArgumentError("expected exactly one MODEL");
  flags.model = args.positional()[0];
  flags.version = args.Last("version").value_or("");
  flags.input_path = args.Last("input").value_or("");
  flags.output_path = args.Last("output").value_or("");
  if (args.Has("input") == args.Has("random")) {
    return absl::InvalidArgumentError("give exactly one of --input X.npy and --random SHAPE");
  }
  if (args.Has("random")) {
    ASSIGN_OR_RETURN(flags.random_shape, ParseShape(*args.Last("random")));
  }
  if (args.Has("seed")) {
    ASSIGN_OR_RETURN(const int64_t seed, ParseInt("seed", *args.Last("seed")));
    flags.seed = static_cast<uint64_t>(seed);
  }
  flags.options.model_version = flags.version;
  flags.options.request_id = args.Last("id").value_or("");
  flags.options.timeout = absl::Seconds(60);
  if (args.Has("timeout-ms")) {
    ASSIGN_OR_RETURN(const int64_t ms, ParseInt("timeout-ms", *args.Last("timeout-ms")));
    flags.options.timeout = absl::Milliseconds(ms);
  }
  if (args.Has("queue-timeout-us")) {
    ASSIGN_OR_RETURN(const int64_t us,
                     ParseInt("queue-timeout-us", *args.Last("queue-timeout-us")));
    flags.options.queue_timeout = absl::Microseconds(us);
  }
  return flags;
}

std::string Summary(const std::vector<float>& values) {
  if (values.empty()) return "empty";
  const auto [min, max] = std::minmax_element(values.begin(), values.end());
  double sum = 0;
  for (float value : values) sum += value;
  return absl::StrFormat("min %.6g  max %.6g  mean %.6g", *min, *max,
                         sum / static_cast<double>(values.size()));
}

}  // namespace

int RunInferCommand(const GlobalOptions& global, int argc, char** argv) {
  const auto args = ParseServerCommandArgs(
      argc, argv,
      {"input", "output", "random", "seed", "timeout-ms", "queue-timeout-us", "id", "version"}, {});
  if (!args.ok()) {
    return Fail("infer", std::string(args.status().message()) + "\n" + kUsage, kExitUsage);
  }
  if (args->Has("help")) {
    std::cout << kUsage;
    return kExitOk;
  }
  const auto flags = ToInferFlags(*args);
  if (!flags.ok()) {
    return Fail("infer", std::string(flags.status().message()) + "\n" + kUsage, kExitUsage);
  }

  Tensor input;
  std::string source;
  if (!flags->input_path.empty()) {
    auto array = ReadNpyFile(flags->input_path);
    if (!array.ok()) return Fail("infer", std::string(array.status().message()));
    input.shape = std::move(array->shape);
    input.data = std::move(array->data);
    source = flags->input_path;
  } else {
    input.shape = flags->random_shape;
    input.data.resize(NumElements(input.shape));
    std::mt19937_64 engine(flags->seed);
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    for (float& value : input.data) value = uniform(engine);
    source = absl::StrCat("random U[0,1), seed ", flags->seed);
  }

  const auto connected = Connect(global, *args);
  if (!connected.ok()) return Fail("infer", std::string(connected.status().message()), kExitUsage);
  Client& client = **connected;
  // The input's name comes from the model's metadata (fuseserve models have one input).
  const auto metadata = client.ModelMetadata(flags->model, flags->version);
  if (!metadata.ok()) return Fail("infer", metadata.status().ToString());
  if (metadata->inputs_size() != 1) {
    return Fail("infer", absl::StrCat("model \"", flags->model, "\" has ", metadata->inputs_size(),
                                      " inputs; fuseserve-cli infer sends exactly one"));
  }
  input.name = metadata->inputs(0).name();

  const auto result = client.Infer(flags->model, {input}, flags->options);
  if (!result.ok()) return Fail("infer", result.status().ToString());
  std::cout << "model  " << result->model_name << " version " << result->model_version;
  if (!result->id.empty()) std::cout << " id " << result->id;
  std::cout << "\ninput  \"" << input.name << "\" " << ShapeToString(input.shape) << " (" << source
            << ")\n";
  for (const Tensor& output : result->outputs) {
    std::cout << "output \"" << output.name << "\" " << ShapeToString(output.shape) << "  "
              << Summary(output.data) << "\n";
  }
  if (!flags->output_path.empty()) {
    if (result->outputs.size() != 1) {
      return Fail("infer", absl::StrCat("--output needs exactly one output, the model returned ",
                                        result->outputs.size()));
    }
    const absl::Status written =
        WriteNpyFile(flags->output_path, result->outputs[0].shape, result->outputs[0].data);
    if (!written.ok()) return Fail("infer", std::string(written.message()));
    std::cout << "wrote  " << flags->output_path << "\n";
  }
  return kExitOk;
}

}  // namespace fuseserve::client::cli
