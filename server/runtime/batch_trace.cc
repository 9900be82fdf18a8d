#include "server/runtime/batch_trace.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace fuseserve {
namespace {

// `text` as a JSON string literal (instance names are ours, but quotes and
// backslashes would still break the file).
std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<int>(c));
      continue;
    }
    out.push_back(c);
  }
  return out + "\"";
}

}  // namespace

absl::StatusOr<std::unique_ptr<BatchTraceWriter>> BatchTraceWriter::Open(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write the batch trace to ", path, ": ", std::strerror(errno)));
  }
  std::fputs("[\n", file);
  return std::unique_ptr<BatchTraceWriter>(new BatchTraceWriter(file, absl::Now()));
}

BatchTraceWriter::~BatchTraceWriter() {
  std::fputs("\n]\n", file_);
  std::fclose(file_);
}

void BatchTraceWriter::WriteEvent(const std::string& json) {
  if (!first_) std::fputs(",\n", file_);
  first_ = false;
  std::fputs(json.c_str(), file_);
}

void BatchTraceWriter::Record(const BatchTrace& batch) {
  const double start_us = absl::ToDoubleMicroseconds(batch.start - origin_);
  const struct {
    const char* name;
    absl::Duration begin, end;
  } phases[] = {{"input", absl::ZeroDuration(), batch.input_end},
                {"compute", batch.input_end, batch.compute_end},
                {"output", batch.compute_end, batch.output_end}};
  absl::MutexLock lock(&mu_);
  if (devices_.insert(batch.device).second) {
    WriteEvent(absl::StrFormat(
        R"({"name": "process_name", "ph": "M", "pid": %d, "args": {"name": "GPU %d"}})",
        batch.device, batch.device));
  }
  const auto [named, added] =
      thread_ids_.emplace(batch.instance, static_cast<int>(thread_ids_.size()));
  const int tid = named->second;
  if (added) {
    WriteEvent(absl::StrFormat(
        R"({"name": "thread_name", "ph": "M", "pid": %d, "tid": %d, "args": {"name": %s}})",
        batch.device, tid, JsonString(batch.instance)));
  }
  for (const auto& phase : phases) {
    WriteEvent(absl::StrFormat(
        R"({"name": "%s", "ph": "X", "pid": %d, "tid": %d, "ts": %.3f, "dur": %.3f, )"
        R"("args": {"batch_size": %d, "requests": %d}})",
        phase.name, batch.device, tid,
        start_us + absl::ToDoubleMicroseconds(phase.begin),
        absl::ToDoubleMicroseconds(phase.end - phase.begin), batch.batch_size, batch.requests));
  }
  std::fflush(file_);
}

}  // namespace fuseserve
