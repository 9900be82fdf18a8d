// `fuseserve-cli infer MODEL`: one inference from a .npy file (or a random
// input), the output summarised on stdout and optionally written as .npy.

#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"
#include "client/cli/commands.h"
#include "client/client.h"
#include "client/interrupt_cleanup.h"
#include "client/npy.h"
#include "client/shared_memory.h"
#include "client/shared_memory_registry.h"
#include "common/status_macros.h"

namespace fuseserve::client::cli {
namespace {

constexpr char kUsage[] =
    R"(Usage: fuseserve-cli [global options] infer MODEL (--input X.npy | --random SHAPE)
           [--output Y.npy] [--seed N] [--timeout-ms N] [--queue-timeout-us N]
           [--id ID] [--version V] [--shared-memory none|system]
           [--output-shared-memory-size BYTES]

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
)";

constexpr char kExitCodes[] =
    "Exit code 0 on success, 1 when the request or a file fails, 2 on a bad command line.\n";

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
  SharedMemoryFlags shared_memory;
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
  ASSIGN_OR_RETURN(flags.shared_memory, ParseSharedMemoryFlags(args));
  return flags;
}

std::string Summary(absl::Span<const float> values) {
  if (values.empty()) return "empty";
  const auto [min, max] = std::minmax_element(values.begin(), values.end());
  double sum = 0;
  for (float value : values) sum += value;
  return absl::StrFormat("min %.6g  max %.6g  mean %.6g", *min, *max,
                         sum / static_cast<double>(values.size()));
}

std::string Usage() { return absl::StrCat(kUsage, kSharedMemoryUsage, kExitCodes); }

// The regions of one shared-memory inference, by registered name.
using RegionsByName = std::map<std::string, const SystemSharedMemoryRegion*>;

// Moves `input` into a new region and asks for every output of `metadata` in
// a region of its own, all registered in `registry`.
absl::Status PlaceInSharedMemory(Client& client, const InferFlags& flags,
                                 const inference::ModelMetadataResponse& metadata,
                                 SharedMemoryRegistry& registry, Tensor& input,
                                 InferOptions& options, RegionsByName& regions) {
  ASSIGN_OR_RETURN(const RegisteredRegion input_region,
                   registry.Add("infer_in", input.data.size() * sizeof(float)));
  RETURN_IF_ERROR(input_region.region->WriteFloats(0, input.data));
  input.shared_memory = input_region.Location(input_region.region->size());
  input.data = {};
  regions[input_region.name] = input_region.region;

  int64_t batch_size = 0;  // the output's dim 0 is a batch dim only when the model batches
  if (!flags.shared_memory.output_byte_size.has_value()) {
    ASSIGN_OR_RETURN(const inference::ModelConfigResponse config,
                     client.ModelConfig(flags.model, flags.version));
    if (config.config().max_batch_size() > 0 && !input.shape.empty()) batch_size = input.shape[0];
  }
  for (const auto& output : metadata.outputs()) {
    uint64_t byte_size = 0;
    if (flags.shared_memory.output_byte_size.has_value()) {
      byte_size = *flags.shared_memory.output_byte_size;
    } else {
      ASSIGN_OR_RETURN(byte_size, OutputByteSize(output, batch_size));
    }
    ASSIGN_OR_RETURN(const RegisteredRegion output_region,
                     registry.Add("infer_out", std::max<uint64_t>(byte_size, 1)));
    options.output_shared_memory[output.name()] = output_region.Location(byte_size);
    regions[output_region.name] = output_region.region;
  }
  return absl::OkStatus();
}

// An output's values, wherever the server put them.
absl::StatusOr<absl::Span<const float>> Values(const Tensor& output, const RegionsByName& regions) {
  if (!output.shared_memory.has_value()) return absl::Span<const float>(output.data);
  const auto region = regions.find(output.shared_memory->region);
  if (region == regions.end()) {
    return absl::InternalError(absl::StrCat("output \"", output.name,
                                            "\" is in an unknown shared-memory region \"",
                                            output.shared_memory->region, "\""));
  }
  return region->second->Floats(output.shared_memory->offset, NumElements(output.shape));
}

}  // namespace

int RunInferCommand(const GlobalOptions& global, int argc, char** argv) {
  const auto args =
      ParseServerCommandArgs(argc, argv,
                             {"input", "output", "random", "seed", "timeout-ms", "queue-timeout-us",
                              "id", "version", kSharedMemoryFlag, kOutputSharedMemorySizeFlag},
                             {});
  if (!args.ok()) {
    return Fail("infer", std::string(args.status().message()) + "\n" + Usage(), kExitUsage);
  }
  if (args->Has("help")) {
    std::cout << Usage();
    return kExitOk;
  }
  auto flags = ToInferFlags(*args);
  if (!flags.ok()) {
    return Fail("infer", std::string(flags.status().message()) + "\n" + Usage(), kExitUsage);
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

  // Declared in this order so that the interrupt handler, which releases the
  // regions, goes first; every return below releases them.
  SharedMemoryRegistry registry(&client);
  std::unique_ptr<InterruptCleanup> interrupt;
  RegionsByName regions;
  if (flags->shared_memory.type == SharedMemoryType::kSystem) {
    auto installed = InterruptCleanup::Install("fuseserve-cli infer",
                                               [&registry] { registry.ReleaseBeforeExit(); });
    if (!installed.ok()) return Fail("infer", installed.status().ToString());
    interrupt = *std::move(installed);
    const absl::Status placed =
        PlaceInSharedMemory(client, *flags, *metadata, registry, input, flags->options, regions);
    if (!placed.ok()) return Fail("infer", placed.ToString());
  }

  const auto result = client.Infer(flags->model, {input}, flags->options);
  if (!result.ok()) return Fail("infer", result.status().ToString());
  std::cout << "model  " << result->model_name << " version " << result->model_version;
  if (!result->id.empty()) std::cout << " id " << result->id;
  std::cout << "\ninput  \"" << input.name << "\" " << ShapeToString(input.shape) << " (" << source
            << ")\n";
  if (!regions.empty()) {
    std::cout << "tensors in system shared memory (" << regions.size() << " regions)\n";
  }
  for (const Tensor& output : result->outputs) {
    const auto values = Values(output, regions);
    if (!values.ok()) return Fail("infer", values.status().ToString());
    std::cout << "output \"" << output.name << "\" " << ShapeToString(output.shape) << "  "
              << Summary(*values) << "\n";
  }
  if (!flags->output_path.empty()) {
    if (result->outputs.size() != 1) {
      return Fail("infer", absl::StrCat("--output needs exactly one output, the model returned ",
                                        result->outputs.size()));
    }
    const auto values = Values(result->outputs[0], regions);
    if (!values.ok()) return Fail("infer", values.status().ToString());
    const absl::Status written =
        WriteNpyFile(flags->output_path, result->outputs[0].shape, *values);
    if (!written.ok()) return Fail("infer", std::string(written.message()));
    std::cout << "wrote  " << flags->output_path << "\n";
  }
  interrupt.reset();
  if (const absl::Status released = registry.Release(); !released.ok()) {
    std::cerr << "fuseserve-cli infer: warning: " << released << "\n";
  }
  return kExitOk;
}

}  // namespace fuseserve::client::cli
