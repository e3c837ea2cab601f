// kit/log_watch.cpp — see log_watch.h.
#include "kit/log_watch.h"

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

namespace trellara::cli {

std::unique_ptr<LogDirWatch> LogDirWatch::OpenOrWarn(const std::string& dir, const std::string& line_prefix) {
  std::string why;
  auto watch = Open(dir, why);
  if (!watch)
    std::cerr << line_prefix << " event=log_watch_unavailable detail=\"" << why << "\" (the log is polled instead)"
              << std::endl;
  return watch;
}

std::unique_ptr<LogDirWatch> LogDirWatch::Open(const std::string& dir, std::string& why) {
  const int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) {
    why = std::string("inotify_init1: ") + std::strerror(errno);
    return nullptr;
  }
  if (inotify_add_watch(fd, dir.c_str(), IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE) < 0) {
    why = "inotify_add_watch " + dir + ": " + std::strerror(errno);
    close(fd);
    return nullptr;
  }
  return std::unique_ptr<LogDirWatch>(new LogDirWatch(fd));
}

LogDirWatch::~LogDirWatch() { close(fd_); }

bool LogDirWatch::Wait(std::chrono::milliseconds timeout) {
  pollfd p{fd_, POLLIN, 0};
  const int ready = poll(&p, 1, static_cast<int>(timeout.count()));
  if (ready <= 0) return false;  // timeout, or EINTR (a stop signal: the caller checks it)
  // Drain: one wake per batch of writes, not one per queued event.
  alignas(inotify_event) char buffer[4096];
  while (read(fd_, buffer, sizeof buffer) > 0) {
  }
  return true;
}

}  // namespace trellara::cli
