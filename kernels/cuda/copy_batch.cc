#include "kernels/cuda/copy_batch.h"

#include "kernels/cuda/cuda_status.h"

namespace fuseserve::cuda {

void CopyBatch::Add(void* destination, const void* source, size_t bytes) {
  if (bytes == 0) return;
  destinations_.push_back(destination);
  sources_.push_back(source);
  sizes_.push_back(bytes);
}

absl::Status CopyBatch::Issue(cudaStream_t stream) {
  const size_t count = destinations_.size();
  cudaError_t error = cudaSuccess;
  if (count == 1) {
    error = cudaMemcpyAsync(destinations_[0], sources_[0], sizes_[0], cudaMemcpyDefault, stream);
  } else if (count > 1) {
    // One set of attributes for every copy: sources read in stream order
    // (the device writes the outputs earlier in the same stream).
    cudaMemcpyAttributes attributes{};
    attributes.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    size_t first_copy = 0;
    error = cudaMemcpyBatchAsync(destinations_.data(), sources_.data(), sizes_.data(), count,
                                 &attributes, &first_copy, 1, stream);
  }
  destinations_.clear();
  sources_.clear();
  sizes_.clear();
  RETURN_IF_CUDA_ERROR(error);
  return absl::OkStatus();
}

}  // namespace fuseserve::cuda
