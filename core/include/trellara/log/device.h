// device.h — the small I/O interface under the local log, so the same writer, reader and
// recovery code runs on the real disk (io_uring, uring_device.h) and on the simulated device
// that loses unsynced writes on power loss (simulated_device.h).
//
// The synchronous calls are for rare or small operations (open, read, index entries, truncate,
// rename, directory fsync). Appends and their fdatasync go through the asynchronous queue:
// QueueWrite/QueueSyncData, SubmitQueued, then completions are reaped without blocking
// (ReapCompletions) or after waiting (WaitForCompletion; or poll completion_event_fd()).
// The interface never interprets bytes and never retries on its own: a failed or short operation
// is reported to the caller, which decides (the writer stops acknowledging).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trellara/base/result.h"

namespace trellara::log {

using FileId = int;

struct Completion {
  uint64_t tag = 0;
  int64_t result = 0;  // bytes written for a write, 0 for a sync; negative errno on failure
};

class LogDevice {
 public:
  virtual ~LogDevice() = default;

  // Creates the directory (mode 0700) if absent, fsyncing its parent when it was created.
  virtual Status MakeDirectory(const std::string& path) = 0;
  virtual Result<std::vector<std::string>> ListDirectory(const std::string& path) = 0;
  virtual Result<bool> Exists(const std::string& path) = 0;
  // Opens for reading and writing; `create` makes the file (mode 0600) when absent.
  virtual Result<FileId> OpenFile(const std::string& path, bool create) = 0;
  virtual Result<FileId> OpenFileReadOnly(const std::string& path) = 0;
  virtual void CloseFile(FileId file) = 0;
  virtual Result<uint64_t> FileSize(FileId file) = 0;
  // Reads up to `len` bytes; returns fewer only at end of file.
  virtual Result<size_t> ReadAt(FileId file, uint64_t position, void* buf, size_t len) = 0;
  virtual Status WriteAt(FileId file, uint64_t position, const void* data, size_t len) = 0;
  virtual Status SyncData(FileId file) = 0;
  virtual Status Truncate(FileId file, uint64_t size) = 0;
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  virtual Status Remove(const std::string& path) = 0;
  virtual Status SyncDirectory(const std::string& path) = 0;

  // Advisory exclusive lock on `path` (created if absent), held until UnlockFile. Returns
  // nullopt when another holder has it: exactly one writer per log directory.
  virtual Result<std::optional<FileId>> TryLockFile(const std::string& path) = 0;
  virtual void UnlockFile(FileId lock) = 0;

  // Asynchronous queue. `data` must stay valid until the completion with `tag` is reaped.
  virtual Status QueueWrite(FileId file, uint64_t position, const void* data, size_t len, uint64_t tag) = 0;
  // fdatasync of bytes [position, position + length) (length 0: the whole file). A range keeps
  // the sync from chasing pages that later appends dirty while it runs.
  virtual Status QueueSyncData(FileId file, uint64_t position, uint64_t length, uint64_t tag) = 0;
  virtual Status SubmitQueued() = 0;
  // Appends every available completion to `out` without blocking; returns how many.
  virtual size_t ReapCompletions(std::vector<Completion>& out) = 0;
  // Blocks until at least one completion is available (or none are in flight).
  virtual Status WaitForCompletion() = 0;
  // An eventfd that becomes readable when completions are available; -1 if the device has none.
  virtual int completion_event_fd() const = 0;
  // The most operations that may be queued and in flight at once.
  virtual size_t in_flight_max() const = 0;
};

// Joins a directory and a file name.
inline std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

}  // namespace trellara::log
