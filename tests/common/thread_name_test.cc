#include "common/thread_name.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace fuseserve {
namespace {

// The kernel's name of the calling thread, as top and /proc show it.
std::string KernelThreadName() {
  std::ifstream comm(absl::StrCat("/proc/self/task/", syscall(SYS_gettid), "/comm"));
  std::string name;
  std::getline(comm, name);
  return name;
}

TEST(ThreadNameTest, NamesTheCallingThreadOnly) {
  const std::string before = KernelThreadName();
  std::string named;
  std::thread([&named] {
    NameCurrentThread("fs-test-worker");
    named = KernelThreadName();
  }).join();
  EXPECT_EQ(named, "fs-test-worker");
  EXPECT_EQ(KernelThreadName(), before);
}

TEST(ThreadNameTest, CutsNamesToTheFifteenCharactersLinuxKeeps) {
  std::string named;
  std::thread([&named] {
    NameCurrentThread("fsi:gemm_bias_hardtanh_mish_groupnorm_0");
    named = KernelThreadName();
  }).join();
  EXPECT_EQ(named, "fsi:gemm_bias_h");
}

}  // namespace
}  // namespace fuseserve
