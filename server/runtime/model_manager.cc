#include "server/runtime/model_manager.h"

#include <atomic>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/models/model_factory.h"
#include "server/models/parameters.h"
#include "server/repository/model_config_loader.h"
#include "server/repository/model_repository.h"
#include "server/repository/safetensors.h"
#include "server/runtime/batch_io.h"
#include "server/runtime/cpu_instance.h"
#include "server/runtime/gpu_instance.h"

namespace fuseserve {
namespace {

// Test-only config parameters for fuseserve's own fault and overload tests
// (tests/e2e/reliability). A model whose config has one fails its load unless
// the server runs with FUSESERVE_ENABLE_TEST_PARAMETERS=1 in its environment,
// so that no production config can turn them on by accident.
constexpr char kEnableTestParametersVariable[] = "FUSESERVE_ENABLE_TEST_PARAMETERS";
// "N": the model's first instance fails its N-th batch (1-based) and every
// later one as a sticky device error would: INTERNAL for each request of the
// batch, and the instance reports itself unhealthy.
constexpr char kTestFailBatch[] = "fuseserve_test_fail_batch";
// Microseconds: every batch on every instance takes at least this long, so
// that queueing tests do not depend on the speed of the device.
constexpr char kTestExecutionDelay[] = "fuseserve_test_execution_delay_us";

struct TestFaults {
  int64_t fail_batch = 0;  // 0 = never
  absl::Duration execution_delay = absl::ZeroDuration();

  bool any() const { return fail_batch > 0 || execution_delay > absl::ZeroDuration(); }
};

// Reads the test-only parameters and removes them from `config` (the model
// families reject keys they do not know).
absl::StatusOr<TestFaults> TakeTestFaults(inference::ModelConfig* config) {
  const char* variable = std::getenv(kEnableTestParametersVariable);
  const bool enabled = variable != nullptr && std::string(variable) == "1";
  for (const char* key : {kTestFailBatch, kTestExecutionDelay}) {
    if (!enabled && config->parameters().count(key) > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter \"", key,
                       "\" is a test-only fault injection; it is accepted only when the "
                       "server runs with ",
                       kEnableTestParametersVariable, "=1"));
    }
  }
  const ModelParameters parameters(*config);
  TestFaults faults;
  ASSIGN_OR_RETURN(faults.fail_batch, parameters.OptionalInt(kTestFailBatch, 1, 0));
  ASSIGN_OR_RETURN(const int64_t delay_us, parameters.OptionalInt(kTestExecutionDelay, 0, 0));
  faults.execution_delay = absl::Microseconds(delay_us);
  config->mutable_parameters()->erase(kTestFailBatch);
  config->mutable_parameters()->erase(kTestExecutionDelay);
  return faults;
}

// Wraps an instance with the faults of TestFaults (see the parameters above).
class FaultInjectingInstance final : public Instance {
 public:
  FaultInjectingInstance(std::unique_ptr<Instance> instance, int64_t fail_batch,
                         absl::Duration execution_delay)
      : instance_(std::move(instance)),
        fail_batch_(fail_batch),
        execution_delay_(execution_delay) {}

  const std::string& name() const override { return instance_->name(); }
  bool healthy() const override { return !failed_.load() && instance_->healthy(); }

  void Execute(std::vector<std::unique_ptr<InferenceRequest>>& batch) override {
    absl::SleepFor(execution_delay_);
    ++batches_;
    if (fail_batch_ > 0 && batches_ >= fail_batch_) {
      failed_.store(true);
      FS_LOG(ERROR) << "instance " << name() << " is unhealthy: injected device error ("
                    << kTestFailBatch << ")";
      CompleteBatch(batch, absl::InternalError(
                               absl::StrCat("instance ", name(), " failed: injected device error (",
                                            kTestFailBatch, " ", fail_batch_, ")")));
      return;
    }
    instance_->Execute(batch);
  }

 private:
  const std::unique_ptr<Instance> instance_;
  const int64_t fail_batch_;
  const absl::Duration execution_delay_;
  int64_t batches_ = 0;  // only the batcher thread of this instance touches it
  std::atomic<bool> failed_{false};
};

