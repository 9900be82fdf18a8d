#pragma once

// Names the calling thread (what top -H, /proc/PID/task/TID/comm, gdb and
// bench/cpu_split.py show), so that a profile of the server tells its
// threads apart: instance workers, the batch reaper, the CPU kernel pool,
// the accept loop. Linux keeps 15 characters; a longer name is cut there.
// Best effort: a platform without thread names ignores it.

#include <string_view>

namespace fuseserve {

void NameCurrentThread(std::string_view name);

}  // namespace fuseserve
