// relay/worker_board.cpp — the relay worker's slot on the shared status board (shared_state.h):
// claims it at start, publishes the worker's state and counters after each pass, records failures
// (and the poison-transaction count) and releases it at exit. Every access holds the board's lock.
// It must never decide anything about the log or the slot from the board: the board only mirrors
// what this worker last saw.
extern "C" {
#include "postgres.h"

#include <signal.h>

#include "miscadmin.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "utils/timestamp.h"
}

#include "relay/shared_state.h"
#include "relay/worker_internal.h"

namespace trellara::relay::worker {

namespace {

constexpr long kHealthyAfterMs = 60'000;

FlowSlot* board_slot = nullptr;
TimestampTz started_at = 0;

}  // namespace

void Publish(FlowState state) {
  Board* b = SharedBoard();
  LWLockAcquire(b->lock, LW_EXCLUSIVE);
  board_slot->state = state;
  if (g_relay != nullptr && g_relay->writer) {
    log::DurableTail tail = g_relay->writer->durable_tail();
    board_slot->has_durable_offset = tail.offset.has_value();
    board_slot->log_durable_offset = tail.offset.value_or(0);
    board_slot->log_durable_lsn = g_relay->ack ? g_relay->ack->confirmable_lsn() : 0;
    board_slot->confirmed_lsn = g_relay->confirmed_lsn;
    board_slot->records_written = g_relay->records_written;
    board_slot->payload_bytes_appended = g_relay->payload_bytes_appended;
    board_slot->fsyncs_completed = g_relay->writer->fsyncs_completed();
    board_slot->streamed_transactions = g_relay->streamed_transactions;
    board_slot->stream_spilled_bytes = g_relay->spill ? g_relay->spill->stats().spilled_bytes : 0;
  }
  if (state == FlowState::kRunning && board_slot->consecutive_failures > 0 &&
      TimestampDifferenceExceeds(started_at, GetCurrentTimestamp(), kHealthyAfterMs))
    board_slot->consecutive_failures = 0;
  LWLockRelease(b->lock);
}

// kFailed (the launcher restarts with backoff) or kError (it does not: see shared_state.h).
void RecordFailure(const char* message, FlowState state) {
  Board* b = SharedBoard();
  if (b == nullptr || board_slot == nullptr) return;
  LWLockAcquire(b->lock, LW_EXCLUSIVE);
  board_slot->state = state;
  // Counted for kError too: should anything ever restart a flow in the error state, the backoff
  // still spaces the attempts.
  board_slot->consecutive_failures++;
  board_slot->last_error_at = GetCurrentTimestamp();
  strlcpy(board_slot->last_error, message, kLastErrorBytes);
  LWLockRelease(b->lock);
}

// Failures in a row on the same source transaction before this one (and remembers this one).
int CountTransactionFailure(bool in_transaction, uint32_t xid, uint64_t commit_lsn) {
  Board* b = SharedBoard();
  if (b == nullptr || board_slot == nullptr) return 0;
  int earlier = 0;
  LWLockAcquire(b->lock, LW_EXCLUSIVE);
  if (!in_transaction) {
    board_slot->failing_count = 0;
  } else if (board_slot->failing_count > 0 && board_slot->failing_xid == xid &&
             board_slot->failing_commit_lsn == commit_lsn) {
    earlier = board_slot->failing_count++;
  } else {
    board_slot->failing_xid = xid;
    board_slot->failing_commit_lsn = commit_lsn;
    board_slot->failing_count = 1;
  }
  LWLockRelease(b->lock);
  return earlier;
}

void ReleaseBoardSlot(int, Datum) {
  Board* b = SharedBoard();
  if (b == nullptr || board_slot == nullptr) return;
  LWLockAcquire(b->lock, LW_EXCLUSIVE);
  if (board_slot->pid == MyProcPid) {
    board_slot->pid = 0;
    board_slot->wake_procno1 = 0;
    if (board_slot->state != FlowState::kFailed && board_slot->state != FlowState::kError)
      board_slot->state = FlowState::kStopped;
  }
  LWLockRelease(b->lock);
}

// Claims the board slot of the flow. kAlreadyRunning: another live worker owns it. kStopping: a
// stop_flow/drop_flow asked it to stop (its transaction has not committed yet) after this worker
// was registered — the stop saw no worker and goes on (drop_flow removes the log directory), so
// this one must not create anything there. Decided under the board lock that the stop request
// is written under: either the stop sees this worker's pid and waits for it, or this worker sees
// the request.
Claim ClaimBoardSlot() {
  Board* b = SharedBoard();
  LWLockAcquire(b->lock, LW_EXCLUSIVE);
  FlowSlot* s = FindFlowSlot(b, flow_name, true);
  if (s == nullptr) {
    LWLockRelease(b->lock);
    ereport(ERROR, (errmsg("no free trellara status slot for flow \"%s\"", flow_name),
                    errhint("Raise trellara.max_flows (needs a server restart).")));
  }
  if (s->pid != 0 && s->pid != MyProcPid && kill(s->pid, 0) == 0) {
    LWLockRelease(b->lock);
    return Claim::kAlreadyRunning;
  }
  if (s->stop_requested_at != 0 &&
      !TimestampDifferenceExceeds(s->stop_requested_at, GetCurrentTimestamp(), kStopHoldMs)) {
    LWLockRelease(b->lock);
    return Claim::kStopping;
  }
  s->pid = MyProcPid;
  s->database = MyDatabaseId;
  s->wake_procno1 = MyProc->pgprocno + 1;  // committing backends set this latch (WakeRelaysAtCommit)
  s->state = FlowState::kStarting;
  s->started_at = GetCurrentTimestamp();
  LWLockRelease(b->lock);
  board_slot = s;
  started_at = GetCurrentTimestamp();
  return Claim::kClaimed;
}

uint64_t ProgressRequestedLsn() {
  Board* b = SharedBoard();
  LWLockAcquire(b->lock, LW_SHARED);
  const uint64_t requested = board_slot->progress_requested_lsn;
  LWLockRelease(b->lock);
  return requested;
}

}  // namespace trellara::relay::worker