// CUDA graphs are on unless the config turns them off explicitly
// (`optimization { cuda { graphs: false } }`).
bool UsesCudaGraphs(const inference::ModelConfig& config) {
  const auto& cuda = config.optimization().cuda();
  return cuda.graphs_setting_case() == inference::ModelOptimizationPolicy::Cuda::kGraphs
             ? cuda.graphs()
             : true;
}

// Where one instance runs: the CPU, or a CUDA device.
struct Placement {
  bool gpu = false;
  int device = 0;
};

// The instances the config's instance groups ask for (count per device),
// or an error for groups that cannot be placed. KIND_AUTO is a GPU when a
// CUDA device is present (on the listed `gpus`, else on every device), else
// the CPU.
absl::StatusOr<std::vector<Placement>> PlaceInstances(const inference::ModelConfig& config) {
  const int device_count = GpuDeviceCount();
  std::vector<Placement> placements;
  for (const inference::ModelInstanceGroup& group : config.instance_group()) {
    bool gpu = false;
    switch (group.kind()) {
      case inference::ModelInstanceGroup::KIND_AUTO:
        gpu = device_count > 0;
        break;
      case inference::ModelInstanceGroup::KIND_CPU:
        break;
      case inference::ModelInstanceGroup::KIND_GPU:
        if (device_count == 0) {
          return absl::FailedPreconditionError(
              "instance_group asks for KIND_GPU but no CUDA device is available to this "
              "server (use KIND_AUTO to fall back to the CPU)");
        }
        gpu = true;
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "instance_group kind ", inference::ModelInstanceGroup::Kind_Name(group.kind()),
            " is not supported"));
    }
    std::vector<int> devices = {0};
    if (gpu) {
      devices.assign(group.gpus().begin(), group.gpus().end());
      if (devices.empty()) {
        for (int device = 0; device < device_count; ++device) devices.push_back(device);
      }
      for (int device : devices) {
        if (device >= device_count) {
          return absl::InvalidArgumentError(absl::StrCat(
              "instance_group lists GPU ", device, " but only ", device_count,
              " CUDA device(s) are present"));
        }
      }
    }
    for (int device : devices) {
      for (int i = 0; i < group.count(); ++i) placements.push_back({gpu, device});
    }
  }
  return placements;
}

// The largest input a batch can have: [max_batch_size] + dims when
// batching, else the config's dims (-1 where unknown).
Shape MaxInputShape(const inference::ModelConfig& config) {
  Shape shape;
  if (config.max_batch_size() > 0) shape.push_back(config.max_batch_size());
  for (int64_t dim : config.input(0).dims()) shape.push_back(dim);
  return shape;
}

std::string DevicesOf(const std::vector<Placement>& placements) {
  std::vector<std::string> names;
  for (const Placement& placement : placements) {
    std::string name = placement.gpu ? absl::StrCat("gpu", placement.device) : "cpu";
    if (names.empty() || names.back() != name) names.push_back(name);
  }
  return absl::StrJoin(names, ",");
}

}  // namespace

std::string ModelVersionRecord::version_string() const {
  return version_ > 0 ? absl::StrCat(version_) : "";
}

bool ModelVersionRecord::ready() const {
  return loaded() && !shutting_down_->load() && batcher_->healthy();
}

std::string ModelVersionRecord::reason() const {
  if (!loaded()) return failure_;
  if (shutting_down_->load()) return "server is shutting down";
  if (!batcher_->healthy()) return "an instance of the model is unhealthy";
  return "";
}

absl::StatusOr<std::unique_ptr<ModelManager>> ModelManager::Load(
    const ModelManagerOptions& options) {
  ASSIGN_OR_RETURN(std::vector<RepositoryModelEntry> entries,
                   ListRepository(options.repository));
  std::unique_ptr<ModelManager> manager(new ModelManager());
  for (const RepositoryModelEntry& entry : entries) {
    manager->LoadModel(entry.name, entry.directory, options);
  }
  return manager;
}

