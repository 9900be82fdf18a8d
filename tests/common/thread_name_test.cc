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

// Names a new thread `name` and returns the name the kernel then reports.
std::string NameInNewThread(const std::string& name) {
  std::string named;
  std::thread([&] {
    NameCurrentThread(name);
    named = KernelThreadName();
  }).join();
  return named;
}

TEST(ThreadNameTest, NamesTheCallingThreadOnly) {
  const std::string before = KernelThreadName();
  EXPECT_EQ(NameInNewThread("fs-test-worker"), "fs-test-worker");
  EXPECT_EQ(KernelThreadName(), before);
}

TEST(ThreadNameTest, CutsNamesToTheFifteenCharactersLinuxKeeps) {
  EXPECT_EQ(NameInNewThread("fsi:gemm_bias_hardtanh_mish_groupnorm_0"), "fsi:gemm_bias_h");
}

}  // namespace
}  // namespace fuseserve
