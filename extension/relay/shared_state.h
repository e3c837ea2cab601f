// relay/shared_state.h — the shared-memory status board of the launcher and the relay workers.
//
// One FlowSlot per running or recently run flow: the worker that owns a flow publishes its state,
// progress and last error here; trellara.status() reads it; stop/start wake the launcher through
// it. Plain data only (it lives in shared memory); every access holds the board's LWLock. It must
// never be the source of truth for what a flow is (that is the trellara.flows table) nor for what
// is durable (that is the log): it only mirrors what the owning worker last saw.
#pragma once

extern "C" {
#include "postgres.h"

#include "storage/lwlock.h"
#include "utils/timestamp.h"
}

#include <cstdint>

namespace trellara::relay {

// How long a stop_flow/drop_flow request holds a flow stopped before its transaction must have
// committed or rolled back: the launcher does not start the flow's worker meanwhile, and a worker
// registered just before the request exits at its start (relay/worker_board.cpp ClaimBoardSlot).
constexpr int kStopHoldMs = 60'000;

// kFailed: the worker ended on an error a restart may cure; the launcher restarts it with backoff.
// kError: the flow cannot continue as it is (a transaction that cannot be captured, a log that
// does not cover the slot): the launcher leaves it alone until start_flow clears it.
enum class FlowState : int32_t { kStopped = 0, kStarting = 1, kRunning = 2, kBackoff = 3, kFailed = 4, kError = 5 };
const char* FlowStateName(FlowState state);

constexpr int kLastErrorBytes = 2048;

struct FlowSlot {
  bool in_use;
  char name[NAMEDATALEN];
  Oid database;
  FlowState state;
  pid_t pid;                     // owning worker, 0 when none
  uint64_t log_durable_offset;   // last acknowledged offset (valid when has_durable_offset)
  bool has_durable_offset;
  uint64_t log_durable_lsn;      // source LSN the log covers (last durable completing frame)
  uint64_t log_bytes;            // bytes of segment files in the log directory
  uint64_t confirmed_lsn;        // last LSN this worker confirmed to the slot
  uint64_t records_written;      // frames appended by this worker since it started
  int32_t consecutive_failures;  // for restart backoff; reset after a healthy pass
  TimestampTz started_at;
  TimestampTz stop_requested_at;  // stop_flow/drop_flow in progress: the launcher holds off, and a
                                  // worker started just before exits without touching its log
  TimestampTz last_error_at;
  char last_error[kLastErrorBytes];
  // The transaction the last failures happened on (for the poison-transaction rule): failures in
  // a row on the same (xid, commit LSN).
  uint32_t failing_xid;
  uint64_t failing_commit_lsn;
  int32_t failing_count;
  // Counters of trellara.relay_metrics() (docs/relay.md), since the worker started; appended here
  // so the fields above keep their places.
  uint64_t payload_bytes_appended;  // record payload bytes appended to the log
  uint64_t fsyncs_completed;        // fdatasyncs of the log the writer completed
  uint64_t streamed_transactions;   // streamed (in-progress) transactions logged at their commit
  uint64_t stream_spilled_bytes;    // bytes of streamed changes written to spill files
  // trellara.request_progress(): the log should cover the source through this LSN; the worker
  // writes a progress marker at its next pass that decoded past what the log covers.
  uint64_t progress_requested_lsn;
  // The owning worker's PGPROC number + 1 (0: none): a committing backend sets that latch so the
  // relay decodes the commit at once instead of at its next poll (WakeRelaysAtCommit).
  int32_t wake_procno1;
};

struct Board {
  LWLock* lock;
  pid_t launcher_pid;
  int32_t max_flows;
  FlowSlot flows[FLEXIBLE_ARRAY_MEMBER];
};

// Registered from _PG_init when preloaded; sizes come from trellara.max_flows.
void RequestSharedState();
void InstallSharedStateHooks();
// The board, or nullptr when the library was not preloaded (no shared memory was reserved).
Board* SharedBoard();

// Finds the slot of `name` (and optionally reserves a free one). Caller holds board->lock
// exclusively when reserving.
FlowSlot* FindFlowSlot(Board* board, const char* name, bool reserve);

// Wakes the launcher so it re-reads trellara.flows now (no-op when it is not running).
void WakeLauncher();
// Registered from _PG_init when preloaded: every backend whose transaction wrote a commit record
// sets the latch of each relay of its database, as a commit wakes the walsenders (the relay's
// timed poll stays as the fallback: an asynchronous commit is decoded once the WAL writer flushed
// it). Lock-free reads of the board: a stale number wakes some other process once, harmlessly.
void RegisterCommitWake();

}  // namespace trellara::relay
