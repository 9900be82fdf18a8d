// SharedMemoryRegistry against the real server (started with
// --allow-shared-memory): what it registers, and that every way of releasing
// leaves nothing registered and nothing in /dev/shm. OutputByteSize's rules.

#include "client/shared_memory_registry.h"

#include <unistd.h>

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/test_server.h"

namespace fuseserve::client {
namespace {

using fuseserve::testing::SharedMemoryObjectsOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

class SharedMemoryRegistryTest : public fuseserve::testing::SuiteServerTest {
 protected:
  static void SetUpTestSuite() { StartSuiteServer({fuseserve::testing::kAllowSharedMemoryFlag}); }

  void SetUp() override {
    SuiteServerTest::SetUp();
    client_ = Client::Create(server_->process->grpc_target());
  }
  void TearDown() override {
    // Whatever a failed test left registered must not leak into the next one.
    EXPECT_TRUE(client_->UnregisterSystemSharedMemory().ok());
  }

  int RegisteredRegions() {
    const auto status = client_->SystemSharedMemoryStatus();
    EXPECT_TRUE(status.ok()) << status.status();
    return status.ok() ? status->regions_size() : -1;
  }

  std::unique_ptr<Client> client_;
};

TEST_F(SharedMemoryRegistryTest, AddRegistersWholeRegionsUnderTheirKeysName) {
  SharedMemoryRegistry registry(client_.get());
  auto input = registry.Add("reg_in", 96);
  ASSERT_TRUE(input.ok()) << input.status();
  auto output = registry.Add("reg_out", 4);
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_EQ(registry.size(), 2);
  EXPECT_EQ("/" + input->name, input->region->key());
  EXPECT_THAT(input->name, ::testing::StartsWith("fuseserve_reg_in_"));

  const auto status = client_->SystemSharedMemoryStatus(input->name);
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->regions().count(input->name), 1u);
  const auto& region = status->regions().at(input->name);
  EXPECT_EQ(region.key(), input->region->key());
  EXPECT_EQ(region.offset(), 0u);
  EXPECT_EQ(region.byte_size(), 96u);

  const SharedMemoryLocation location = output->Location(4, 0);
  EXPECT_EQ(location.region, output->name);
  EXPECT_EQ(location.byte_size, 4u);
  EXPECT_THAT(SharedMemoryObjectsOf(::getpid()), SizeIs(2));
}

TEST_F(SharedMemoryRegistryTest, ReleaseUnregistersAndRemovesEverything) {
  SharedMemoryRegistry registry(client_.get());
  ASSERT_TRUE(registry.Add("reg", 64).ok());
  ASSERT_TRUE(registry.Add("reg", 64).ok());
  EXPECT_EQ(RegisteredRegions(), 2);
  EXPECT_TRUE(registry.Release().ok());
  EXPECT_EQ(registry.size(), 0);
  EXPECT_EQ(RegisteredRegions(), 0);
  EXPECT_THAT(SharedMemoryObjectsOf(::getpid()), IsEmpty());
}

TEST_F(SharedMemoryRegistryTest, DestructionReleasesAndLeavesOtherClientsRegionsAlone) {
  auto other = SystemSharedMemoryRegion::Create(UniqueSharedMemoryKey("other"), 64);
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_TRUE(client_->RegisterSystemSharedMemory("someone_else", (*other)->key(), 64).ok());
  {
    SharedMemoryRegistry registry(client_.get());
    ASSERT_TRUE(registry.Add("reg", 64).ok());
    EXPECT_EQ(RegisteredRegions(), 2);
  }
  const auto status = client_->SystemSharedMemoryStatus();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->regions_size(), 1);
  EXPECT_EQ(status->regions().count("someone_else"), 1u);
  EXPECT_THAT(SharedMemoryObjectsOf(::getpid()), SizeIs(1));  // `other` only
}

TEST_F(SharedMemoryRegistryTest, ReleaseBeforeExitUnregistersAndUnlinksButKeepsTheMapping) {
  SharedMemoryRegistry registry(client_.get());
  auto region = registry.Add("reg", 64);
  ASSERT_TRUE(region.ok()) << region.status();
  registry.ReleaseBeforeExit();
  EXPECT_EQ(RegisteredRegions(), 0);
  EXPECT_THAT(SharedMemoryObjectsOf(::getpid()), IsEmpty());
  EXPECT_TRUE(region->region->WriteFloats(0, {1.0f, 2.0f}).ok());
}

TEST_F(SharedMemoryRegistryTest, AFailedAddLeavesTheOthersAsTheyWere) {
  SharedMemoryRegistry registry(client_.get());
  ASSERT_TRUE(registry.Add("reg", 64).ok());
  const auto too_big = registry.Add("reg", uint64_t{1} << 50);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(registry.size(), 1);
  EXPECT_EQ(RegisteredRegions(), 1);
  EXPECT_THAT(SharedMemoryObjectsOf(::getpid()), SizeIs(1));
}

TEST(SharedMemoryRegistryWithoutServerTest, ReleaseRemovesTheObjectsEvenWhenTheServerIsGone) {
  // Port 1 on the loopback: nothing listens, so registration fails.
  const std::unique_ptr<Client> client = Client::Create("127.0.0.1:1");
  SharedMemoryRegistry registry(client.get());
  const auto added = registry.Add("gone", 64);
  EXPECT_EQ(added.status().code(), absl::StatusCode::kUnavailable) << added.status();
  EXPECT_THAT(added.status().message(), HasSubstr("registering system shared-memory region"));
  EXPECT_THAT(SharedMemoryObjectsOf(::getpid()), IsEmpty());
}

inference::ModelMetadataResponse::TensorMetadata Output(std::vector<int64_t> shape,
                                                        const std::string& datatype = "FP32") {
  inference::ModelMetadataResponse::TensorMetadata output;
  output.set_name("output");
  output.set_datatype(datatype);
  for (int64_t dim : shape) output.add_shape(dim);
  return output;
}

TEST(OutputByteSizeTest, TheBatchDimensionTakesTheBatchSize) {
  EXPECT_EQ(*OutputByteSize(Output({-1, 8, 10, 10}), 3), 3u * 8 * 10 * 10 * 4);
  EXPECT_EQ(*OutputByteSize(Output({2, 64}), 0), 2u * 64 * 4);
}

TEST(OutputByteSizeTest, OtherVariableDimsNeedTheFlag) {
  const auto variable = OutputByteSize(Output({-1, 8, -1, -1}), 2);
  EXPECT_EQ(variable.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(variable.status().message(), HasSubstr("--output-shared-memory-size"));
  EXPECT_THAT(variable.status().message(), HasSubstr("[-1, 8, -1, -1]"));
  // Without a batch dimension a leading -1 is variable too.
  EXPECT_FALSE(OutputByteSize(Output({-1, 64}), 0).ok());
  EXPECT_FALSE(OutputByteSize(Output({4, 64}, "INT8"), 0).ok());
  EXPECT_FALSE(OutputByteSize(Output({int64_t{1} << 40, int64_t{1} << 30}), 0).ok());
}

}  // namespace
}  // namespace fuseserve::client
