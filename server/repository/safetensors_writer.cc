#include "server/repository/safetensors_writer.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

// Float data is written as the host holds it; the format is little-endian.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; a big-endian host needs byte swapping");

namespace fuseserve {
namespace {

// JSON text of `value`. Invalid UTF-8 in a name is replaced rather than
// thrown on, so serialization never fails.
std::string JsonText(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::Status ErrnoError(const std::string& action, const std::string& path) {
  const int error = errno;
  return absl::Status(absl::ErrnoToStatusCode(error),
                      absl::StrCat("cannot ", action, " ", path, ": ", std::strerror(error)));
}

absl::Status WriteAll(int fd, const std::string& bytes, const std::string& path) {
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write", path);
    }
    written += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

std::string SerializeSafetensors(const std::vector<NamedF32Tensor>& tensors) {
  std::string header = "{";
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const NamedF32Tensor& tensor = tensors[i];
    const uint64_t end = offset + tensor.data.size() * sizeof(float);
    absl::StrAppend(&header, i == 0 ? "" : ",", JsonText(tensor.name),
                    ":{\"dtype\":\"F32\",\"shape\":", JsonText(tensor.shape), ",\"data_offsets\":[",
                    offset, ",", end, "]}");
    offset = end;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');

  std::string image;
  image.reserve(8 + header.size() + offset);
  const uint64_t header_bytes = header.size();
  for (int i = 0; i < 8; ++i) {
    image.push_back(static_cast<char>((header_bytes >> (8 * i)) & 0xff));
  }
  image += header;
  for (const NamedF32Tensor& tensor : tensors) {
    if (tensor.data.empty()) continue;
    image.append(reinterpret_cast<const char*>(tensor.data.data()),
                 tensor.data.size() * sizeof(float));
  }
  return image;
}

absl::Status WriteSafetensorsFile(const std::string& path,
                                  const std::vector<NamedF32Tensor>& tensors) {
  std::set<std::string> names;
  for (const NamedF32Tensor& tensor : tensors) {
    if (tensor.name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot write ", path, ": a tensor has an empty name"));
    }
    if (!names.insert(tensor.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot write ", path, ": tensor \"", tensor.name, "\" appears twice"));
    }
    const absl::StatusOr<int64_t> num_elements = CheckedNumElements(tensor.shape);
    if (!num_elements.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot write ", path, ": tensor \"",
                                                     tensor.name,
                                                     "\": ", num_elements.status().message()));
    }
    if (static_cast<uint64_t>(*num_elements) != tensor.data.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot write ", path, ": tensor \"", tensor.name, "\" has shape ",
                       ShapeToString(tensor.shape), " (", *num_elements, " values) but ",
                       tensor.data.size(), " values of data"));
    }
  }
  const std::string image = SerializeSafetensors(tensors);

  std::string temp_path = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(temp_path.data());
  if (fd < 0) return ErrnoError("create a temporary file for", path);
  // mkstemp creates the file 0600; weights are meant to be world-readable
  // like any file a user copies into the repository.
  absl::Status status =
      ::fchmod(fd, 0644) == 0 ? absl::OkStatus() : ErrnoError("set permissions of", temp_path);
  if (status.ok()) status = WriteAll(fd, image, temp_path);
  if (status.ok() && ::fsync(fd) != 0) status = ErrnoError("flush", temp_path);
  if (::close(fd) != 0 && status.ok()) status = ErrnoError("close", temp_path);
  if (status.ok() && std::rename(temp_path.c_str(), path.c_str()) != 0) {
    status = ErrnoError(absl::StrCat("rename ", temp_path, " to"), path);
  }
  if (!status.ok()) ::unlink(temp_path.c_str());
  return status;
}

}  // namespace fuseserve
