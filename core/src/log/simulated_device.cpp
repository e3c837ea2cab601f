// simulated_device.cpp — the power-loss model of simulated_device.h. It must never make a byte
// durable that no sync covered, and never depend on anything but its seed for its choices.
#include "trellara/log/simulated_device.h"

#include <errno.h>

#include <algorithm>
#include <cstring>

namespace trellara::log {

SimulatedDevice::SimulatedDevice(SimulatedDeviceOptions options)
    : options_(options), random_(options.seed) {
  directories_.insert("/");
}

SimulatedDevice::~SimulatedDevice() = default;

std::string SimulatedDevice::Parent(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Result<std::shared_ptr<SimulatedDevice::Inode>> SimulatedDevice::InodeOf(FileId file) {
  auto it = open_files_.find(file);
  if (it == open_files_.end()) return MakeError("simulated device: file id " + std::to_string(file) + " is not open");
  return it->second;
}

void SimulatedDevice::ApplyMutation(Inode& inode, const Mutation& mutation) {
  if (mutation.is_truncate) {
    inode.data.resize(mutation.position);
    return;
  }
  uint64_t end = mutation.position + mutation.bytes.size();
  if (inode.data.size() < end) inode.data.resize(end);
  std::memcpy(inode.data.data() + mutation.position, mutation.bytes.data(), mutation.bytes.size());
}

void SimulatedDevice::SyncInode(Inode& inode) {
  syncs_completed_ += 1;
  if (options_.fsync_is_noop) return;
  if (inode.writeback_failed) {
    for (const Mutation& mutation : inode.unsynced) {
      if (mutation.is_truncate) {
        inode.durable.resize(mutation.position);
        continue;
      }
      const uint64_t end = mutation.position + mutation.bytes.size();
      if (inode.durable.size() < end) inode.durable.resize(end);
      std::memcpy(inode.durable.data() + mutation.position, mutation.bytes.data(), mutation.bytes.size());
    }
  } else {
    inode.durable = inode.data;
  }
  inode.unsynced.clear();
}

void SimulatedDevice::SyncInodeRange(Inode& inode, uint64_t position, uint64_t length) {
  // Only writes wholly inside the range become durable; truncates and writes outside or across
  // its edges stay unsynced (a stricter model than a real file system, which may write more).
  syncs_completed_ += 1;
  if (options_.fsync_is_noop) return;
  const uint64_t end = position + length;
  std::vector<Mutation> kept;
  for (Mutation& mutation : inode.unsynced) {
    const bool inside = !mutation.is_truncate && mutation.position >= position &&
                        mutation.position + mutation.bytes.size() <= end;
    if (!inside) {
      kept.push_back(std::move(mutation));
      continue;
    }
    const uint64_t write_end = mutation.position + mutation.bytes.size();
    if (inode.durable.size() < write_end) inode.durable.resize(write_end);
    std::memcpy(inode.durable.data() + mutation.position, mutation.bytes.data(), mutation.bytes.size());
  }
  inode.unsynced = std::move(kept);
}

Status SimulatedDevice::MakeDirectory(const std::string& path) {
  if (names_.count(path)) return MakeError(path + " exists and is not a directory");
  directories_.insert(path);  // like the real device: the parent is fsynced on creation
  return Status::Ok();
}

Result<std::vector<std::string>> SimulatedDevice::ListDirectory(const std::string& path) {
  if (!directories_.count(path)) return MakeError("opendir " + path + " failed: No such file or directory");
  std::vector<std::string> names;
  for (const auto& [name, inode] : names_) {
    if (Parent(name) == path) names.push_back(name.substr(name.find_last_of('/') + 1));
  }
  for (const auto& dir : directories_) {
    if (dir != path && Parent(dir) == path) names.push_back(dir.substr(dir.find_last_of('/') + 1));
  }
  return names;
}

Result<bool> SimulatedDevice::Exists(const std::string& path) {
  return names_.count(path) > 0 || directories_.count(path) > 0;
}

Result<FileId> SimulatedDevice::OpenFile(const std::string& path, bool create) {
  if (!directories_.count(Parent(path))) return MakeError("open " + path + " failed: No such file or directory");
  auto it = names_.find(path);
  if (it == names_.end()) {
    if (!create) return MakeError("open " + path + " failed: No such file or directory");
    it = names_.emplace(path, std::make_shared<Inode>()).first;
  }
  FileId id = next_file_id_++;
  open_files_[id] = it->second;
  return id;
}

Result<FileId> SimulatedDevice::OpenFileReadOnly(const std::string& path) { return OpenFile(path, false); }

void SimulatedDevice::CloseFile(FileId file) { open_files_.erase(file); }

Result<uint64_t> SimulatedDevice::FileSize(FileId file) {
  auto inode = InodeOf(file);
  if (!inode.ok()) return inode.error();
  return static_cast<uint64_t>((*inode)->data.size());
}

Result<size_t> SimulatedDevice::ReadAt(FileId file, uint64_t position, void* buf, size_t len) {
  auto inode = InodeOf(file);
  if (!inode.ok()) return inode.error();
  const auto& data = (*inode)->data;
  if (position >= data.size()) return size_t{0};
  size_t n = std::min<uint64_t>(len, data.size() - position);
  std::memcpy(buf, data.data() + position, n);
  return n;
}

Status SimulatedDevice::WriteAt(FileId file, uint64_t position, const void* data, size_t len) {
  auto inode = InodeOf(file);
  if (!inode.ok()) return inode.error();
  Mutation mutation;
  mutation.position = position;
  mutation.bytes.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + len);
  ApplyMutation(**inode, mutation);
  (*inode)->unsynced.push_back(std::move(mutation));
  return Status::Ok();
}

Status SimulatedDevice::SyncData(FileId file) {
  auto inode = InodeOf(file);
  if (!inode.ok()) return inode.error();
  SyncInode(**inode);
  return Status::Ok();
}

Status SimulatedDevice::Truncate(FileId file, uint64_t size) {
  auto inode = InodeOf(file);
  if (!inode.ok()) return inode.error();
  Mutation mutation;
  mutation.is_truncate = true;
  mutation.position = size;
  ApplyMutation(**inode, mutation);
  (*inode)->unsynced.push_back(std::move(mutation));
  return Status::Ok();
}

Status SimulatedDevice::Rename(const std::string& from, const std::string& to) {
  auto it = names_.find(from);
  if (it == names_.end()) return MakeError("rename " + from + " failed: No such file or directory");
  auto inode = it->second;
  names_.erase(it);
  names_[to] = inode;
  return Status::Ok();
}

Status SimulatedDevice::Remove(const std::string& path) {
  names_.erase(path);
  return Status::Ok();
}

Status SimulatedDevice::SyncDirectory(const std::string& path) {
  for (auto it = durable_names_.begin(); it != durable_names_.end();) {
    if (Parent(it->first) == path && !names_.count(it->first)) {
      it = durable_names_.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& [name, inode] : names_) {
    if (Parent(name) == path) durable_names_[name] = inode;
  }
  return Status::Ok();
}

Result<std::optional<FileId>> SimulatedDevice::TryLockFile(const std::string& path) {
  if (locked_paths_.count(path)) return std::optional<FileId>();
  FileId id = next_file_id_++;
  locked_paths_.insert(path);
  locks_[id] = path;
  return std::optional<FileId>(id);
}

void SimulatedDevice::UnlockFile(FileId lock) {
  auto it = locks_.find(lock);
  if (it == locks_.end()) return;
  locked_paths_.erase(it->second);
  locks_.erase(it);
}

Status SimulatedDevice::QueueWrite(FileId file, uint64_t position, const void* data, size_t len, uint64_t tag) {
  auto inode = InodeOf(file);
  if (!inode.ok()) return inode.error();
  QueuedOp op;
  op.inode = *inode;
  op.position = position;
  op.bytes.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + len);
  op.tag = tag;
  queued_.push_back(std::move(op));
  return Status::Ok();
}

Status SimulatedDevice::QueueSyncData(FileId file, uint64_t position, uint64_t length, uint64_t tag) {
  auto inode = InodeOf(file);
  if (!inode.ok()) return inode.error();
  QueuedOp op;
  op.is_sync = true;
  op.inode = *inode;
  op.position = position;
  op.length = length;
  op.tag = tag;
  queued_.push_back(std::move(op));
  return Status::Ok();
}

Status SimulatedDevice::SubmitQueued() {
  for (auto& op : queued_) submitted_.push_back(std::move(op));
  queued_.clear();
  return Status::Ok();
}

void SimulatedDevice::ExecuteOne(size_t index) {
  QueuedOp op = std::move(submitted_[index]);
  submitted_.erase(submitted_.begin() + static_cast<std::ptrdiff_t>(index));
  if (op.is_sync) {
    if (fail_next_queued_sync_) {
      fail_next_queued_sync_ = false;
      syncs_failed_ += 1;
      const uint64_t end = op.length == 0 ? UINT64_MAX : op.position + op.length;
      std::vector<Mutation> kept;
      for (Mutation& mutation : op.inode->unsynced) {
        const bool overlaps = !mutation.is_truncate && mutation.position < end &&
                              mutation.position + mutation.bytes.size() > op.position;
        if (!overlaps) kept.push_back(std::move(mutation));  // overlapping writes: marked clean, never durable
      }
      op.inode->unsynced = std::move(kept);
      op.inode->writeback_failed = true;
      completed_.push_back(Completion{op.tag, -EIO});
      return;
    }
    if (op.length == 0) {
      SyncInode(*op.inode);
    } else {
      SyncInodeRange(*op.inode, op.position, op.length);
    }
    completed_.push_back(Completion{op.tag, 0});
    return;
  }
  Mutation mutation;
  mutation.position = op.position;
  mutation.bytes = std::move(op.bytes);
  int64_t written = static_cast<int64_t>(mutation.bytes.size());
  ApplyMutation(*op.inode, mutation);
  op.inode->unsynced.push_back(std::move(mutation));
  completed_.push_back(Completion{op.tag, written});
}

size_t SimulatedDevice::ReapCompletions(std::vector<Completion>& out) {
  // Execute a random number of submitted operations, in a random order: io_uring gives no
  // ordering between independent submissions.
  if (!submitted_.empty()) {
    size_t n = std::uniform_int_distribution<size_t>(0, submitted_.size())(random_);
    for (size_t i = 0; i < n; ++i) {
      ExecuteOne(std::uniform_int_distribution<size_t>(0, submitted_.size() - 1)(random_));
    }
  }
  size_t reaped = completed_.size();
  out.insert(out.end(), completed_.begin(), completed_.end());
  completed_.clear();
  return reaped;
}

Status SimulatedDevice::WaitForCompletion() {
  if (completed_.empty() && !submitted_.empty()) {
    ExecuteOne(std::uniform_int_distribution<size_t>(0, submitted_.size() - 1)(random_));
  }
  return Status::Ok();
}

void SimulatedDevice::PowerLoss() {
  // Writes that were submitted (the kernel may have started them) are unsynced mutations too.
  for (auto& op : submitted_) {
    if (op.is_sync) continue;
    Mutation mutation;
    mutation.position = op.position;
    mutation.bytes = std::move(op.bytes);
    op.inode->unsynced.push_back(std::move(mutation));
  }
  queued_.clear();
  submitted_.clear();
  completed_.clear();
  std::set<Inode*> rebuilt;
  auto rebuild = [&](Inode& inode) {
    if (!rebuilt.insert(&inode).second) return;
    std::vector<uint8_t> data = inode.durable;
    for (const Mutation& mutation : inode.unsynced) {
      uint64_t choice = std::uniform_int_distribution<uint64_t>(0, 2)(random_);
      if (choice == 0) {
        writes_lost_ += 1;
        continue;
      }
      Mutation applied = mutation;
      if (choice == 2 && !mutation.is_truncate && mutation.bytes.size() > 1) {
        size_t keep = std::uniform_int_distribution<size_t>(1, mutation.bytes.size() - 1)(random_);
        applied.bytes.resize(keep);
        writes_torn_ += 1;
      }
      if (applied.is_truncate) {
        data.resize(applied.position);
      } else {
        uint64_t end = applied.position + applied.bytes.size();
        if (data.size() < end) data.resize(end);
        std::memcpy(data.data() + applied.position, applied.bytes.data(), applied.bytes.size());
      }
    }
    inode.data = data;
    inode.durable = std::move(data);
    inode.unsynced.clear();
    inode.writeback_failed = false;
  };
  for (auto& [name, inode] : names_) rebuild(*inode);
  for (auto& [name, inode] : durable_names_) rebuild(*inode);
  names_ = durable_names_;
  open_files_.clear();
  locked_paths_.clear();
  locks_.clear();
}

std::vector<uint8_t>* SimulatedDevice::MutableFileBytes(const std::string& path) {
  auto it = names_.find(path);
  if (it == names_.end()) return nullptr;
  return &it->second->data;
}

std::optional<std::vector<uint8_t>> SimulatedDevice::DurableFileBytes(const std::string& path) const {
  auto it = durable_names_.find(path);
  if (it == durable_names_.end()) return std::nullopt;
  return it->second->durable;
}

}  // namespace trellara::log
