#pragma once

// Fixtures for the GPU kernel tests: they skip (GTEST_SKIP, counted as
// skipped in CI) when no CUDA device is present, and otherwise own the
// non-blocking stream (and cuBLAS handle) the kernels under test run on.

#include <cublas_v2.h>

#include <utility>

#include "gtest/gtest.h"
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
