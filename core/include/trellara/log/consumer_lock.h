// consumer_lock.h — one process per consumer of a log directory (DESIGN §6: "only one applier per
// flow at a time: a target advisory lock plus a lock in the log directory").
//
// The lock is flock(LOCK_EX | LOCK_NB) on <dir>/consumers/.<name>.lock (names starting with '.'
// are not consumer offsets, so ReadConsumerOffsets ignores the file). The kernel releases it when
// the holder exits in any way, kill -9 included, so there is never a stale lock to clean up. The
// holder writes its pid into the file so that a refused process can name it. The target's
// advisory lock alone does not cover two appliers of one log pointed at different targets: both
// would advance the same consumer offset.
#pragma once

#include <memory>
#include <string>

#include "trellara/base/result.h"

namespace trellara::log {

class ConsumerLock {
 public:
  // Takes the lock of consumer `name` of log directory `dir`, creating consumers/ if needed.
  // Fails when another process (or another open of the file) holds it; the message names the
  // lock file and the holder's pid; `held_by_another` (optional) tells that case apart from a
  // directory that is missing or not writable.
  static Result<std::unique_ptr<ConsumerLock>> Acquire(const std::string& dir, const std::string& name,
                                                       bool* held_by_another = nullptr);
  ~ConsumerLock();
  ConsumerLock(const ConsumerLock&) = delete;
  ConsumerLock& operator=(const ConsumerLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  ConsumerLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

}  // namespace trellara::log
