#pragma once

// Fixtures for the GPU kernel tests: they skip (GTEST_SKIP, counted as
// skipped in CI) when no CUDA device is present, and otherwise own the
// non-blocking stream (and cuBLAS handle) the kernels under test run on.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/resources.h"

namespace fuseserve::cuda {

class GpuStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    auto stream = Stream::Create();
    ASSERT_TRUE(stream.ok()) << stream.status();
    stream_ = std::move(*stream);
  }

  // The work `enqueue` puts on stream_, captured (as the GPU instances
  // capture each batch size) and instantiated, ready for cudaGraphLaunch.
  // An error where the capture, `enqueue` itself or the instantiation fails.
  absl::StatusOr<GraphExecPtr> CaptureOnStream(const std::function<absl::Status()>& enqueue) {
    RETURN_IF_ERROR(CudaStatus(
        cudaStreamBeginCapture(stream_.get(), cudaStreamCaptureModeThreadLocal), "begin capture"));
    const absl::Status enqueued = enqueue();
    cudaGraph_t graph = nullptr;
    RETURN_IF_ERROR(CudaStatus(cudaStreamEndCapture(stream_.get(), &graph), "end capture"));
    const GraphPtr graph_owner(graph);
    RETURN_IF_ERROR(enqueued);
    cudaGraphExec_t exec = nullptr;
    RETURN_IF_ERROR(CudaStatus(cudaGraphInstantiate(&exec, graph, 0), "instantiate"));
    return GraphExecPtr(exec);
  }

  Stream stream_;
};

// Plus a cuBLAS handle bound to stream_.
class GpuCublasTest : public GpuStreamTest {
 protected:
  void SetUp() override {
    GpuStreamTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_EQ(cublasCreate(&handle_), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasSetStream(handle_, stream_.get()), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override {
    if (handle_ != nullptr) cublasDestroy(handle_);
  }

  cublasHandle_t handle_ = nullptr;
};

}  // namespace fuseserve::cuda
