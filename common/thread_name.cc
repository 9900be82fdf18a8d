#include "common/thread_name.h"

#include <pthread.h>

#include <string>

namespace fuseserve {

void NameCurrentThread(std::string_view name) {
  constexpr size_t kMaxLength = 15;  // plus the terminating NUL: Linux's 16
  const std::string truncated(name.substr(0, kMaxLength));
#if defined(__linux__)
  pthread_setname_np(pthread_self(), truncated.c_str());
#endif
}

}  // namespace fuseserve
