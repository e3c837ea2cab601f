// kit/log_watch.h — wakes an applier at the end of a local log as soon as the relay writes to the
// log directory (Linux inotify), instead of after its poll interval.
//
// A wake is only a hint: the caller reads the log again and finds what is published (index entries
// are written after the fdatasync of their frames, log/reader.h) or nothing. Frame writes, index
// writes, a new segment or a replaced offsets file all wake it; an event that arrives between a read
// and the next Wait() stays queued, so no write is missed. Without a watch (inotify unavailable, or
// its per-user limit reached) the caller keeps polling: correctness never depends on it.
#pragma once

#include <chrono>
#include <memory>
#include <string>

namespace trellara::cli {

class LogDirWatch {
 public:
  // A watch of `dir`, or nullptr with `why` set when inotify refuses (the caller polls instead).
  static std::unique_ptr<LogDirWatch> Open(const std::string& dir, std::string& why);
  // Open, or nullptr after printing `<line_prefix> event=log_watch_unavailable detail="<why>" (the
  // log is polled instead)` on stderr: the one warning every reader of a local log gives.
  static std::unique_ptr<LogDirWatch> OpenOrWarn(const std::string& dir, const std::string& line_prefix);
  ~LogDirWatch();
  LogDirWatch(const LogDirWatch&) = delete;
  LogDirWatch& operator=(const LogDirWatch&) = delete;

  // Waits until something in the directory changed or `timeout` passed; drains the queued events.
  // True when woken by a change.
  bool Wait(std::chrono::milliseconds timeout);

 private:
  explicit LogDirWatch(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace trellara::cli
