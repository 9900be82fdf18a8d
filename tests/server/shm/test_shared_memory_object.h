#pragma once

// A POSIX shared-memory object created for one test the way a client creates
// one: shm_open(O_CREAT | O_EXCL) under a key unique to this process, sized
// with ftruncate and mapped for the test to fill and read. The destructor
// unmaps and unlinks it, so no test leaves an object behind in /dev/shm.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace fuseserve::testing {

class TestSharedMemoryObject {
 public:
  static absl::StatusOr<std::unique_ptr<TestSharedMemoryObject>> Create(size_t byte_size);
  ~TestSharedMemoryObject();
  TestSharedMemoryObject(const TestSharedMemoryObject&) = delete;
  TestSharedMemoryObject& operator=(const TestSharedMemoryObject&) = delete;

  // "/fuseserve-test-<pid>-<n>".
  const std::string& key() const { return key_; }
  uint8_t* data() const { return data_; }
  size_t byte_size() const { return byte_size_; }

  // Unlinks the object now (the destructor then only unmaps): the test's own
  // mapping, and any the server holds, stay valid.
  void Unlink();

 private:
  TestSharedMemoryObject(std::string key, uint8_t* data, size_t byte_size)
      : key_(std::move(key)), data_(data), byte_size_(byte_size) {}

  std::string key_;
  uint8_t* data_;
  size_t byte_size_;
  bool linked_ = true;
};

// A key of the same form that no object has yet.
std::string UniqueSharedMemoryKey();

}  // namespace fuseserve::testing
