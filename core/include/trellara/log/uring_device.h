// uring_device.h — the real LogDevice: POSIX calls for synchronous operations and an io_uring
// ring (liburing) with a registered eventfd for queued appends and fdatasync.
//
// Never blocks in io_uring_wait_cqe unless WaitForCompletion is called; a Postgres backend
// waits on completion_event_fd() with its latch instead.
#pragma once

#include <memory>

#include "trellara/log/device.h"

namespace trellara::log {

// Creates the real device with a ring of `queue_entries` submission entries.
Result<std::unique_ptr<LogDevice>> OpenUringDevice(unsigned queue_entries = 256);

}  // namespace trellara::log
