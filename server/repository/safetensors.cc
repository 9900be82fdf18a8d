#include "server/repository/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

// Tensor data is little-endian in the file and handed out without conversion.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; a big-endian host needs byte swapping");

namespace fuseserve {
namespace {

// The length prefix that precedes the JSON header.
constexpr size_t kLengthPrefixBytes = 8;

// Larger headers are rejected before parsing: a state_dict header is a few
// hundred bytes per tensor, so 100 MiB only bounds memory for hostile files.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// How many tensor names a NotFound message lists before eliding the rest.
constexpr size_t kMaxListedNames = 20;

// Element size in bytes of each whole-byte dtype the safetensors format
// defines; 0 when `dtype` is not one of them.
size_t DtypeSize(const std::string& dtype) {
  static const auto* const kSizes = new std::map<std::string, size_t>{
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
      {"F32", 4},  {"I64", 8}, {"U64", 8}, {"F64", 8},     {"C64", 8}};
  auto it = kSizes->find(dtype);
  return it == kSizes->end() ? 0 : it->second;
}

std::string KnownDtypes() {
  return "BOOL, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, I16, U16, F16, BF16, I32, U32, F32, I64, "
         "U64, F64, C64";
}

// The non-negative JSON integer `value` as an int64; false when it is not
// one (negative, fractional, not a number, or past INT64_MAX).
bool AsNonNegativeInt(const nlohmann::json& value, int64_t* out) {
  if (!value.is_number_unsigned()) return false;
  const uint64_t v = value.get<uint64_t>();
  if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

// nlohmann's what() starts with "[json.exception.parse_error.101] ", which
// says nothing to a user.
std::string JsonErrorText(const std::exception& e) {
  std::string text = e.what();
  const size_t prefix_end = text.find("] ");
  if (!text.empty() && text[0] == '[' && prefix_end != std::string::npos) {
    text = text.substr(prefix_end + 2);
  }
  return text;
}

// A tensor's data region, relative to the start of the data section.
struct Region {
  int64_t begin;
  int64_t end;
  const std::string* name;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    return absl::Status(
        absl::ErrnoToStatusCode(error),
        absl::StrCat("cannot open safetensors file ", path, ": ", std::strerror(error)));
  }
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    return absl::Status(
        absl::ErrnoToStatusCode(error),
        absl::StrCat("cannot stat safetensors file ", path, ": ", std::strerror(error)));
  }
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    return file->Invalid("not a regular file");
  }
  file->size_ = static_cast<size_t>(info.st_size);
  if (file->size_ < kLengthPrefixBytes) {
    ::close(fd);
    return file->Invalid(
        absl::StrCat("file is ", file->size_, " bytes, shorter than the 8-byte header length"));
  }
  void* mapping = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_error = errno;
  // The mapping keeps its own reference to the file.
  ::close(fd);
  if (mapping == MAP_FAILED) {
    return absl::Status(
        absl::ErrnoToStatusCode(map_error),
        absl::StrCat("cannot map safetensors file ", path, ": ", std::strerror(map_error)));
  }
  file->mapping_ = mapping;
  file->base_ = static_cast<const std::byte*>(mapping);
  RETURN_IF_ERROR(file->Parse());
  return file;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBytes(
    std::string bytes, const std::string& display_name) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = display_name;
  file->owned_ = std::move(bytes);
  file->base_ = reinterpret_cast<const std::byte*>(file->owned_.data());
  file->size_ = file->owned_.size();
  RETURN_IF_ERROR(file->Parse());
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, size_);
}

absl::Status SafetensorsFile::Invalid(const std::string& problem) const {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid safetensors file ", path_, ": ", problem));
}

