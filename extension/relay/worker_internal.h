// relay/worker_internal.h — what the files of the relay worker share (internal to
// extension/relay/worker*.cpp): the worker's state, each declared here and defined once in the file
// named by its section, and the functions one file of the worker calls in another. Nothing outside
// the relay worker includes it; it must never define state (only declare it extern).
#pragma once

extern "C" {
#include "postgres.h"

#include <signal.h>

#include "access/xlogdefs.h"
#include "replication/logical.h"
}

#include <cstdint>
#include <memory>
#include <string>

#include "relay/shared_state.h"
#include "trellara/base/result.h"
#include "trellara/capture/relay_progress.h"
#include "trellara/capture/stream_spill.h"
#include "trellara/log/device.h"
#include "trellara/log/writer.h"

// An LSN as the two halves a "%X/%X" format takes.
#define LSN_ARGS(lsn) static_cast<uint32>((lsn) >> 32), static_cast<uint32>(lsn)

namespace trellara::relay::worker {

// --- state (worker.cpp) -----------------------------------------------------------------------------
// Set by the SIGTERM handler.
extern volatile sig_atomic_t got_sigterm;

// Everything C++ the worker owns; created once, never destroyed before exit.
struct Relay {
  std::unique_ptr<log::LogDevice> device;
  std::unique_ptr<log::LogWriter> writer;
  std::unique_ptr<AckTracker> ack;
  // source_ack = 'broker_quorum' (docs/broker.md "Source acknowledgement") or 'applied'
  // (docs/decisions.md "A standby's slot at the target's position"): the same frames, confirmable
  // only below a consumer offset — the forwarder's (what the broker's quorum acknowledged), or the
  // least of the downstream consumers' (what every applier committed on its target).
  std::unique_ptr<AckTracker> held_ack;
  uint64_t held_end = 0;      // that consumer offset as last read
  uint64_t held_read_us = 0;  // when it was last read
  std::unique_ptr<StreamSpill> spill;  // streamed in-progress transactions, until their commit
  ProgressPolicy progress;
  uint64_t confirmed_lsn = 0;
  uint64_t last_progress_us = 0;
  uint64_t records_written = 0;
  uint64_t payload_bytes_appended = 0;
  uint64_t streamed_transactions = 0;
};
extern Relay* g_relay;

// The flow this worker relays (bgw_extra).
extern char flow_name[NAMEDATALEN];

// --- helpers (worker.cpp) ---------------------------------------------------------------------------
// Throws the flow's I/O error: `what` failed because of `error`.
[[noreturn]] void Fail(const std::string& what, const Error& error, const char* hint = nullptr);
// SIGTERM or postmaster death while the worker is busy: leave now.
void StopIfRequested();

// --- the flow's row of trellara.flows (worker_catalog.cpp) -----------------------------------------
// Plain data read from trellara.flows at start.
extern bool has_log_started_lsn;
// trellara.flows.source_ack: how far the slot may be confirmed.
enum class SourceAck { kLocal, kBrokerQuorum, kApplied };
extern SourceAck source_ack;
extern int flow_partitions;   // trellara.flows.mode = 'partitioned': its partitions (0: strict)
extern int flow_map_version;  // trellara.flows.partition_map_version
extern XLogRecPtr log_started_lsn;
extern char publication[NAMEDATALEN * 4];
extern char slot_name[NAMEDATALEN];
extern char log_directory[MAXPGPATH];
// Reads this flow's row; false if it is gone or disabled.
bool ReadFlow();
// Records in trellara.flows.log_started_lsn that this flow's log covers the source from `lsn`.
void RecordLogStart(XLogRecPtr lsn, bool replace);

// --- the flow's slot on the status board (worker_board.cpp) ---------------------------------------
enum class Claim { kClaimed, kAlreadyRunning, kStopping };
// Claims the board slot of the flow (worker_board.cpp says when it is not kClaimed).
Claim ClaimBoardSlot();
// on_shmem_exit callback: gives the slot up (kStopped unless it failed).
void ReleaseBoardSlot(int, Datum);
// Publishes `state` and the worker's counters on its slot.
void Publish(FlowState state);
// kFailed (the launcher restarts with backoff) or kError (it does not: see shared_state.h).
void RecordFailure(const char* message, FlowState state = FlowState::kFailed);
// Failures in a row on the same source transaction before this one (and remembers this one).
int CountTransactionFailure(bool in_transaction, uint32_t xid, uint64_t commit_lsn);
// The LSN trellara.request_progress() asked the log to cover (0: none).
uint64_t ProgressRequestedLsn();

// --- start on the log (worker_restart.cpp) ----------------------------------------------------------
// Creates g_relay: the io_uring device, the log writer and the spill store of the flow.
void OpenLog();
// The restart rule (core DecideRestart) applied at start: the LSN to skip through, or 0 with
// `refusal` set to the reason when the flow must not run.
uint64_t ApplyRestartRule(uint64_t slot_confirmed, std::string* refusal, bool* log_started_now);

// --- durability and acknowledgement (worker_confirm.cpp) -------------------------------------------
// Microseconds on the Postgres clock (GetCurrentTimestamp).
uint64_t NowUs();
// Submits what is appended and waits until every offset below `target_end` is durable.
void WaitDurable(uint64_t target_end, bool interruptible = false);
// Set when WaitDurable consumed a latch wake (a committing backend's, WakeRelaysAtCommit): the pass
// loop then starts the next pass at once instead of sleeping through the commit it announced.
extern bool latch_wake_consumed;
// Confirms `lsn` to the slot (worker.cpp NOTES: only what the log holds durably).
void Confirm(uint64_t lsn);
// A frame was appended at `offset`: told to the acknowledgement tracker(s).
void TrackAppended(uint64_t offset, uint8_t type, uint64_t commit_lsn);
// Appends a progress marker covering the source through `lsn`, waits until it is durable and
// returns the confirmable LSN.
uint64_t AppendProgressMarker(uint64_t lsn);
// Acknowledges what is durable now (never waits): confirms and publishes through AckTracker's
// answer; a progress marker and retention only when every appended frame is durable.
void AcknowledgeDurable(uint64_t decoded_end);
// After a pass: submits its frames and acknowledges what is durable, without waiting for them.
void EndPass(uint64_t decoded_end);
// Between passes: waits for a latch wake or the timeout, acknowledging each completion of the log.
void WaitBetweenPasses(long timeout_ms, uint64_t decoded_end);
// At SIGTERM: makes everything appended durable, then acknowledges it.
void FinishPass(uint64_t decoded_end);

// --- log retention (worker_retention.cpp) -----------------------------------------------------------
// At most once per interval, after a pass with everything durable: deletes what no consumer needs.
void ApplyRetentionWhenDue();
// Whether the retention interval has passed (EndPass then makes the pass durable first).
bool RetentionDue();

// --- decoding context callbacks (worker_decode.cpp) -------------------------------------------------
extern "C" void PrepareWrite(LogicalDecodingContext* ctx, XLogRecPtr, TransactionId, bool);
// Appends the record the plugin wrote to the log (a stream record: to the spill store).
extern "C" void DoWrite(LogicalDecodingContext* ctx, XLogRecPtr lsn, TransactionId, bool);
// Called by the plugin every 100 changes: notices SIGTERM and postmaster death.
extern "C" void UpdateProgress(LogicalDecodingContext*, XLogRecPtr, TransactionId, bool);

}  // namespace trellara::relay::worker
