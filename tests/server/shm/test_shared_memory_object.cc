#include "tests/server/shm/test_shared_memory_object.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace fuseserve::testing {

std::string UniqueSharedMemoryKey() {
  static std::atomic<int> counter{0};
  return absl::StrCat("/fuseserve-test-", ::getpid(), "-", counter++);
}

absl::StatusOr<std::unique_ptr<TestSharedMemoryObject>> TestSharedMemoryObject::Create(
    size_t byte_size) {
  std::string key = UniqueSharedMemoryKey();
  const int fd = ::shm_open(key.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("shm_open ", key, ": ", std::strerror(errno)));
  }
  void* data = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(byte_size)) == 0) {
    data = ::mmap(nullptr, byte_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  const int error = errno;
  ::close(fd);
  if (data == MAP_FAILED) {
    ::shm_unlink(key.c_str());
    return absl::InternalError(absl::StrCat("sizing or mapping ", key, ": ", std::strerror(error)));
  }
  return std::unique_ptr<TestSharedMemoryObject>(
      new TestSharedMemoryObject(std::move(key), static_cast<uint8_t*>(data), byte_size));
}

TestSharedMemoryObject::~TestSharedMemoryObject() {
  ::munmap(data_, byte_size_);
  Unlink();
}

void TestSharedMemoryObject::Unlink() {
  if (linked_) ::shm_unlink(key_.c_str());
  linked_ = false;
}

}  // namespace fuseserve::testing
