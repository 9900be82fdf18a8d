#include "client/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <limits>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace fuseserve::client {
namespace {

// What `call` failing with `error` on `key` means for the caller.
absl::Status ErrnoStatus(int error, absl::string_view call, const std::string& key,
                         uint64_t byte_size) {
  const std::string message = absl::StrCat(call, " of shared-memory key \"", key, "\" (", byte_size,
                                           " bytes): ", std::strerror(error));
  switch (error) {
    case EEXIST:
      return absl::AlreadyExistsError(
          absl::StrCat(message,
                       "; another region uses this key, or a stale one is left in "
                       "/dev/shm (remove it there)"));
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case EINVAL:
    case ENAMETOOLONG:
    case EFBIG:
      return absl::InvalidArgumentError(message);
    case ENOSPC:
      return absl::ResourceExhaustedError(
          absl::StrCat(message,
                       "; /dev/shm is too small for it (in Docker, raise --shm-size or use "
                       "--ipc=host)"));
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status CheckKey(const std::string& key) {
  const bool valid = key.size() >= 2 && key.size() <= NAME_MAX + 1 && key[0] == '/' &&
                     key.find('/', 1) == std::string::npos && key.find('\0') == std::string::npos &&
                     key != "/." && key != "/..";
  if (valid) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("shared-memory key \"", key, "\" is not of the form \"/name\" (one leading '/',",
                   " no other, 1 to ", NAME_MAX, " characters after it)"));
}

absl::Status CheckFits(uint64_t offset, uint64_t byte_size, uint64_t region_size,
                       const std::string& key) {
  if (offset > region_size || byte_size > region_size - offset) {
    return absl::OutOfRangeError(absl::StrCat("bytes [", offset, ", ", offset, " + ", byte_size,
                                              ") do not fit shared-memory region \"", key, "\" of ",
                                              region_size, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SharedMemoryType> ParseSharedMemoryType(absl::string_view text) {
  if (text == "none") return SharedMemoryType::kNone;
  if (text == "system") return SharedMemoryType::kSystem;
  return absl::InvalidArgumentError(absl::StrCat("--shared-memory expects none or system, got \"",
                                                 text, "\" (cuda is not supported)"));
}

const char* SharedMemoryTypeName(SharedMemoryType type) {
  return type == SharedMemoryType::kSystem ? "system" : "none";
}

absl::StatusOr<std::unique_ptr<SystemSharedMemoryRegion>> SystemSharedMemoryRegion::Create(
    const std::string& key, uint64_t byte_size) {
  RETURN_IF_ERROR(CheckKey(key));
  if (byte_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared-memory region \"", key, "\" needs at least one byte"));
  }
  if (byte_size > static_cast<uint64_t>(std::numeric_limits<off_t>::max())) {
    return ErrnoStatus(EFBIG, "sizing", key, byte_size);
  }
  const int fd = ::shm_open(key.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, S_IRUSR | S_IWUSR);
  if (fd < 0) return ErrnoStatus(errno, "shm_open", key, byte_size);
  // From here on the object exists and is ours: every failure removes it.
  auto fail = [&](int error, absl::string_view call) {
    ::close(fd);
    ::shm_unlink(key.c_str());
    return ErrnoStatus(error, call, key, byte_size);
  };
  if (::ftruncate(fd, static_cast<off_t>(byte_size)) != 0) return fail(errno, "ftruncate");
  // posix_fallocate returns the error rather than setting errno.
  if (const int error = ::posix_fallocate(fd, 0, static_cast<off_t>(byte_size)); error != 0) {
    return fail(error, "reserving the bytes (posix_fallocate)");
  }
  void* data = ::mmap(nullptr, byte_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) return fail(errno, "mmap");
  // The mapping keeps the object open; the descriptor is no longer needed.
  ::close(fd);
  return std::unique_ptr<SystemSharedMemoryRegion>(
      new SystemSharedMemoryRegion(key, byte_size, static_cast<uint8_t*>(data)));
}

SystemSharedMemoryRegion::SystemSharedMemoryRegion(std::string key, uint64_t size, uint8_t* data)
    : key_(std::move(key)), size_(size), data_(data) {}

SystemSharedMemoryRegion::~SystemSharedMemoryRegion() {
  ::munmap(data_, size_);
  Unlink();
}

void SystemSharedMemoryRegion::Unlink() {
  if (linked_.exchange(false)) ::shm_unlink(key_.c_str());
}

absl::Status SystemSharedMemoryRegion::WriteFloats(uint64_t offset,
                                                   absl::Span<const float> values) {
  const uint64_t byte_size = values.size() * sizeof(float);
  RETURN_IF_ERROR(CheckFits(offset, byte_size, size_, key_));
  if (byte_size > 0) std::memcpy(data_ + offset, values.data(), byte_size);
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<const float>> SystemSharedMemoryRegion::Floats(uint64_t offset,
                                                                         uint64_t count) const {
  if (offset % alignof(float) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "offset ", offset, " into shared-memory region \"", key_, "\" is not float32-aligned"));
  }
  // The first test keeps count * sizeof(float) from overflowing.
  if (count > size_ / sizeof(float) ||
      !CheckFits(offset, count * sizeof(float), size_, key_).ok()) {
    return absl::OutOfRangeError(absl::StrCat(count, " float32 values at offset ", offset,
                                              " do not fit shared-memory region \"", key_, "\" of ",
                                              size_, " bytes"));
  }
  return absl::Span<const float>(reinterpret_cast<const float*>(data_ + offset), count);
}

std::string UniqueSharedMemoryKey(absl::string_view tag) {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 engine{std::random_device{}()};
  return absl::StrFormat("/fuseserve_%s_%d_%d_%016x", tag, ::getpid(), counter.fetch_add(1),
                         engine());
}

}  // namespace fuseserve::client
