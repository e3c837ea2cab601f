// relay/worker_internal.h — what the files of the relay worker share (internal to
// extension/relay/worker*.cpp): the worker's state, defined once in worker.cpp, the helpers of
// worker.cpp that the decoding callbacks call, and those callbacks (worker_decode.cpp). Nothing
// outside the relay worker includes it; it must never define state (only declare it extern).
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

#include "trellara/base/result.h"
#include "trellara/capture/relay_progress.h"
#include "trellara/capture/stream_spill.h"
#include "trellara/log/device.h"
#include "trellara/log/writer.h"

namespace trellara::relay::worker {

// --- state (worker.cpp) -----------------------------------------------------------------------------
// Set by the SIGTERM handler.
extern volatile sig_atomic_t got_sigterm;

// Everything C++ the worker owns; created once, never destroyed before exit.
struct Relay {
  std::unique_ptr<log::LogDevice> device;
  std::unique_ptr<log::LogWriter> writer;
  std::unique_ptr<AckTracker> ack;
  // source_ack = 'broker_quorum' (docs/broker.md "Source acknowledgement"): the same frames,
  // confirmable only below the forwarder's consumer offset (what the broker's quorum acknowledged).
  std::unique_ptr<AckTracker> broker_ack;
  uint64_t forwarded_end = 0;      // consumers/forwarder as last read
  uint64_t forwarded_read_us = 0;  // when it was last read
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
// Submits what is appended and waits until every offset below `target_end` is durable.
void WaitDurable(uint64_t target_end, bool interruptible = false);
// Confirms `lsn` to the slot (worker.cpp NOTES: only what the log holds durably).
void Confirm(uint64_t lsn);
// A frame was appended at `offset`: told to the acknowledgement tracker(s).
void TrackAppended(uint64_t offset, uint8_t type, uint64_t commit_lsn);

// --- decoding context callbacks (worker_decode.cpp) -------------------------------------------------
extern "C" void PrepareWrite(LogicalDecodingContext* ctx, XLogRecPtr, TransactionId, bool);
// Appends the record the plugin wrote to the log (a stream record: to the spill store).
extern "C" void DoWrite(LogicalDecodingContext* ctx, XLogRecPtr lsn, TransactionId, bool);
// Called by the plugin every 100 changes: notices SIGTERM and postmaster death.
extern "C" void UpdateProgress(LogicalDecodingContext*, XLogRecPtr, TransactionId, bool);

}  // namespace trellara::relay::worker
