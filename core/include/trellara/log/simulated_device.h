// simulated_device.h — an in-memory LogDevice that models what a disk keeps across power loss,
// in the style of TigerBeetle's src/testing/storage.zig.
//
// Every file has the bytes a reader sees now (the page cache) and the bytes that survive power
// loss. Only a completed SyncData moves the first into the second; only SyncDirectory makes a
// created, renamed or removed name survive. PowerLoss() rebuilds every file from its durable
// bytes plus, for each write or truncate not covered by a sync (including queued, not yet
// executed writes), a seeded random choice: lost, kept, or torn at a random byte. Queued
// operations complete in a seeded random order. The same seed reproduces the same run.
//
// `fsync_is_noop` exists only for the negative-control test: it makes SyncData/queued syncs of
// file data report success without making anything durable (directory fsync still works), so the power-loss test must find lost
// acknowledged records. Production code never constructs this device.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "trellara/log/device.h"

namespace trellara::log {

struct SimulatedDeviceOptions {
  uint64_t seed = 1;
  bool fsync_is_noop = false;  // negative control only: acknowledged records must get lost
};

class SimulatedDevice final : public LogDevice {
 public:
  explicit SimulatedDevice(SimulatedDeviceOptions options);
  ~SimulatedDevice() override;

  // Simulated power loss (see the file comment). Every FileId, lock and queued operation is
  // invalid afterwards; open the log again as a restarted process would.
  void PowerLoss();

  // Test access to file bytes as a reader would see them now (for corruption tests).
  std::vector<uint8_t>* MutableFileBytes(const std::string& path);
  // The bytes of `path` that would survive a power loss now (nullopt: the name would not).
  std::optional<std::vector<uint8_t>> DurableFileBytes(const std::string& path) const;

  // The next queued (io_uring) fdatasync to execute fails with EIO the way Linux fails one: the
  // dirty writes it covered are marked clean without reaching the durable bytes — still visible
  // to readers, never written by a later sync, gone at the next power loss.
  void FailNextQueuedSync() { fail_next_queued_sync_ = true; }
  uint64_t syncs_failed() const { return syncs_failed_; }

  uint64_t syncs_completed() const { return syncs_completed_; }
  uint64_t writes_torn() const { return writes_torn_; }
  uint64_t writes_lost() const { return writes_lost_; }

  Status MakeDirectory(const std::string& path) override;
  Result<std::vector<std::string>> ListDirectory(const std::string& path) override;
  Result<bool> Exists(const std::string& path) override;
  Result<FileId> OpenFile(const std::string& path, bool create) override;
  Result<FileId> OpenFileReadOnly(const std::string& path) override;
  void CloseFile(FileId file) override;
  Result<uint64_t> FileSize(FileId file) override;
  Result<size_t> ReadAt(FileId file, uint64_t position, void* buf, size_t len) override;
  Status WriteAt(FileId file, uint64_t position, const void* data, size_t len) override;
  Status SyncData(FileId file) override;
  Status Truncate(FileId file, uint64_t size) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status Remove(const std::string& path) override;
  Status SyncDirectory(const std::string& path) override;
  Result<std::optional<FileId>> TryLockFile(const std::string& path) override;
  void UnlockFile(FileId lock) override;
  Status QueueWrite(FileId file, uint64_t position, const void* data, size_t len, uint64_t tag) override;
  Status QueueSyncData(FileId file, uint64_t position, uint64_t length, uint64_t tag) override;
  Status SubmitQueued() override;
  size_t ReapCompletions(std::vector<Completion>& out) override;
  Status WaitForCompletion() override;
  int completion_event_fd() const override { return -1; }
  size_t in_flight_max() const override { return 64; }

 private:
  struct Mutation {  // a write or truncate applied to `data` but not yet covered by a sync
    bool is_truncate = false;
    uint64_t position = 0;  // write position, or the new size for a truncate
    std::vector<uint8_t> bytes;
  };
  struct Inode {
    std::vector<uint8_t> data;     // what a reader sees now
    std::vector<uint8_t> durable;  // what survives power loss
    std::vector<Mutation> unsynced;
    // A failed sync marked some writes clean without making them durable: a later whole-file
    // sync must replay only the remaining unsynced writes, not copy what readers see.
    bool writeback_failed = false;
  };
  struct QueuedOp {
    bool is_sync = false;
    std::shared_ptr<Inode> inode;
    uint64_t position = 0;
    uint64_t length = 0;  // sync range (0: whole file)
    std::vector<uint8_t> bytes;
    uint64_t tag = 0;
  };

  Result<std::shared_ptr<Inode>> InodeOf(FileId file);
  void ApplyMutation(Inode& inode, const Mutation& mutation);
  void SyncInode(Inode& inode);
  void SyncInodeRange(Inode& inode, uint64_t position, uint64_t length);
  void ExecuteOne(size_t index);
  static std::string Parent(const std::string& path);

  SimulatedDeviceOptions options_;
  std::mt19937_64 random_;
  std::set<std::string> directories_;
  std::map<std::string, std::shared_ptr<Inode>> names_;
  std::map<std::string, std::shared_ptr<Inode>> durable_names_;
  std::map<FileId, std::shared_ptr<Inode>> open_files_;
  std::set<std::string> locked_paths_;
  std::map<FileId, std::string> locks_;
  std::vector<QueuedOp> queued_;     // queued, not yet submitted
  std::vector<QueuedOp> submitted_;  // submitted, not yet executed
  std::vector<Completion> completed_;
  FileId next_file_id_ = 100;
  uint64_t syncs_completed_ = 0;
  bool fail_next_queued_sync_ = false;
  uint64_t syncs_failed_ = 0;
  uint64_t writes_torn_ = 0;
  uint64_t writes_lost_ = 0;
};

}  // namespace trellara::log
