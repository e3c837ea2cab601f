// hold_point.h — one exact point shared by the live source and the live target, for `verify` and
// `reseed --where` (docs/snapshot.md "Verify and filtered reseed: holds"): a temporary logical
// slot's exported snapshot on the source (consistent point C: exactly the transactions with commit
// LSN <= C) and the applier held right after C on the target.
//
// It writes nothing on the target but its own apply_holds row and the apply_control version bump
// that announces it, both under the flow's control lock; it never decides whether data matches.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "kit/config.h"
#include "pg/pg_connection.h"

namespace trellara::cli {


class HoldPoint {
 public:
  // Takes the flow's hold lock on `control` (a pinned target connection used only for the hold and
  // kept for its lifetime), creates the slot and requests a hold at its consistent point, and waits
  // until the applier marks it reached; a hold found passed is retried with a new slot. Throws
  // CommandFailed(kExitCouldNotHold) naming why (applier not running, halted at a quarantine, did
  // not reach C within `timeout`). `purpose` ("verify", "reseed") names the hold.
  HoldPoint(const FlowConfig& config, PgConnection& control, std::chrono::seconds timeout, const std::string& purpose);
  ~HoldPoint();
  HoldPoint(const HoldPoint&) = delete;
  HoldPoint& operator=(const HoldPoint&) = delete;

  uint64_t lsn() const { return lsn_; }
  const std::string& snapshot_name() const { return snapshot_name_; }
  int attempts() const { return attempts_; }

  // Opens a REPEATABLE READ READ ONLY transaction on `source` in the exported snapshot. Only until
  // DropSlot().
  void ImportSnapshot(PgConnection& source) const;
  // Closes the replication connection: the temporary slot and the exported snapshot go with it
  // (the source keeps no WAL for us). Call once every source transaction imported the snapshot.
  void DropSlot();
  // Lets the applier go on: releases the hold lock, then removes the hold row (control lock and
  // version bump). Idempotent; the destructor calls it and only reports a failure on stderr.
  void Release();

 private:
  void CreateSlot(int attempt);
  void RequestHold();
  // Asks the flow's relay (trellara.request_progress on the source) to log a progress marker past
  // C now: on an idle flow the applier would otherwise reach C only at the relay's next periodic
  // marker (trellara.progress_interval, 10 s). When it cannot ask, says why and goes on waiting.
  void AskRelayForProgress();
  void RemoveHoldRow();
  // nullopt while requested; "reached" or "passed" once the applier answered.
  std::string WaitAnswer(std::chrono::steady_clock::time_point deadline);

  const FlowConfig& config_;
  PgConnection& control_;
  std::string purpose_;
  std::unique_ptr<PgConnection> replication_;
  std::string snapshot_name_;
  std::string hold_id_;
  uint64_t lsn_ = 0;
  int attempts_ = 0;
  bool hold_locked_ = false;
  bool hold_row_ = false;
};

}  // namespace trellara::cli
