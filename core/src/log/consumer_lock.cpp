// consumer_lock.cpp — see consumer_lock.h.
#include "trellara/log/consumer_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "trellara/log/consumer_offsets.h"

namespace trellara::log {

Result<std::unique_ptr<ConsumerLock>> ConsumerLock::Acquire(const std::string& dir, const std::string& name,
                                                             bool* held_by_another) {
  if (held_by_another != nullptr) *held_by_another = false;
  TRELLARA_TRY(ValidateConsumerName(name));
  const std::string consumers = dir + "/consumers";
  if (::mkdir(consumers.c_str(), 0700) != 0 && errno != EEXIST)
    return MakeError("cannot create " + consumers + ": " + std::strerror(errno) +
                     "; the consumer needs write access to the flow's log directory");
  const std::string path = consumers + "/." + name + ".lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0)
    return MakeError("cannot open the consumer lock " + path + ": " + std::strerror(errno) +
                     "; the consumer needs write access to the flow's log directory");
  // Run as root, the lock file belongs to the log directory's owner (postgres) like every other
  // file there, so trellara.unregister_consumer() in the server can take it.
  struct stat dir_stat;
  if (::geteuid() == 0 && ::stat(consumers.c_str(), &dir_stat) == 0 &&
      ::fchown(fd, dir_stat.st_uid, dir_stat.st_gid) != 0) {
    const int err = errno;
    ::close(fd);
    return MakeError("cannot give the consumer lock " + path + " to the log directory's owner: " + std::strerror(err));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[32] = {};
    const ssize_t n = ::pread(fd, holder, sizeof holder - 1, 0);
    ::close(fd);
    std::string pid = n > 0 ? std::string(holder, static_cast<size_t>(n)) : std::string();
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    if (err == EWOULDBLOCK) {
      if (held_by_another != nullptr) *held_by_another = true;
      return MakeError("consumer " + name + " of " + dir + " is held by another process" +
                       (pid.empty() ? std::string() : " (pid " + pid + ")") + " through " + path);
    }
    return MakeError("cannot lock " + path + ": " + std::strerror(err));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    const int err = errno;
    ::close(fd);
    return MakeError("cannot record the holder in " + path + ": " + std::strerror(err));
  }
  return std::unique_ptr<ConsumerLock>(new ConsumerLock(fd, path));
}

ConsumerLock::~ConsumerLock() { ::close(fd_); }  // closing the last descriptor releases the lock

}  // namespace trellara::log