ModelManager::~ModelManager() { Shutdown(absl::Now()); }

void ModelManager::AddFailure(const std::string& name, int64_t version,
                              inference::ModelConfig config, const std::string& reason) {
  FS_LOG(ERROR) << "model " << name << (version > 0 ? absl::StrCat(" version ", version) : "")
                << " failed to load: " << reason;
  auto record = std::make_unique<ModelVersionRecord>();
  record->name_ = name;
  record->version_ = version;
  record->config_ = std::move(config);
  record->failure_ = reason;
  record->shutting_down_ = &shutting_down_;
  models_[name][version] = std::move(record);
}

void ModelManager::LoadModel(const std::string& name, const std::string& directory,
                             const ModelManagerOptions& options) {
  absl::StatusOr<inference::ModelConfig> config = LoadModelConfig(directory);
  if (!config.ok()) {
    AddFailure(name, 0, {}, std::string(config.status().message()));
    return;
  }
  absl::StatusOr<std::vector<ModelVersion>> versions = SelectVersions(directory, *config);
  if (!versions.ok()) {
    AddFailure(name, 0, *config, std::string(versions.status().message()));
    return;
  }
  for (const ModelVersion& version : *versions) {
    const absl::Time start = absl::Now();
    auto record = std::make_unique<ModelVersionRecord>();
    record->name_ = name;
    record->version_ = version.version;
    record->config_ = *config;
    record->shutting_down_ = &shutting_down_;

    absl::Status status = [&]() -> absl::Status {
      inference::ModelConfig family_config = *config;
      ASSIGN_OR_RETURN(const TestFaults faults, TakeTestFaults(&family_config));
      if (faults.any()) {
        FS_LOG(WARNING) << "model " << name << " injects faults (test-only parameters "
                        << kTestFailBatch << " / " << kTestExecutionDelay << ")";
      }
      ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> weights,
                       SafetensorsFile::Open(version.weights_path));
      ASSIGN_OR_RETURN(record->model_, CreateModel(family_config, *weights));
      ASSIGN_OR_RETURN(BatcherOptions batcher_options, BatcherOptionsFromConfig(*config));
      batcher_options.response_threads = options.response_threads;
      ASSIGN_OR_RETURN(const std::vector<Placement> placements, PlaceInstances(*config));
      const std::string version_string = record->version_string();
      record->metrics_ = &options.metrics->ForModel(name, version_string);
      record->device_ = DevicesOf(placements);
      std::vector<std::unique_ptr<Instance>> instances;
      for (size_t i = 0; i < placements.size(); ++i) {
        const Placement& placement = placements[i];
        if (!placement.gpu) {
          instances.push_back(std::make_unique<CpuInstance>(
              absl::StrCat(name, "/", version_string, " cpu#", i), record->model_.get(),
              options.cpu_pool, options.clock, record->metrics_));
          continue;
        }
        GpuInstanceOptions gpu;
        gpu.name = absl::StrCat(name, "/", version_string, " gpu", placement.device, "#", i);
        gpu.device = placement.device;
        gpu.model = record->model_.get();
        gpu.clock = options.clock;
        gpu.metrics = record->metrics_;
        gpu.max_input_shape = MaxInputShape(*config);
        gpu.cuda_graphs = UsesCudaGraphs(*config);
        gpu.busy_wait_events = config->optimization().cuda().busy_wait_events();
        gpu.trace = options.batch_trace;
        gpu.copy_pool = options.cpu_pool;
        ASSIGN_OR_RETURN(std::unique_ptr<Instance> instance, CreateGpuInstance(gpu));
        instances.push_back(std::move(instance));
      }
      if (faults.any()) {
        for (size_t i = 0; i < instances.size(); ++i) {
          instances[i] = std::make_unique<FaultInjectingInstance>(
              std::move(instances[i]), i == 0 ? faults.fail_batch : 0, faults.execution_delay);
        }
      }
      const int instance_count = static_cast<int>(instances.size());
      (*record->config_.mutable_parameters())["precision"].set_string_value(
          PrecisionName(record->model_->precision()));
      record->batcher_ = std::make_unique<DynamicBatcher>(
          std::move(batcher_options), std::move(instances), options.clock, record->metrics_);
      const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
      options.metrics->SetModelLoadDuration(name, version_string, seconds);
      FS_LOG(INFO) << "loaded model " << name << " version " << version.version << " ("
                   << config->platform() << ") on " << record->device_ << ": " << instance_count
                   << " instance(s), precision "
                   << PrecisionName(record->model_->precision())
                   << ", max_batch_size " << config->max_batch_size() << ", in " << seconds
                   << " s";
      return absl::OkStatus();
    }();
    if (!status.ok()) {
      AddFailure(name, version.version, *config, std::string(status.message()));
      continue;
    }
    models_[name][version.version] = std::move(record);
  }
}

