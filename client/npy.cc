#include "client/npy.h"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace fuseserve::client {
namespace {

// The data section is copied byte for byte into floats.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "npy.cc assumes a little-endian host");

constexpr absl::string_view kMagic = "\x93NUMPY";
// NumPy pads the header so that the data starts at a multiple of this.
constexpr size_t kArrayAlign = 64;

absl::Status Invalid(absl::string_view name, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": ", what));
}

// "x.npy has dtype ...": for a well-formed file fuseserve cannot use.
absl::Status Rejected(absl::string_view name, absl::string_view predicate) {
  return absl::InvalidArgumentError(absl::StrCat(name, " ", predicate));
}

// "(2, 3)", "(5,)", "()" as Python writes tuples.
std::string PythonTuple(const Shape& shape) {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

// One value of the header dictionary. `descr` of a structured array is a
// list; only its presence matters (it is rejected), so it is kept as text.
struct HeaderValue {
  enum class Kind { kString, kBool, kTuple, kList };
  Kind kind = Kind::kString;
  std::string text;
  bool boolean = false;
  Shape dims;
};

// A recursive-descent reader for the Python literal NumPy writes as the
// header: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }.
class HeaderParser {
 public:
  HeaderParser(absl::string_view text, absl::string_view name) : text_(text), name_(name) {}

  absl::StatusOr<std::map<std::string, HeaderValue>> ParseDict() {
    std::map<std::string, HeaderValue> dict;
    SkipSpace();
    if (!Consume('{')) return Error("the header is not a Python dict");
    while (true) {
      SkipSpace();
      if (Consume('}')) break;
      ASSIGN_OR_RETURN(std::string key, ParseString());
      SkipSpace();
      if (!Consume(':')) return Error(absl::StrCat("expected ':' after '", key, "'"));
      SkipSpace();
      ASSIGN_OR_RETURN(HeaderValue value, ParseValue());
      if (!dict.emplace(key, std::move(value)).second) {
        return Error(absl::StrCat("key '", key, "' appears twice"));
      }
      SkipSpace();
      if (Consume(',')) continue;
      if (Consume('}')) break;
      return Error("expected ',' or '}'");
    }
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected text after the dict");
    return dict;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return Invalid(name_, absl::StrCat("malformed .npy header (", what, " at offset ", pos_,
                                       " of \"", absl::CEscape(text_), "\")"));
  }

  void SkipSpace() {
    while (pos_ < text_.size() && absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }

  bool Consume(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  bool ConsumeWord(absl::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  absl::StatusOr<std::string> ParseString() {
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) {
      return Error("expected a quoted string");
    }
    const char quote = text_[pos_++];
    const size_t end = text_.find(quote, pos_);
    if (end == absl::string_view::npos) return Error("unterminated string");
    std::string value(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return value;
  }

  absl::StatusOr<HeaderValue> ParseValue() {
    HeaderValue value;
    if (pos_ < text_.size() && (text_[pos_] == '\'' || text_[pos_] == '"')) {
      ASSIGN_OR_RETURN(value.text, ParseString());
      return value;
    }
    if (ConsumeWord("True")) {
      value.kind = HeaderValue::Kind::kBool;
      value.boolean = true;
      return value;
    }
    if (ConsumeWord("False")) {
      value.kind = HeaderValue::Kind::kBool;
      return value;
    }
    if (Consume('(')) return ParseTupleRest();
    if (pos_ < text_.size() && text_[pos_] == '[') return SkipList();
    return Error("expected a string, True, False, a tuple or a list");
  }

  // After '(': non-negative integers separated by commas, optional trailing
  // comma, then ')'.
  absl::StatusOr<HeaderValue> ParseTupleRest() {
    HeaderValue value;
    value.kind = HeaderValue::Kind::kTuple;
    while (true) {
      SkipSpace();
      if (Consume(')')) return value;
      const size_t start = pos_;
      while (pos_ < text_.size() && absl::ascii_isdigit(static_cast<unsigned char>(text_[pos_]))) {
        ++pos_;
      }
      int64_t dim = 0;
      if (pos_ == start || !absl::SimpleAtoi(text_.substr(start, pos_ - start), &dim)) {
        return Error("expected a non-negative integer dimension");
      }
      value.dims.push_back(dim);
      SkipSpace();
      if (Consume(',')) continue;
      if (Consume(')')) return value;
      return Error("expected ',' or ')' in the shape");
    }
  }

  // A list (the descr of a structured dtype), kept as text.
  absl::StatusOr<HeaderValue> SkipList() {
    HeaderValue value;
    value.kind = HeaderValue::Kind::kList;
    const size_t start = pos_;
    int depth = 0;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '\'' || c == '"') {
        RETURN_IF_ERROR(ParseString().status());
        continue;
      }
      ++pos_;
      if (c == '[' || c == '(') ++depth;
      if ((c == ']' || c == ')') && --depth == 0) {
        value.text = std::string(text_.substr(start, pos_ - start));
        return value;
      }
    }
    return Error("unterminated list");
  }

  absl::string_view text_;
  absl::string_view name_;
  size_t pos_ = 0;
};

// A readable name for a NumPy dtype string such as '<f8' ("float64"), or an
// empty string when it is not a simple dtype.
std::string DtypeName(absl::string_view descr) {
  if (descr.size() < 2) return "";
  const char order = descr[0];
  const char kind = descr[1];
  // Item sizes of NumPy's simple dtypes are 1 to 16 bytes; anything else
  // (including sizes whose bit count would overflow) is not a simple dtype.
  int64_t size = 0;
  if (!absl::SimpleAtoi(descr.substr(2), &size) || size < 1 || size > 16) return "";
  std::string name;
  switch (kind) {
    case 'f':
      name = absl::StrCat("float", size * 8);
      break;
    case 'i':
      name = absl::StrCat("int", size * 8);
      break;
    case 'u':
      name = absl::StrCat("uint", size * 8);
      break;
    case 'c':
      name = absl::StrCat("complex", size * 8);
      break;
    case 'b':
      name = "bool";
      break;
    case 'U':
      name = "unicode string";
      break;
    case 'S':
      name = "byte string";
      break;
    case 'O':
      name = "Python object";
      break;
    default:
      return "";
  }
  return order == '>' ? absl::StrCat("big-endian ", name) : name;
}

}  // namespace

absl::StatusOr<NpyArray> ParseNpy(absl::string_view bytes, absl::string_view name) {
  if (bytes.size() < kMagic.size() + 2 || bytes.substr(0, kMagic.size()) != kMagic) {
    return Invalid(name, "not a NumPy .npy file (it does not start with \"\\x93NUMPY\")");
  }
  const int major = static_cast<uint8_t>(bytes[6]);
  const int minor = static_cast<uint8_t>(bytes[7]);
  if (major < 1 || major > 3 || minor != 0) {
    return Invalid(name, absl::StrCat("unsupported .npy format version ", major, ".", minor,
                                      " (supported: 1.0, 2.0, 3.0)"));
  }
  // 1.0 stores the header length in 2 bytes, 2.0 and 3.0 in 4 (little-endian).
  const size_t length_bytes = major == 1 ? 2 : 4;
  const size_t header_start = 8 + length_bytes;
  if (bytes.size() < header_start) return Invalid(name, "truncated .npy preamble");
  size_t header_length = 0;
  for (size_t i = 0; i < length_bytes; ++i) {
    header_length |= size_t{static_cast<uint8_t>(bytes[8 + i])} << (8 * i);
  }
  if (bytes.size() - header_start < header_length) {
    return Invalid(name, absl::StrCat("truncated .npy header (it claims ", header_length,
                                      " bytes, the file has ", bytes.size() - header_start,
                                      " after the preamble)"));
  }
  HeaderParser parser(bytes.substr(header_start, header_length), name);
  ASSIGN_OR_RETURN(auto dict, parser.ParseDict());
  for (const char* key : {"descr", "fortran_order", "shape"}) {
    if (dict.count(key) == 0) {
      return Invalid(name, absl::StrCat("malformed .npy header: no '", key, "' key"));
    }
  }
  if (dict.size() != 3) {
    return Invalid(name,
                   "malformed .npy header: keys other than 'descr', 'fortran_order' and "
                   "'shape'");
  }
  const HeaderValue& descr = dict.at("descr");
  const HeaderValue& fortran_order = dict.at("fortran_order");
  const HeaderValue& shape = dict.at("shape");
  if (descr.kind == HeaderValue::Kind::kList) {
    return Rejected(name, absl::StrCat("has a structured dtype ", descr.text,
                                       "; fuseserve-cli needs float32 ('<f4')"));
  }
  if (descr.kind != HeaderValue::Kind::kString) {
    return Invalid(name, "malformed .npy header: 'descr' is not a string");
  }
  if (descr.text != "<f4") {
    const std::string dtype = DtypeName(descr.text);
    const std::string described = dtype.empty() ? absl::StrCat("'", descr.text, "'")
                                                : absl::StrCat("'", descr.text, "' (", dtype, ")");
    const bool big_endian_f4 = descr.text == ">f4";
    return Rejected(name, absl::StrCat("has dtype ", described, "; fuseserve-cli needs ",
                                       big_endian_f4 ? "little-endian " : "", "float32 ('<f4')"));
  }
  if (fortran_order.kind != HeaderValue::Kind::kBool) {
    return Invalid(name, "malformed .npy header: 'fortran_order' is not True or False");
  }
  if (shape.kind != HeaderValue::Kind::kTuple) {
    return Invalid(name, "malformed .npy header: 'shape' is not a tuple");
  }
  // With fewer than two dimensions both orders are the same bytes.
  if (fortran_order.boolean && shape.dims.size() > 1) {
    return Rejected(name,
                    "is in Fortran (column-major) order; fuseserve-cli needs C order: "
                    "save np.ascontiguousarray(x)");
  }
  const absl::StatusOr<int64_t> checked_count = CheckedNumElements(shape.dims);
  if (!checked_count.ok()) return Invalid(name, checked_count.status().message());
  const int64_t count = *checked_count;
  const size_t data_start = header_start + header_length;
  const size_t available = bytes.size() - data_start;
  if (static_cast<uint64_t>(count) > available / sizeof(float) ||
      available != static_cast<size_t>(count) * sizeof(float)) {
    const bool short_data = static_cast<uint64_t>(count) > available / sizeof(float);
    return Rejected(name, absl::StrCat(short_data ? "is truncated" : "has trailing bytes",
                                       ": shape ", PythonTuple(shape.dims), " of float32 needs ",
                                       count, " x 4 bytes of data, the file holds ", available));
  }
  NpyArray array;
  array.shape = shape.dims;
  array.data.resize(count);
  if (count > 0) std::memcpy(array.data.data(), bytes.data() + data_start, available);
  return array;
}

absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  // A directory opens, but reading it fails (EISDIR).
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(path, error);
  if (error || !std::filesystem::is_regular_file(path, error)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  // istream::read reports a failed read through the stream state; reading
  // through istreambuf_iterator lets libstdc++ throw instead.
  std::string bytes(size, '\0');
  if (!in.read(bytes.data(), static_cast<std::streamsize>(size)) ||
      in.peek() != std::ifstream::traits_type::eof()) {
    return absl::DataLossError(absl::StrCat("error reading ", path, " (did it change?)"));
  }
  return ParseNpy(bytes, path);
}

absl::StatusOr<std::string> SerializeNpy(const Shape& shape, absl::Span<const float> data) {
  ASSIGN_OR_RETURN(const int64_t count, CheckedNumElements(shape));
  if (static_cast<size_t>(count) != data.size()) {
    return absl::InvalidArgumentError(absl::StrCat("shape ", ShapeToString(shape), " holds ", count,
                                                   " values, got ", data.size()));
  }
  std::string header =
      absl::StrCat("{'descr': '<f4', 'fortran_order': False, 'shape': ", PythonTuple(shape), ", }");
  // 1.0 when the padded header fits its 16-bit length field, else 2.0.
  size_t preamble = 10;
  if (header.size() + 1 + kArrayAlign > 0xffff) preamble = 12;
  const size_t unpadded = preamble + header.size() + 1;  // +1: the final '\n'
  header.append((kArrayAlign - unpadded % kArrayAlign) % kArrayAlign, ' ');
  header.push_back('\n');
  std::string bytes(kMagic);
  bytes.push_back(static_cast<char>(preamble == 10 ? 1 : 2));
  bytes.push_back(0);
  for (size_t i = 0; i < preamble - 8; ++i) {
    bytes.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  }
  bytes += header;
  bytes.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
  return bytes;
}

absl::Status WriteNpyFile(const std::string& path, const Shape& shape,
                          absl::Span<const float> data) {
  ASSIGN_OR_RETURN(const std::string bytes, SerializeNpy(shape, data));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("error writing ", path));
  return absl::OkStatus();
}

}  // namespace fuseserve::client
