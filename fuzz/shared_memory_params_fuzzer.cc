// The system shared-memory tensor parameters (shared_memory_region,
// shared_memory_byte_size, shared_memory_offset on inputs and requested
// outputs) through DecodeInferRequest (server/grpc/infer_request_decoder.h),
// with real regions registered in a SharedMemoryManager: whatever the decoder
// accepts must lie inside a region, have the tensor's size, not alias, and be
// safe to compute from and into, as ModelInfer does.
//
// Input: as for infer_request_decoder (fuzz/decoder_fuzz_input.h).
//
// Regions of one object of kObjectBytes bytes (unlinked once registered, so
// that no run leaves it behind): "r" the whole object, "u" 4000 bytes from
// byte 1 (not float-aligned), "e" its last 64 bytes.

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/shape.h"
#include "common/thread_pool.h"
#include "fuzz/decoder_fuzz_input.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_models.h"
#include "server/grpc/infer_request_decoder.h"
#include "server/shm/shared_memory_manager.h"

namespace fuseserve::fuzzing {
namespace {

constexpr size_t kObjectBytes = 8192;

const SharedMemoryManager& Regions() {
  static const SharedMemoryManager* const manager = [] {
    const std::string key = absl::StrCat("/fuseserve-fuzz-", ::getpid());
    const int fd = ::shm_open(key.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    Check(fd >= 0);
    Check(::ftruncate(fd, kObjectBytes) == 0);
    void* data = ::mmap(nullptr, kObjectBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    Check(data != MAP_FAILED);
    ::close(fd);
    // Finite, varied values, so that the models compute something real.
    float* values = static_cast<float*>(data);
    for (size_t i = 0; i < kObjectBytes / sizeof(float); ++i) {
      values[i] = 0.5f * static_cast<float>(i % 13) - 3.0f;
    }
    ::munmap(data, kObjectBytes);
    auto* regions = new SharedMemoryManager();
    Check(regions->Register("r", key, 0, kObjectBytes).ok());
    Check(regions->Register("u", key, 1, 4000).ok());
    Check(regions->Register("e", key, kObjectBytes - 64, 64).ok());
    ::shm_unlink(key.c_str());
    return regions;
  }();
  return *manager;
}

// The view lies inside its region and covers at least `min_bytes`.
void CheckInside(const SharedMemoryView& view, uint64_t min_bytes) {
  const SharedMemoryRegion& region = *view.region;
  Check(view.byte_size >= min_bytes);
  Check(view.offset_in_region <= region.byte_size());
  Check(view.byte_size <= region.byte_size() - view.offset_in_region);
  Check(view.data == region.data() + view.offset_in_region);
}

void CheckAccepted(const FuzzModel& fuzz_model, const DecodedInferRequest& decoded) {
  const int64_t input_count = NumElements(decoded.input_shape);
  const uint64_t input_bytes = static_cast<uint64_t>(input_count) * sizeof(float);
  Check(decoded.input != nullptr);
  Check(reinterpret_cast<uintptr_t>(decoded.input) % alignof(float) == 0);
  if (decoded.shared_memory_input.has_value()) {
    const SharedMemoryView& input = *decoded.shared_memory_input;
    CheckInside(input, input_bytes);
    Check(input.byte_size == input_bytes);
    // In place when aligned, else a copy of exactly those bytes.
    if (decoded.aligned_copy.empty()) {
      Check(static_cast<const void*>(decoded.input) == input.data);
    } else {
      Check(std::memcmp(decoded.aligned_copy.data(), input.data, input_bytes) == 0);
    }
  }
  Touch(decoded.input, input_bytes);

  static ThreadPool* const pool = new ThreadPool(1);
  const int64_t output_count = NumElements(decoded.output_shape);
  std::vector<float> output(output_count);
  Check(fuzz_model.model->RunOnCpu(decoded.input, decoded.input_shape, output.data(), *pool).ok());
  if (decoded.shared_memory_output.has_value()) {
    const SharedMemoryView& destination = *decoded.shared_memory_output;
    const uint64_t output_bytes = static_cast<uint64_t>(output_count) * sizeof(float);
    CheckInside(destination, output_bytes);
    if (decoded.shared_memory_input.has_value() &&
        decoded.shared_memory_input->region->key() == destination.region->key()) {
      const SharedMemoryView& input = *decoded.shared_memory_input;
      const uint64_t input_start = input.region->offset() + input.offset_in_region;
      const uint64_t output_start = destination.region->offset() + destination.offset_in_region;
      Check(input_start + input.byte_size <= output_start ||
            output_start + destination.byte_size <= input_start);
    }
    // As ModelInfer does: the output lands in the region.
    std::memcpy(destination.data, output.data(), output_bytes);
  }
}

}  // namespace
}  // namespace fuseserve::fuzzing

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fuseserve::fuzzing;
  const std::optional<DecoderFuzzInput> input = ParseDecoderFuzzInput(data, size);
  if (!input.has_value()) return 0;
  const FuzzModel& fuzz_model = *input->model;
  const absl::StatusOr<fuseserve::DecodedInferRequest> decoded = fuseserve::DecodeInferRequest(
      input->request, fuzz_model.config, *fuzz_model.model, &Regions());
  if (decoded.ok()) {
    CheckAccepted(fuzz_model, *decoded);
    return 0;
  }
  // A bad tensor is InvalidArgument; only a region that is not registered
  // is NotFound.
  const absl::Status& status = decoded.status();
  Check(!status.message().empty());
  Check(status.code() == absl::StatusCode::kInvalidArgument ||
        (status.code() == absl::StatusCode::kNotFound &&
         absl::StrContains(status.message(), "Unable to find shared memory region")));
  return 0;
}
