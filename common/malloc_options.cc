#include "common/malloc_options.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace fuseserve {
namespace {

struct OptionNames {
  int mallopt_param;
  const char* variable;  // glibc's MALLOC_*_ environment variable
  const char* tunable;   // its GLIBC_TUNABLES name
};

OptionNames NamesOf(MallocOption option) {
  switch (option) {
    case MallocOption::kMmapThreshold:
      return {M_MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_", "glibc.malloc.mmap_threshold"};
    case MallocOption::kTrimThreshold:
      return {M_TRIM_THRESHOLD, "MALLOC_TRIM_THRESHOLD_", "glibc.malloc.trim_threshold"};
  }
  return {0, "", ""};
}

// Whether GLIBC_TUNABLES (NAME=VALUE entries separated by ':') names `tunable`.
bool TunablesSet(const char* tunable) {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables == nullptr) return false;
  const size_t length = std::strlen(tunable);
  for (const char* entry = tunables; *entry != '\0';) {
    if (std::strncmp(entry, tunable, length) == 0 && entry[length] == '=') return true;
    const char* next = std::strchr(entry, ':');
    if (next == nullptr) break;
    entry = next + 1;
  }
  return false;
}

}  // namespace

bool SetMallocOptionUnlessConfigured(MallocOption option, int bytes) {
  const OptionNames names = NamesOf(option);
  if (std::getenv(names.variable) != nullptr || TunablesSet(names.tunable)) return false;
  return mallopt(names.mallopt_param, bytes) == 1;
}

}  // namespace fuseserve
