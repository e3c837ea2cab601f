// uring_device.cpp — LogDevice on the real file system: POSIX for synchronous calls, io_uring for
// queued writes and fdatasync, with an eventfd registered for completions. Must never hide a
// failed or short operation from the caller and never retry a failed fdatasync (after an
// fdatasync error the page cache state is unknown; the writer has to recover from disk).
#include "trellara/log/uring_device.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace trellara::log {
namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

Error SysError(const std::string& what, const std::string& path, int err) {
  return MakeError(what + " " + path + " failed: " + ErrnoText(err));
}

std::string ParentOf(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

class UringDevice final : public LogDevice {
 public:
  UringDevice() = default;
  ~UringDevice() override {
    if (ring_ready_) {
      // Drain what is in flight: the kernel may still be writing from caller buffers.
      while (in_flight_ > 0) {
        io_uring_cqe* cqe = nullptr;
        if (io_uring_wait_cqe(&ring_, &cqe) != 0) break;
        io_uring_cqe_seen(&ring_, cqe);
        in_flight_ -= 1;
      }
      io_uring_queue_exit(&ring_);
    }
    if (event_fd_ >= 0) ::close(event_fd_);
  }

  Status Init(unsigned queue_entries) {
    int rc = io_uring_queue_init(queue_entries, &ring_, 0);
    if (rc < 0) {
      return MakeError("io_uring_queue_init(" + std::to_string(queue_entries) + ") failed: " +
                       ErrnoText(-rc) + "; the log needs io_uring (Linux 5.6+, not disabled by "
                       "kernel.io_uring_disabled or a seccomp policy)");
    }
    ring_ready_ = true;
    queue_entries_ = queue_entries;
    event_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (event_fd_ < 0) return SysError("eventfd for", "io_uring completions", errno);
    rc = io_uring_register_eventfd(&ring_, event_fd_);
    if (rc < 0) return MakeError("io_uring_register_eventfd failed: " + ErrnoText(-rc));
    return Status::Ok();
  }

  Status MakeDirectory(const std::string& path) override {
    if (::mkdir(path.c_str(), 0700) == 0) {
      if (::geteuid() == 0) {
        const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        Status owned = fd >= 0 ? GiveToDirectoryOwner(fd, path) : SysError("open", path, errno);
        if (fd >= 0) ::close(fd);
        TRELLARA_TRY(owned);
      }
      return SyncDirectory(ParentOf(path));
    }
    if (errno == EEXIST) {
      struct stat st;
      if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return Status::Ok();
      return MakeError(path + " exists and is not a directory; choose another log directory");
    }
    return SysError("mkdir", path, errno);
  }

  // A file or directory that root creates in a log directory (the applier's consumer offset, an
  // index rebuilt by `trellara log inspect --repair-index`, run as root) belongs to the owner of the
  // directory it is in — the postgres OS user — so that the relay can still read and replace it.
  // Files created by the owner itself are unaffected.
  static Status GiveToDirectoryOwner(int fd, const std::string& path) {
    if (::geteuid() != 0) return Status::Ok();
    struct stat parent;
    if (::stat(ParentOf(path).c_str(), &parent) != 0) return SysError("stat", ParentOf(path), errno);
    struct stat self;
    if (::fstat(fd, &self) != 0) return SysError("fstat", path, errno);
    if (self.st_uid == parent.st_uid && self.st_gid == parent.st_gid) return Status::Ok();
    if (::fchown(fd, parent.st_uid, parent.st_gid) != 0) return SysError("chown", path, errno);
    return Status::Ok();
  }

  Result<std::vector<std::string>> ListDirectory(const std::string& path) override {
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) return SysError("opendir", path, errno);
    std::vector<std::string> names;
    while (dirent* entry = ::readdir(dir)) {
      std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(std::move(name));
    }
    ::closedir(dir);
    return names;
  }

  Result<bool> Exists(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0) return true;
    if (errno == ENOENT) return false;
    return SysError("stat", path, errno);
  }

  Result<FileId> OpenFile(const std::string& path, bool create) override {
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
    if (fd < 0) return SysError("open", path, errno);
    if (create) {
      Status owned = GiveToDirectoryOwner(fd, path);
      if (!owned.ok()) {
        ::close(fd);
        return owned.error();
      }
    }
    return fd;
  }

  Result<FileId> OpenFileReadOnly(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return SysError("open (read-only)", path, errno);
    return fd;
  }

  void CloseFile(FileId file) override { ::close(file); }

  Result<uint64_t> FileSize(FileId file) override {
    struct stat st;
    if (::fstat(file, &st) != 0) return SysError("fstat", "fd " + std::to_string(file), errno);
    return static_cast<uint64_t>(st.st_size);
  }

  Result<size_t> ReadAt(FileId file, uint64_t position, void* buf, size_t len) override {
    size_t done = 0;
    while (done < len) {
      ssize_t n = ::pread(file, static_cast<char*>(buf) + done, len - done,
                          static_cast<off_t>(position + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return SysError("pread", "fd " + std::to_string(file), errno);
      }
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    return done;
  }

  Status WriteAt(FileId file, uint64_t position, const void* data, size_t len) override {
    size_t done = 0;
    while (done < len) {
      ssize_t n = ::pwrite(file, static_cast<const char*>(data) + done, len - done,
                           static_cast<off_t>(position + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return SysError("pwrite", "fd " + std::to_string(file), errno);
      }
      done += static_cast<size_t>(n);
    }
    return Status::Ok();
  }

  Status SyncData(FileId file) override {
    if (::fdatasync(file) != 0) return SysError("fdatasync", "fd " + std::to_string(file), errno);
    return Status::Ok();
  }

  Status Truncate(FileId file, uint64_t size) override {
    if (::ftruncate(file, static_cast<off_t>(size)) != 0) {
      return SysError("ftruncate", "fd " + std::to_string(file), errno);
    }
    return Status::Ok();
  }

  Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return SysError("rename to " + to + " of", from, errno);
    return Status::Ok();
  }

  Status Remove(const std::string& path) override {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return SysError("unlink", path, errno);
    return Status::Ok();
  }

  Status SyncDirectory(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return SysError("open directory", path, errno);
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    if (rc != 0) return SysError("fsync directory", path, err);
    return Status::Ok();
  }

  Result<std::optional<FileId>> TryLockFile(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return SysError("open lock file", path, errno);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      int err = errno;
      ::close(fd);
      if (err == EWOULDBLOCK) return std::optional<FileId>();
      return SysError("flock", path, err);
    }
    return std::optional<FileId>(fd);
  }

  void UnlockFile(FileId lock) override { ::close(lock); }

  Status QueueWrite(FileId file, uint64_t position, const void* data, size_t len, uint64_t tag) override {
    io_uring_sqe* sqe = NextSqe();
    if (sqe == nullptr) return MakeError("io_uring submission queue full (" + std::to_string(in_flight_) + " in flight)");
    io_uring_prep_write(sqe, file, data, static_cast<unsigned>(len), position);
    io_uring_sqe_set_data64(sqe, tag);
    in_flight_ += 1;
    return Status::Ok();
  }

  Status QueueSyncData(FileId file, uint64_t position, uint64_t length, uint64_t tag) override {
    io_uring_sqe* sqe = NextSqe();
    if (sqe == nullptr) return MakeError("io_uring submission queue full (" + std::to_string(in_flight_) + " in flight)");
    io_uring_prep_fsync(sqe, file, IORING_FSYNC_DATASYNC);
    if (length > 0 && length <= UINT32_MAX) {
      sqe->off = position;
      sqe->len = static_cast<uint32_t>(length);
    }
    io_uring_sqe_set_data64(sqe, tag);
    in_flight_ += 1;
    return Status::Ok();
  }

  Status SubmitQueued() override {
    for (;;) {
      int rc = io_uring_submit(&ring_);
      if (rc >= 0) return Status::Ok();
      if (rc == -EINTR || rc == -EAGAIN) continue;
      return MakeError("io_uring_submit failed: " + ErrnoText(-rc));
    }
  }

  size_t ReapCompletions(std::vector<Completion>& out) override {
    uint64_t counter = 0;
    ssize_t ignored = ::read(event_fd_, &counter, sizeof counter);  // reset before peeking
    (void)ignored;
    size_t reaped = 0;
    io_uring_cqe* cqe = nullptr;
    while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
      out.push_back(Completion{io_uring_cqe_get_data64(cqe), cqe->res});
      io_uring_cqe_seen(&ring_, cqe);
      in_flight_ -= 1;
      reaped += 1;
    }
    return reaped;
  }

  Status WaitForCompletion() override {
    if (in_flight_ == 0) return Status::Ok();
    io_uring_cqe* cqe = nullptr;
    for (;;) {
      int rc = io_uring_wait_cqe(&ring_, &cqe);  // does not consume the cqe
      if (rc == 0) return Status::Ok();
      if (rc == -EINTR) continue;
      return MakeError("io_uring_wait_cqe failed: " + ErrnoText(-rc));
    }
  }

  int completion_event_fd() const override { return event_fd_; }
  size_t in_flight_max() const override { return queue_entries_; }

 private:
  io_uring_sqe* NextSqe() {
    if (in_flight_ >= queue_entries_) return nullptr;
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {
      if (io_uring_submit(&ring_) < 0) return nullptr;
      sqe = io_uring_get_sqe(&ring_);
    }
    return sqe;
  }

  io_uring ring_{};
  bool ring_ready_ = false;
  unsigned queue_entries_ = 0;
  size_t in_flight_ = 0;
  int event_fd_ = -1;
};

}  // namespace

Result<std::unique_ptr<LogDevice>> OpenUringDevice(unsigned queue_entries) {
  auto device = std::make_unique<UringDevice>();
  TRELLARA_TRY(device->Init(queue_entries));
  return std::unique_ptr<LogDevice>(std::move(device));
}

}  // namespace trellara::log