absl::StatusOr<const ModelVersionRecord*> ModelManager::Find(const std::string& name,
                                                             const std::string& version) const {
  auto model = models_.find(name);
  if (model == models_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown model \"", name, "\""));
  }
  const auto& versions = model->second;
  if (version.empty()) {
    // The highest loaded version, else the highest known one (for reasons).
    for (auto it = versions.rbegin(); it != versions.rend(); ++it) {
      if (it->second->loaded()) return it->second.get();
    }
    return versions.rbegin()->second.get();
  }
  // As Triton: a version that is not a number is a malformed request; a
  // number that names no version (0 included) is not found.
  int64_t number = 0;
  if (!absl::SimpleAtoi(version, &number) || number < 0) {
    return absl::InvalidArgumentError(absl::StrCat("version \"", version, "\" of model \"", name,
                                                   "\" is not a version number (an integer > 0)"));
  }
  auto it = versions.find(number);
  if (it == versions.end()) {
    return absl::NotFoundError(
        absl::StrCat("unknown version \"", version, "\" of model \"", name, "\""));
  }
  return it->second.get();
}

absl::StatusOr<const ModelVersionRecord*> ModelManager::FindReady(
    const std::string& name, const std::string& version) const {
  ASSIGN_OR_RETURN(const ModelVersionRecord* record, Find(name, version));
  if (!record->ready()) {
    return absl::UnavailableError(absl::StrCat("model \"", name, "\" version ",
                                               record->version_string(),
                                               " is not ready: ", record->reason()));
  }
  return record;
}

absl::StatusOr<std::vector<const ModelVersionRecord*>> ModelManager::Versions(
    const std::string& name) const {
  auto model = models_.find(name);
  if (model == models_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown model \"", name, "\""));
  }
  std::vector<const ModelVersionRecord*> records;
  for (const auto& [version, record] : model->second) records.push_back(record.get());
  return records;
}

std::vector<const ModelVersionRecord*> ModelManager::All() const {
  std::vector<const ModelVersionRecord*> records;
  for (const auto& [name, versions] : models_) {
    for (const auto& [version, record] : versions) records.push_back(record.get());
  }
  return records;
}

bool ModelManager::Ready(bool strict) const {
  if (draining_.load()) return false;
  for (const ModelVersionRecord* record : All()) {
    if (record->loaded() ? !record->ready() : strict) return false;
  }
  return true;
}

void ModelManager::RefreshGpuMemoryMetrics(MetricsRegistry& metrics) const {
  for (int device = 0; device < GpuDeviceCount(); ++device) {
    absl::StatusOr<GpuDeviceMemory> memory = QueryGpuMemory(device);
    if (memory.ok()) metrics.SetGpuMemory(memory->uuid, memory->used_bytes, memory->total_bytes);
  }
}

void ModelManager::BeginDrain() {
  draining_.store(true);
  for (const ModelVersionRecord* record : All()) {
    if (record->loaded()) record->batcher().Flush();
  }
}

void ModelManager::Shutdown(absl::Time deadline) {
  draining_.store(true);
  shutting_down_.store(true);
  for (const ModelVersionRecord* record : All()) {
    if (record->loaded()) record->batcher().Shutdown(deadline);
  }
}

bool ModelManager::shutting_down() const { return shutting_down_.load(); }

}  // namespace fuseserve
