// apply_progress.h — what `trellara apply` shows while it runs: on a terminal one line redrawn
// every second (applied, rate, lag); otherwise a structured `apply flow=... state=...` line every
// kProgressInterval while transactions flow, and one at the end.
//
// It only reports figures the applier hands it; it never reads the target and decides nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace trellara::cli::apply {

struct Counters {
  uint64_t applied = 0;
  uint64_t skipped_duplicates = 0;
  uint64_t not_applied_changes = 0;  // messages and DDL: recorded in the log, not applied
  uint64_t statements = 0;
  // The snapshot handoff (docs/snapshot.md): row changes (or truncated chunk ranges) left out
  // because the chunk's copy holds them, and skips recorded for chunks still pending.
  uint64_t snapshot_in_copy = 0;
  uint64_t snapshot_skips = 0;
  // Captured DDL (docs/schema-changes.md), counted once its transaction committed: statements run
  // on the target, or nothing to run (an index, a kept DROP TABLE, a step the target reflects).
  uint64_t ddl_applied = 0;
  uint64_t ddl_no_target_change = 0;
  // UPDATEs of committed grouped batches left out because a later UPDATE of the group overwrote the
  // same row (docs/apply.md "Superseded updates in a group").
  uint64_t superseded_updates = 0;
  // UPDATEs of committed chunked transactions sent in batch statements (docs/apply.md "Chunked
  // transactions").
  uint64_t batched_updates = 0;
  // Changes of grouped batches sent inside merged statements (docs/apply.md "Merged statements in a group").
  uint64_t merged_changes = 0;
  // Chunked transactions committed by the early path (apply_early.cpp: applied while the relay was
  // still writing them), and early attempts abandoned (then applied at their commit marker).
  uint64_t early_chunked = 0;
  uint64_t early_abandoned = 0;
  // Grouped batches formed on assumed evidence (docs/apply.md "Evidence inside the batch"), and those
  // the target's check refused (rolled back, then applied on read evidence).
  uint64_t assumed_evidence_batches = 0;
  uint64_t assumed_evidence_refused = 0;
};

// Where the applier stands in the log, for a progress line.
struct ProgressFigures {
  uint64_t batches = 0;          // pipeline segments sent (shown as batches=)
  uint64_t start_offset = 0;     // the consumer offset the run started at
  uint64_t consumer_offset = 0;  // what consumers/applier holds
  uint64_t next_log_offset = 0;  // the next record the applier reads
  uint64_t log_end = 0;          // the log's published end (terminal line only)
  uint64_t waiting = 0;          // transactions read and waiting for their batch
};

class ApplyProgress {
 public:
  explicit ApplyProgress(std::string flow_name);  // notes whether stdout is a terminal

  bool tty() const { return tty_; }
  // The run starts now; on a terminal the first line is drawn at once.
  void Start();
  // The structured line (ends a terminal line first).
  void Print(const char* state, const Counters& counters, const ProgressFigures& figures);
  // The periodic line, when one is due; `figures` is called only then.
  void Show(const Counters& counters, const std::function<ProgressFigures()>& figures);

 private:
  using Clock = std::chrono::steady_clock;
  std::string flow_name_;
  Clock::time_point started_;
  Clock::time_point last_progress_;
  uint64_t applied_at_last_progress_ = 0;
  bool tty_ = false;
  bool progress_line_open_ = false;
};

}  // namespace trellara::cli::apply
