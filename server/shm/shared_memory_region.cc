#include "server/shm/shared_memory_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"

namespace fuseserve {
namespace {

static_assert(sizeof(size_t) >= sizeof(uint64_t),
              "a registered range (at most an object's size) must fit in size_t");

// "failed to register shared memory region '<name>': " (Triton's wording).
std::string RegisterFailure(const std::string& name) {
  return absl::StrCat("failed to register shared memory region '", name, "': ");
}

absl::Status OpenError(const std::string& name, const std::string& key, int error) {
  const std::string message =
      absl::StrCat(RegisterFailure(name), "unable to open shared memory object '", key,
                   "': ", std::strerror(error));
  switch (error) {
    case ENOENT:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case EISDIR:
    case ELOOP:  // shm_open refuses to follow a symbolic link
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace

absl::Status ValidateSharedMemoryKey(const std::string& key) {
  if (key.size() > kMaxSharedMemoryKeyLength) {
    return absl::InvalidArgumentError(absl::StrCat("invalid shared memory key: ", key.size(),
                                                   " characters long, at most ",
                                                   kMaxSharedMemoryKeyLength));
  }
  const auto invalid = [&key](const char* rule) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid shared memory key '", absl::CHexEscape(key), "': ", rule));
  };
  if (key.empty() || key[0] != '/') return invalid("must start with '/'");
  if (key.size() == 1) return invalid("needs a name after the '/'");
  if (key.find('/', 1) != std::string::npos) return invalid("must not contain another '/'");
  if (key.find('\0') != std::string::npos) return invalid("must not contain a NUL character");
  if (key == "/." || key == "/..") return invalid("must not name '.' or '..'");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> SharedMemoryRegion::Map(std::string name,
                                                                            std::string key,
                                                                            uint64_t offset,
                                                                            uint64_t byte_size) {
  RETURN_IF_ERROR(ValidateSharedMemoryKey(key));
  if (byte_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(RegisterFailure(name), "byte_size must be positive"));
  }
  const int fd = ::shm_open(key.c_str(), O_RDWR, 0);
  if (fd < 0) return OpenError(name, key, errno);
  const UniqueFd closer(fd);
  struct stat status;
  if (::fstat(fd, &status) != 0) {
    return absl::InternalError(
        absl::StrCat(RegisterFailure(name), "fstat of '", key, "' failed: ", std::strerror(errno)));
  }
  if (!S_ISREG(status.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(RegisterFailure(name), "'", key, "' is not a shared memory object"));
  }
  const uint64_t object_size = static_cast<uint64_t>(status.st_size);
  // Written so that no sum can wrap: offset + byte_size <= object_size.
  if (offset > object_size || byte_size > object_size - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        RegisterFailure(name), "offset ", offset, " + byte_size ", byte_size,
        " is past the end of shared memory object '", key, "' (", object_size, " bytes)"));
  }
  // mmap takes a page-aligned file offset; the range starts data_offset bytes
  // into the mapping.
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const size_t data_offset = static_cast<size_t>(offset % page);
  const size_t length = data_offset + static_cast<size_t>(byte_size);
  void* mapped = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                        static_cast<off_t>(offset - data_offset));
  if (mapped == MAP_FAILED) {
    return absl::InternalError(
        absl::StrCat(RegisterFailure(name), "mmap of '", key, "' failed: ", std::strerror(errno)));
  }
  return std::unique_ptr<SharedMemoryRegion>(new SharedMemoryRegion(
      std::move(name), std::move(key), offset, byte_size, mapped, length, data_offset));
}

SharedMemoryRegion::SharedMemoryRegion(std::string name, std::string key, uint64_t offset,
                                       uint64_t byte_size, void* mapped, size_t mapped_length,
                                       size_t data_offset)
    : name_(std::move(name)),
      key_(std::move(key)),
      offset_(offset),
      byte_size_(byte_size),
      mapping_(mapped, mapped_length),
      data_(mapping_.address() + data_offset) {}

SharedMemoryRegion::Mapping::~Mapping() { ::munmap(address_, length_); }

absl::Status SharedMemoryRegion::LockPages() {
  absl::StatusOr<std::unique_ptr<PageLockedRange>> lock = PageLockRange(data_, byte_size_);
  if (!lock.ok()) return lock.status();
  page_lock_ = *std::move(lock);
  return absl::OkStatus();
}

}  // namespace fuseserve