absl::Status SafetensorsFile::Parse() {
  if (size_ < kLengthPrefixBytes) {
    return Invalid(
        absl::StrCat("file is ", size_, " bytes, shorter than the 8-byte header length"));
  }
  uint64_t header_bytes = 0;
  for (size_t i = 0; i < kLengthPrefixBytes; ++i) {
    header_bytes |= static_cast<uint64_t>(base_[i]) << (8 * i);
  }
  const uint64_t available = size_ - kLengthPrefixBytes;
  if (header_bytes > available) {
    return Invalid(absl::StrCat("header length ", header_bytes, " exceeds the ", available,
                                " bytes that follow the length field (truncated file?)"));
  }
  if (header_bytes > kMaxHeaderBytes) {
    return Invalid(absl::StrCat("header length ", header_bytes, " exceeds the limit of ",
                                kMaxHeaderBytes, " bytes"));
  }
  const char* header_begin = reinterpret_cast<const char*>(base_ + kLengthPrefixBytes);
  const char* header_end = header_begin + header_bytes;

  // nlohmann keeps the last of repeated keys silently; a repeated tensor name
  // makes the file ambiguous, so the parse callback records it.
  std::set<std::string> seen_names;
  std::string repeated_name;
  const nlohmann::json::parser_callback_t record_repeats =
      [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        if (depth == 1 && event == nlohmann::json::parse_event_t::key &&
            !seen_names.insert(parsed.get<std::string>()).second && repeated_name.empty()) {
          repeated_name = parsed.get<std::string>();
        }
        return true;
      };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_begin, header_end, record_repeats);
  } catch (const nlohmann::json::exception& e) {
    return Invalid(absl::StrCat("header is not valid JSON: ", JsonErrorText(e)));
  }
  if (!header.is_object()) {
    return Invalid(absl::StrCat("header is a JSON ", header.type_name(), ", expected an object"));
  }
  if (!repeated_name.empty()) {
    return Invalid(absl::StrCat("header lists \"", repeated_name, "\" more than once"));
  }

  const std::byte* data_begin = base_ + kLengthPrefixBytes + header_bytes;
  const uint64_t data_bytes = available - header_bytes;
  std::vector<Region> regions;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) {
        return Invalid(absl::StrCat("\"__metadata__\" is a JSON ", entry.type_name(),
                                    ", expected an object of strings"));
      }
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          return Invalid(absl::StrCat("\"__metadata__\" value of \"", key, "\" is a JSON ",
                                      value.type_name(), ", expected a string"));
        }
      }
      continue;
    }
    const std::string where = absl::StrCat("tensor \"", name, "\"");
    if (!entry.is_object()) {
      return Invalid(absl::StrCat(where, " is a JSON ", entry.type_name(),
                                  ", expected an object with dtype, shape and data_offsets"));
    }

    SafetensorsTensor tensor;
    tensor.name = name;
    const auto dtype = entry.find("dtype");
    if (dtype == entry.end() || !dtype->is_string()) {
      return Invalid(absl::StrCat(where, " has no string \"dtype\""));
    }
    tensor.dtype = dtype->get<std::string>();
    const size_t element_bytes = DtypeSize(tensor.dtype);
    if (element_bytes == 0) {
      return Invalid(absl::StrCat(where, " has unknown dtype \"", tensor.dtype,
                                  "\" (known: ", KnownDtypes(), ")"));
    }

    const auto shape = entry.find("shape");
    if (shape == entry.end() || !shape->is_array()) {
      return Invalid(absl::StrCat(where, " has no \"shape\" array"));
    }
    for (const nlohmann::json& dim : *shape) {
      int64_t value = 0;
      if (!AsNonNegativeInt(dim, &value)) {
        return Invalid(absl::StrCat(where, " has shape ", shape->dump(),
                                    "; dimensions must be non-negative integers"));
      }
      tensor.shape.push_back(value);
    }
    const absl::StatusOr<int64_t> num_elements = CheckedNumElements(tensor.shape);
    if (!num_elements.ok() ||
        *num_elements > std::numeric_limits<int64_t>::max() / static_cast<int64_t>(element_bytes)) {
      return Invalid(absl::StrCat(where, " has shape ", ShapeToString(tensor.shape),
                                  " whose byte size overflows"));
    }
    const int64_t expected_bytes = *num_elements * static_cast<int64_t>(element_bytes);

    const auto offsets = entry.find("data_offsets");
    Region region{0, 0, &tensor.name};
    if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2 ||
        !AsNonNegativeInt((*offsets)[0], &region.begin) ||
        !AsNonNegativeInt((*offsets)[1], &region.end)) {
      return Invalid(absl::StrCat(where,
                                  " needs \"data_offsets\" [begin, end] of two non-negative "
                                  "integers, got ",
                                  offsets == entry.end() ? "nothing" : offsets->dump()));
    }
    if (region.end < region.begin) {
      return Invalid(absl::StrCat(where, " has data_offsets [", region.begin, ", ", region.end,
                                  "] with end before begin"));
    }
    if (static_cast<uint64_t>(region.end) > data_bytes) {
      return Invalid(absl::StrCat(where, " has data_offsets [", region.begin, ", ", region.end,
                                  "] past the end of the data section (", data_bytes,
                                  " bytes; truncated file?)"));
    }
    if (region.end - region.begin != expected_bytes) {
      return Invalid(absl::StrCat(where, " has data_offsets [", region.begin, ", ", region.end,
                                  "] spanning ", region.end - region.begin, " bytes, but ",
                                  tensor.dtype, " ", ShapeToString(tensor.shape), " needs ",
                                  expected_bytes, " bytes"));
    }
    tensor.data = data_begin + region.begin;
    tensor.byte_size = static_cast<size_t>(expected_bytes);
    auto inserted = tensors_.emplace(name, std::move(tensor));
    region.name = &inserted.first->first;
    regions.push_back(region);
  }

  // Empty regions hold no bytes, so they cannot overlap anything.
  regions.erase(std::remove_if(regions.begin(), regions.end(),
                               [](const Region& r) { return r.begin == r.end; }),
                regions.end());
  std::sort(regions.begin(), regions.end(), [](const Region& a, const Region& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  for (size_t i = 1; i < regions.size(); ++i) {
    const Region& previous = regions[i - 1];
    const Region& current = regions[i];
    if (current.begin < previous.end) {
      return Invalid(absl::StrCat("tensors \"", *previous.name, "\" [", previous.begin, ", ",
                                  previous.end, ") and \"", *current.name, "\" [", current.begin,
                                  ", ", current.end, ") overlap"));
    }
  }
  AlignTensorData();
  return absl::OkStatus();
}

void SafetensorsFile::AlignTensorData() {
  for (auto& [name, tensor] : tensors_) {
    const uintptr_t alignment = DtypeSize(tensor.dtype);
    if (reinterpret_cast<uintptr_t>(tensor.data) % alignment == 0) continue;
    // operator new[] aligns to __STDCPP_DEFAULT_NEW_ALIGNMENT__ (>= 8), which
    // covers every element size above.
    auto copy = std::make_unique<std::byte[]>(tensor.byte_size);
    std::memcpy(copy.get(), tensor.data, tensor.byte_size);
    tensor.data = copy.get();
    aligned_copies_.push_back(std::move(copy));
  }
}

absl::StatusOr<const float*> SafetensorsFile::GetF32(const std::string& name,
                                                     const Shape& expected_shape,
                                                     const std::string& what) const {
  const std::string expected =
      absl::StrCat("F32 ", ShapeToString(expected_shape), what.empty() ? "" : " (", what,
                   what.empty() ? "" : ")");
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    std::vector<std::string> names;
    for (const auto& entry : tensors_) {
      if (names.size() == kMaxListedNames) {
        names.push_back(absl::StrCat("... (", tensors_.size() - kMaxListedNames, " more)"));
        break;
      }
      names.push_back(entry.first);
    }
    return absl::NotFoundError(absl::StrCat(
        "tensor \"", name, "\" not found in ", path_, "; expected ", expected,
        names.empty() ? "; the file holds no tensors"
                      : absl::StrCat("; the file holds: ", absl::StrJoin(names, ", "))));
  }
  const SafetensorsTensor& tensor = it->second;
  if (tensor.dtype != "F32") {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor \"", name, "\" in ", path_, " has dtype ", tensor.dtype, ", expected ", expected));
  }
  if (tensor.shape != expected_shape) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor \"", name, "\" in ", path_, " has shape ", ShapeToString(tensor.shape),
                     ", expected ", ShapeToString(expected_shape), what.empty() ? "" : " (", what,
                     what.empty() ? "" : ")"));
  }
  return reinterpret_cast<const float*>(tensor.data);
}

}  // namespace fuseserve
