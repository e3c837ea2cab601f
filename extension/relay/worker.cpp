// relay/worker.cpp — the relay worker of one flow: decodes the flow's logical slot with the
// `trellara` output plugin inside this background worker (no walsender), appends every record to
// the flow's local log, and confirms the slot only past what is durable there.
//
// NOTES
// - Acknowledgement (DESIGN §2, source -> log): LogicalConfirmReceivedLocation is called only
//   with AckTracker's answer: the commit LSN of the last transaction whose every frame is durable
//   (fdatasync'ed, indexed), or the LSN of a durable progress marker. Never before the fsync.
// - Restart and continuity: on start the worker reads its log backwards from the durable tail to
//   the last completing frame and hands those frames, the slot's confirmed position and the
//   catalog's log_started_lsn to core DecideRestart (relay_progress.h), which says what the log
//   covers (passed to the plugin as skip_through_lsn, so a crash between fsync and confirm does
//   not duplicate transactions; a torn chunked transaction at the tail is decoded again in full)
//   or refuses: a log that covers less than the slot's confirmed position has a hole, and the
//   flow goes to the error state without confirming anything. A new flow's first start writes a
//   start marker at the slot's position and records it in trellara.flows.log_started_lsn.
// - Errors that a restart cannot cure (core ClassifyRelayFailure: an uncapturable transaction)
//   put the flow in the error state, naming the transaction and relation; the launcher does not
//   restart it until start_flow. Other errors end the worker and the launcher restarts it.
// - Stopping: SIGTERM and postmaster death are noticed within a second wherever the worker is:
//   WAL is read with read_local_xlog_page_no_wait (never sleeping inside the page reader), every
//   wait is a latch wait with WL_EXIT_ON_PM_DEATH, the plugin reports progress every 100 changes
//   (update_progress) and every written record passes a check, and a segment roll happens only
//   after a latch-aware wait for durability. Mid-transaction, the worker leaves without
//   confirming it (it is decoded again at the next start).
// - Idle and filtered flows: after a pass over all flushed WAL with every record durable, the
//   worker writes a progress marker when the decoder is well past what the log covers, then
//   confirms it, so the slot's restart_lsn keeps moving and WAL is not retained without bound.
// - Pass cadence: the worker sleeps 5 ms after a pass that read WAL, doubling to 100 ms while
//   there is none, so a committed transaction reaches the log within milliseconds and an idle
//   relay wakes ten times a second.
// - Waiting: the worker waits on its latch, with io_uring completions arriving on an eventfd
//   watched by the same WaitLatchOrSocket; it never blocks in the ring where it cannot see
//   SIGTERM or postmaster death. WAL is read up to GetFlushRecPtr() of each pass, like
//   pg_logical_slot_get_changes, then the worker sleeps on its latch (100 ms) before the next pass.
// - Errors: any ERROR ends the worker after recording it on the status board (last_error); the
//   launcher restarts the flow with backoff. SIGTERM (stop_flow, shutdown) ends it cleanly.
// - C++ objects (device, writer, tracker) live behind one static pointer, never in a frame that a
//   Postgres ERROR could jump over; C++ calls go through GuardEntry.
// - Files: the decoding-context callbacks, which append each record to the log, are in
//   worker_decode.cpp; the state both files share is declared in worker_internal.h.
extern "C" {
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlogreader.h"
#include "access/xlogutils.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/value.h"
#include "pgstat.h"
#include "port.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "replication/decode.h"
#include "replication/logical.h"
#include "replication/slot.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/pmsignal.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/pg_lsn.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

PGDLLEXPORT void trellara_relay_main(Datum main_arg);
}

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "pg/guard.h"
#include "plugin/plugin.h"
#include "relay/relay.h"
#include "relay/shared_state.h"
#include "relay/worker_internal.h"
#include "trellara/base/cadence.h"
#include "trellara/record/codec.h"
#include "trellara/record/envelope.h"
#include "trellara/base/fault.h"
#include "trellara/log/reader.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/log/retention.h"
#include "trellara/log/uring_device.h"
#include "trellara/log/writer.h"
#include "trellara/capture/relay_progress.h"
#include "trellara/capture/stream_spill.h"

namespace trellara::relay::worker {

#define LSN_ARGS(lsn) static_cast<uint32>((lsn) >> 32), static_cast<uint32>(lsn)

// The state worker_decode.cpp shares (worker_internal.h), defined here once.
volatile sig_atomic_t got_sigterm = false;
Relay* g_relay = nullptr;
char flow_name[NAMEDATALEN];

namespace {

// Sleep between passes: cadence::kRelayPass (base/cadence.h).
constexpr long kPassSleepMs = cadence::kRelayPass.max.count();
constexpr long kHealthyAfterMs = 60'000;

void HandleSigterm(SIGNAL_ARGS) {
  int save_errno = errno;
  got_sigterm = true;
  SetLatch(MyLatch);
  errno = save_errno;
}

// Plain data read from trellara.flows.
bool has_log_started_lsn = false;
bool source_ack_broker = false;  // trellara.flows.source_ack = 'broker_quorum'
XLogRecPtr log_started_lsn = InvalidXLogRecPtr;
bool decoding_started = false;
ReadLocalXLogPageNoWaitPrivate wal_reader_private;
char publication[NAMEDATALEN * 4];
char slot_name[NAMEDATALEN];
char log_directory[MAXPGPATH];
FlowSlot* board_slot = nullptr;
TimestampTz started_at = 0;

uint64_t NowUs() { return static_cast<uint64_t>(GetCurrentTimestamp()); }

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
void RecordFailure(const char* message, FlowState state = FlowState::kFailed) {
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
    if (board_slot->state != FlowState::kFailed && board_slot->state != FlowState::kError)
      board_slot->state = FlowState::kStopped;
  }
  LWLockRelease(b->lock);
}

enum class Claim { kClaimed, kAlreadyRunning, kStopping };

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
  s->state = FlowState::kStarting;
  s->started_at = GetCurrentTimestamp();
  LWLockRelease(b->lock);
  board_slot = s;
  return Claim::kClaimed;
}

// Reads this flow's row; false if it is gone or disabled.
bool ReadFlow() {
  bool found = false;
  SetCurrentStatementStartTimestamp();
  StartTransactionCommand();
  SPI_connect();
  PushActiveSnapshot(GetTransactionSnapshot());
  Oid argtypes[1] = {TEXTOID};
  Datum args[1] = {CStringGetTextDatum(flow_name)};
  int rc = SPI_execute_with_args(
      "SELECT publication, slot_name, log_directory, enabled, log_started_lsn, source_ack FROM trellara.flows "
      "WHERE name = $1",
      1, argtypes,
      args, nullptr, true, 1);
  if (rc == SPI_OK_SELECT && SPI_processed == 1) {
    bool isnull = false;
    Datum enabled = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull);
    if (!isnull && DatumGetBool(enabled)) {
      strlcpy(publication, SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1), sizeof publication);
      strlcpy(slot_name, SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2), sizeof slot_name);
      strlcpy(log_directory, SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3), sizeof log_directory);
      Datum started = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 5, &isnull);
      has_log_started_lsn = !isnull;
      log_started_lsn = isnull ? InvalidXLogRecPtr : DatumGetLSN(started);
      const char* ack_mode = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 6);
      source_ack_broker = ack_mode != nullptr && strcmp(ack_mode, "broker_quorum") == 0;
      found = true;
    }
  }
  SPI_finish();
  PopActiveSnapshot();
  CommitTransactionCommand();
  return found;
}

// Records in the catalog that this flow's log was started (covering the source from `lsn`), so a
// later start can tell a deleted log directory from a new flow. Plain C frame.
void RecordLogStart(XLogRecPtr lsn) {
  SetCurrentStatementStartTimestamp();
  StartTransactionCommand();
  SPI_connect();
  PushActiveSnapshot(GetTransactionSnapshot());
  Oid argtypes[2] = {TEXTOID, PG_LSNOID};
  Datum args[2] = {CStringGetTextDatum(flow_name), LSNGetDatum(lsn)};
  // SKIP LOCKED: stop_flow/drop_flow hold the row while they wait for this worker to exit, and a
  // lock wait does not see SIGTERM, so waiting here would hold stop_flow for its whole timeout.
  // A skipped row is recorded at the next start (has_log_started_lsn stays false).
  int rc = SPI_execute_with_args(
      "UPDATE trellara.flows SET log_started_lsn = $2 WHERE name IN (SELECT name FROM trellara.flows WHERE name = $1 "
      "AND log_started_lsn IS NULL FOR UPDATE SKIP LOCKED)",
      2, argtypes, args, nullptr, false, 0);
  const bool recorded = rc == SPI_OK_UPDATE && SPI_processed == 1;
  SPI_finish();
  PopActiveSnapshot();
  CommitTransactionCommand();
  if (!recorded) return;
  has_log_started_lsn = true;
  log_started_lsn = lsn;
}

}  // namespace

[[noreturn]] void Fail(const std::string& what, const Error& error, const char* hint) {
  throw pg::SqlError(ERRCODE_IO_ERROR,
                     "trellara relay of flow \"" + std::string(flow_name) + "\": " + what + ": " + error.message, {},
                     hint ? hint : "");
}

// SIGTERM while the worker is busy (mid-transaction, reading its log at start): leave now. The
// ERROR carries ERRCODE_ADMIN_SHUTDOWN, which RecordErrorAndExit treats as a clean stop.
void StopIfRequested() {
  if (!PostmasterIsAlive()) proc_exit(1);
  if (got_sigterm)
    throw pg::SqlError(ERRCODE_ADMIN_SHUTDOWN, "trellara relay of flow \"" + std::string(flow_name) +
                                                   "\" stops on SIGTERM; what it had not confirmed is decoded again "
                                                   "at its next start");
}

namespace {

// The durable frames from the tail backwards to the last completing one (the restart rule's input).
std::vector<TailFrame> ReadTailFrames() {
  std::vector<TailFrame> frames;
  log::DurableTail tail = g_relay->writer->durable_tail();
  if (!tail.offset) return frames;
  auto reader = log::LogReader::Open(*g_relay->device, log_directory);
  if (!reader.ok()) Fail("cannot read its log " + std::string(log_directory), reader.error());
  for (uint64_t o = *tail.offset + 1; o-- > 0;) {
    StopIfRequested();
    Status s = (*reader)->Seek(o);
    if (!s.ok()) break;  // reclaimed: the log starts after this offset
    auto rec = (*reader)->Next();
    if (!rec.ok()) Fail("cannot read offset " + std::to_string(o) + " of its log", rec.error());
    if (!rec->has_value()) break;
    frames.push_back(TailFrame{o, (*rec)->type, (*rec)->commit_lsn});
    if (CompletesTransaction((*rec)->type)) break;
    if (o == 0) break;
  }
  return frames;
}

void OpenLog() {
  g_relay = new Relay();
  auto device = log::OpenUringDevice();
  if (!device.ok()) Fail("cannot set up io_uring", device.error());
  g_relay->device = std::move(*device);
  log::WriterOptions writer_options;
  writer_options.segment_bytes_max = LogSegmentBytes();  // trellara.log_segment_size, read at start
  auto writer = log::LogWriter::Open(*g_relay->device, log_directory, writer_options);
  if (!writer.ok())
    Fail("cannot open its log directory " + std::string(log_directory), writer.error(),
         "Check that the directory is writable by the postgres OS user and not used by another flow.");
  g_relay->writer = std::move(*writer);
  SpillOptions spill_options;
  spill_options.directory = StreamSpillDirectory()[0] == '\0'
                                ? std::string(log_directory) + "/spill"
                                : std::string(StreamSpillDirectory()) + "/" + flow_name;
  spill_options.memory_changes = StreamSpillChanges();
  auto spill = StreamSpill::Open(spill_options);
  if (!spill.ok())
    Fail("cannot open its spill directory " + spill_options.directory, spill.error(),
         "Check that the directory (trellara.stream_spill_directory) is writable by the postgres OS user.");
  g_relay->spill = std::move(*spill);
  if (g_relay->spill->removed_at_open() > 0)
    pg::CallPostgres([] {
      ereport(LOG, (errmsg("trellara relay of flow \"%s\": removed %llu spill file(s) of streamed transactions left by "
                           "its previous run; the slot decodes them again",
                           flow_name, static_cast<unsigned long long>(g_relay->spill->removed_at_open()))));
    });
}

}  // namespace

// Submits what is appended and waits on the latch (and the ring's eventfd) until every offset
// below `target_end` is durable. Returns early only by ERROR or process exit.
void WaitDurable(uint64_t target_end, bool interruptible) {
  if (fault::Hit("relay.after_append_before_fsync") == fault::Action::Error)
    Fail("injected fault", MakeError("relay.after_append_before_fsync"));
  Status s = g_relay->writer->Submit();
  if (!s.ok()) Fail("cannot write to its log", s.error());
  int fd = g_relay->writer->completion_event_fd();
  for (;;) {
    auto durable = g_relay->writer->Poll();
    if (!durable.ok()) Fail("cannot make its log durable", durable.error());
    if (*durable >= target_end) return;
    if (interruptible) StopIfRequested();
    s = g_relay->writer->Submit();
    if (!s.ok()) Fail("cannot write to its log", s.error());
    int events = WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH;
    if (fd >= 0) events |= WL_SOCKET_READABLE;
    pg::CallPostgres([&] {
      (void)WaitLatchOrSocket(MyLatch, events, fd >= 0 ? fd : PGINVALID_SOCKET, fd >= 0 ? 1000 : 1,
                              PG_WAIT_EXTENSION);
      ResetLatch(MyLatch);
      CHECK_FOR_INTERRUPTS();
    });
  }
}

void TrackAppended(uint64_t offset, uint8_t type, uint64_t commit_lsn) {
  g_relay->ack->Appended(offset, type, commit_lsn);
  if (g_relay->broker_ack) g_relay->broker_ack->Appended(offset, type, commit_lsn);
}

// source_ack = 'broker_quorum': what may be confirmed given the forwarder's consumer offset (the
// next offset it has not yet seen acknowledged by the broker's quorum), read at most every
// kForwardedReadIntervalUs. No forwarder registered yet: nothing past what was confirmed before.
constexpr uint64_t kForwardedReadIntervalUs = 100'000;
uint64_t BrokerConfirmable() {
  const uint64_t now = NowUs();
  if (now - g_relay->forwarded_read_us >= kForwardedReadIntervalUs) {
    g_relay->forwarded_read_us = now;
    auto offsets = log::ReadConsumerOffsets(*g_relay->device, log_directory);
    if (offsets.ok()) {
      auto it = offsets->find("forwarder");
      if (it != offsets->end()) g_relay->forwarded_end = it->second;
    }
  }
  return g_relay->broker_ack->Durable(std::min(g_relay->forwarded_end, g_relay->writer->durable_end()));
}

void Confirm(uint64_t lsn) {
  if (lsn <= g_relay->confirmed_lsn) return;
  if (fault::Hit("relay.after_fsync_before_confirm") == fault::Action::Error)
    Fail("injected fault", MakeError("relay.after_fsync_before_confirm"));
  pg::CallPostgres([lsn] { LogicalConfirmReceivedLocation(lsn); });
  g_relay->confirmed_lsn = lsn;
}

namespace {

// Log retention (docs/log.md): at most once per interval, after a pass, when everything appended
// is durable — never on the append path, never between an append and its fdatasync. Deletes
// segments every live consumer is past; with trellara.log_retention_max_size set, marks the
// consumers it overtakes lost first. A failure is logged and retried; capture goes on.
constexpr uint64_t kRetentionIntervalUs = 1'000'000;
constexpr uint64_t kRetentionWarnEveryUs = 60'000'000;
uint64_t last_retention_us = 0;
uint64_t last_retention_warning_us = 0;
char last_retention_error[256];  // plain buffer: no static constructor or destructor in the .so

void ApplyRetentionWhenDue() {
  const uint64_t now = NowUs();
  if (now - last_retention_us < kRetentionIntervalUs) return;
  last_retention_us = now;
  auto report = log::ApplyRetention(*g_relay->device, log_directory, LogRetentionMaxBytes(), CompletesTransaction);
  std::string message;
  int level = LOG;
  if (report.ok()) last_retention_error[0] = '\0';
  if (!report.ok()) {
    // Retried every second; warned about when the reason changes, else once a minute.
    const std::string& reason = report.error().message;
    if (reason.compare(0, sizeof last_retention_error - 1, last_retention_error) == 0 &&
        now - last_retention_warning_us < kRetentionWarnEveryUs)
      return;
    strlcpy(last_retention_error, reason.c_str(), sizeof last_retention_error);
    last_retention_warning_us = now;
    level = WARNING;
    message = "log retention failed: " + report.error().message + "; nothing is deleted until this is fixed";
  } else if (!report->marked_lost.empty()) {
    level = WARNING;
    for (const auto& name : report->marked_lost) message += (message.empty() ? "" : ", ") + name;
    message = "log reached trellara.log_retention_max_size: consumer(s) " + message +
              " marked lost (they must be reseeded); deleted " + std::to_string(report->segments_deleted) +
              " segment(s), the log now starts at offset " + std::to_string(report->retained_from_offset);
  } else if (report->segments_deleted > 0) {
    message = "deleted " + std::to_string(report->segments_deleted) + " log segment(s) (" +
              std::to_string(report->bytes_deleted) + " bytes) no live consumer needs; the log starts at offset " +
              std::to_string(report->retained_from_offset);
  }
  if (message.empty()) return;
  pg::CallPostgres([&] {
    ereport(level, (errmsg("trellara relay of flow \"%s\": %s", flow_name, message.c_str())));
  });
}

// Appends a progress marker covering the source through `lsn`, waits until it is durable and
// returns the confirmable LSN.
uint64_t AppendProgressMarker(uint64_t lsn) {
  uint8_t payload[8];
  for (int i = 0; i < 8; i++) payload[i] = static_cast<uint8_t>(lsn >> (8 * i));
  auto offset = g_relay->writer->Append(kProgressRecordType, lsn, std::span<const uint8_t>(payload, 8));
  if (!offset.ok()) Fail("cannot append a progress marker", offset.error());
  TrackAppended(*offset, kProgressRecordType, lsn);
  g_relay->records_written++;
  g_relay->payload_bytes_appended += sizeof payload;
  WaitDurable(*offset + 1);
  return g_relay->ack->Durable(g_relay->writer->durable_end());
}

// The restart rule (core DecideRestart) applied at start. Returns the LSN to skip through, or an
// empty string in `refusal` set to the reason when the flow must not run.
uint64_t ApplyRestartRule(uint64_t slot_confirmed, std::string* refusal, bool* log_started_now) {
  LogStartRecord start;
  if (has_log_started_lsn) start.started_lsn = log_started_lsn;
  RestartDecision d = DecideRestart(ReadTailFrames(), slot_confirmed, start, flow_name);
  *log_started_now = false;
  switch (d.kind) {
    case RestartDecision::Kind::kRefuse:
      *refusal = d.reason + " HINT: " + d.remedy;
      return 0;
    case RestartDecision::Kind::kFreshLog:
      // The first frame of a new log: a start marker at the slot's position, so the log covers
      // what the slot has confirmed from its very first moment.
      g_relay->ack = std::make_unique<AckTracker>(0);
      if (source_ack_broker) g_relay->broker_ack = std::make_unique<AckTracker>(0);
      (void)AppendProgressMarker(slot_confirmed);
      *log_started_now = true;
      return slot_confirmed;
    case RestartDecision::Kind::kResume:
      g_relay->ack = std::make_unique<AckTracker>(d.covered_lsn);
      // What the log holds beyond the slot may not be with the broker yet: from the slot on.
      if (source_ack_broker) g_relay->broker_ack = std::make_unique<AckTracker>(slot_confirmed);
      if (d.torn_commit_lsn.has_value())
        pg::CallPostgres([&] {
          ereport(LOG, (errmsg("trellara relay of flow \"%s\": the log ends with %llu frame(s) of the transaction "
                               "committed at %X/%X without its commit marker; it is decoded and written again in full",
                               flow_name, static_cast<unsigned long long>(d.torn_frames),
                               LSN_ARGS(*d.torn_commit_lsn))));
        });
      return d.skip_through_lsn;
  }
  return 0;
}

// After a pass: make everything durable, maybe mark progress, confirm what is safe.
void FinishPass(uint64_t decoded_end) {
  WaitDurable(g_relay->writer->next_offset());
  uint64_t confirmable = g_relay->ack->Durable(g_relay->writer->durable_end());
  uint64_t now = NowUs();
  g_relay->progress.interval_us = ProgressIntervalUs();
  Board* b = SharedBoard();
  LWLockAcquire(b->lock, LW_SHARED);
  const uint64_t requested = board_slot->progress_requested_lsn;
  LWLockRelease(b->lock);
  if (ShouldWriteProgress(g_relay->progress, g_relay->ack->all_durable(), confirmable, decoded_end, now,
                          g_relay->last_progress_us, requested)) {
    confirmable = AppendProgressMarker(decoded_end);
    g_relay->last_progress_us = now;
  }
  // source_ack = 'broker_quorum': never past what the broker's quorum acknowledged.
  if (g_relay->broker_ack) confirmable = std::min(confirmable, BrokerConfirmable());
  // status() must never show the slot confirmed past log_durable_lsn: publish the durable LSN
  // before the slot can move to it.
  if (confirmable > g_relay->confirmed_lsn) Publish(FlowState::kRunning);
  Confirm(confirmable);
  Publish(FlowState::kRunning);
  ApplyRetentionWhenDue();
}

// The flow cannot continue as it is: error state (the launcher leaves it alone), then exit.
[[noreturn]] void EnterErrorState(const char* message) {
  RecordFailure(message, FlowState::kError);
  ereport(LOG, (errmsg("trellara relay of flow \"%s\" is in the error state and will not be restarted: %s",
                       flow_name, message)));
  proc_exit(0);
}

void RecordErrorAndExit() {
  // Called after a longjmp: the error is pending in the error data stack.
  HOLD_INTERRUPTS();
  // The error may have left from a callback that PostgreSQL calls outside any PG_TRY (a stream
  // commit, for one): its error context entries live in frames the longjmp left, so every later
  // ereport (the LOG lines below) would call into them. As PostgresMain does after an error.
  error_context_stack = nullptr;
  MemoryContextSwitchTo(TopMemoryContext);
  ErrorData* edata = CopyErrorData();
  if (got_sigterm && edata->sqlerrcode == ERRCODE_ADMIN_SHUTDOWN) {
    ereport(LOG, (errmsg("%s", edata->message)));
    FlushErrorState();
    proc_exit(0);
  }
  const plugin::DecodingTransaction& tx = plugin::CurrentTransaction();
  bool in_transaction = decoding_started && tx.open;
  int earlier = CountTransactionFailure(in_transaction, tx.xid, tx.commit_lsn);
  RelayFailureKind kind = ClassifyRelayFailure(unpack_sql_state(edata->sqlerrcode), in_transaction, earlier);
  const char* message = edata->message != nullptr ? edata->message : "unknown error";
  // The board keeps what an operator needs: the message and, when there is one, the remedy.
  char text[kLastErrorBytes];
  if (kind == RelayFailureKind::kUncapturable) {
    char remedy[512];
    snprintf(remedy, sizeof remedy,
             "the relay stopped instead of retrying a transaction that fails the same way every time. Fix the "
             "cause (%s), then SELECT trellara.start_flow('%s'); if it cannot be captured at all, recreate the flow "
             "(trellara.drop_flow, trellara.create_flow: the new slot starts after it) and reseed the target",
             edata->hint != nullptr ? edata->hint : "see the message", flow_name);
    snprintf(text, sizeof text, "transaction %u (commit LSN %X/%X%s%s) of flow \"%s\" cannot be captured: %s HINT: %s",
             tx.xid, LSN_ARGS(tx.commit_lsn), tx.relation[0] != '\0' ? ", relation " : "", tx.relation, flow_name,
             message, remedy);
    EmitErrorReport();
    FlushErrorState();
    EnterErrorState(text);
  }
  snprintf(text, sizeof text, "%s%s%s", message, edata->hint != nullptr ? " HINT: " : "",
           edata->hint != nullptr ? edata->hint : "");
  RecordFailure(text);
  EmitErrorReport();
  FlushErrorState();
  proc_exit(1);
}

}  // namespace
}  // namespace trellara::relay::worker

void trellara_relay_main(Datum) {
  using namespace trellara::relay;
  using namespace trellara::relay::worker;
  using namespace trellara;
  pqsignal(SIGHUP, SignalHandlerForConfigReload);
  pqsignal(SIGTERM, HandleSigterm);
  BackgroundWorkerUnblockSignals();
  strlcpy(flow_name, MyBgworkerEntry->bgw_extra, NAMEDATALEN);
  BackgroundWorkerInitializeConnection(FlowDatabase(), nullptr, 0);
  if (SharedBoard() == nullptr) proc_exit(1);
  switch (ClaimBoardSlot()) {
    case Claim::kClaimed: break;
    case Claim::kAlreadyRunning:
      ereport(LOG, (errmsg("trellara relay of flow \"%s\" is already running; this duplicate exits", flow_name)));
      proc_exit(0);
    case Claim::kStopping:
      ereport(LOG, (errmsg("trellara relay of flow \"%s\" exits at its start: stop_flow or drop_flow is stopping the "
                           "flow", flow_name)));
      proc_exit(0);
  }
  on_shmem_exit(ReleaseBoardSlot, 0);
  started_at = GetCurrentTimestamp();

  sigjmp_buf local_sigjmp_buf;
  if (sigsetjmp(local_sigjmp_buf, 1) != 0) RecordErrorAndExit();
  PG_exception_stack = &local_sigjmp_buf;

  if (!ReadFlow()) {
    ereport(LOG, (errmsg("trellara relay of flow \"%s\" exits: the flow is dropped or disabled", flow_name)));
    proc_exit(0);
  }
  pgstat_report_appname(flow_name);
  if (pg_mkdir_p(log_directory, S_IRWXU) != 0 && errno != EEXIST)
    ereport(ERROR, (errcode_for_file_access(),
                    errmsg("trellara relay of flow \"%s\" cannot create log directory \"%s\": %m", flow_name,
                           log_directory)));
  pg::GuardEntry("trellara relay start", [] { OpenLog(); });

  plugin::PinOutputSettingsForProcess();
  CheckLogicalDecodingRequirements();
  ReplicationSlotAcquire(slot_name, true);
  // Continuity (DESIGN §2): the log must cover at least what the slot has confirmed.
  static char refusal[kLastErrorBytes];
  refusal[0] = '\0';
  uint64 covered = 0;
  bool log_started_now = false;
  XLogRecPtr slot_confirmed = MyReplicationSlot->data.confirmed_flush;
  pg::GuardEntry("trellara relay restart rule", [&] {
    std::string why;
    covered = ApplyRestartRule(slot_confirmed, &why, &log_started_now);
    strlcpy(refusal, why.c_str(), sizeof refusal);
    if (refusal[0] == '\0') g_relay->confirmed_lsn = slot_confirmed;
  });
  if (refusal[0] != '\0') {
    ReplicationSlotRelease();
    EnterErrorState(refusal);
  }
  if (log_started_now || !has_log_started_lsn) RecordLogStart(log_started_now ? slot_confirmed : covered);
  char skip_lsn[32];
  snprintf(skip_lsn, sizeof skip_lsn, "%X/%X", LSN_ARGS(covered));
  List* options = NIL;
  options = lappend(options, makeDefElem(pstrdup("publication"), (Node*)makeString(pstrdup(publication)), -1));
  options = lappend(options, makeDefElem(pstrdup("flow"), (Node*)makeString(pstrdup(flow_name)), -1));
  options = lappend(options, makeDefElem(pstrdup("skip_through_lsn"), (Node*)makeString(pstrdup(skip_lsn)), -1));
  options = lappend(options, makeDefElem(pstrdup("streaming"), (Node*)makeString(pstrdup("true")), -1));
  // The relay's own decoding memory (docs/relay.md "Large transactions"): above it the reorder
  // buffer streams the largest in-progress transaction here, which the spill store keeps on disk.
  if (RelayDecodingWorkMemKb() > 0) {
    char work_mem[32];
    snprintf(work_mem, sizeof work_mem, "%d", RelayDecodingWorkMemKb());
    SetConfigOption("logical_decoding_work_mem", work_mem, PGC_SUSET, PGC_S_OVERRIDE);
  }
  static XLogReaderRoutine routine;
  // The no-wait reader returns at the end of flushed WAL instead of sleeping inside the page
  // callback (where neither SIGTERM nor postmaster death is seen); it reports that through the
  // reader's private_data, which logical decoding does not use otherwise.
  routine.page_read = read_local_xlog_page_no_wait;
  routine.segment_open = wal_segment_open;
  routine.segment_close = wal_segment_close;
  MemoryContext decoding_memory =
      AllocSetContextCreate(TopMemoryContext, "trellara relay decoding", ALLOCSET_DEFAULT_SIZES);
  LogicalDecodingContext* ctx =
      CreateDecodingContext(InvalidXLogRecPtr, options, false, &routine, PrepareWrite, DoWrite, UpdateProgress);
  ctx->reader->private_data = &wal_reader_private;
  XLogBeginRead(ctx->reader, MyReplicationSlot->data.restart_lsn);
  decoding_started = true;
  ereport(LOG, (errmsg("trellara relay of flow \"%s\" started: slot \"%s\", publication \"%s\", log \"%s\", log "
                       "covers the source through %s",
                       flow_name, slot_name, publication, log_directory, skip_lsn)));
  pg::GuardEntry("trellara relay publish", [] { Publish(FlowState::kRunning); });

  long pass_sleep_ms = kPassSleepMs;
  while (!got_sigterm) {
    CHECK_FOR_INTERRUPTS();
    if (ConfigReloadPending) {
      ConfigReloadPending = false;
      ProcessConfigFile(PGC_SIGHUP);
    }
    XLogRecPtr end_of_wal = GetFlushRecPtr(nullptr);
    // Decode each pass inside one (xid-less, snapshot-less) transaction, as the SQL decoding
    // functions do: the reorder buffer then replays each source transaction in a cheap internal
    // subtransaction instead of starting and aborting a full transaction per source transaction.
    bool in_pass_transaction = ctx->reader->EndRecPtr < end_of_wal;
    if (in_pass_transaction) StartTransactionCommand();
    wal_reader_private.end_of_wal = false;
    while (ctx->reader->EndRecPtr < end_of_wal && !got_sigterm) {
      // Before every read, not once per pass (docs/relay.md "Memory contexts"): the WAL reader
      // allocates in CurrentMemoryContext — its record buffer when a record spanning pages is
      // larger than any before, its decode buffer, each record too large for that buffer — and
      // uses them at later reads, across passes. A replayed transaction returns with the pass
      // transaction's context current (ReorderBufferProcessTXN rolls back its subtransaction and
      // does not restore the caller's context), and that context is freed by the commit below:
      // a buffer allocated there is used after it is freed, and handed out again for decoded rows.
      MemoryContextSwitchTo(decoding_memory);
      char* errm = nullptr;
      XLogRecord* record = XLogReadRecord(ctx->reader, &errm);
      if (record == nullptr && wal_reader_private.end_of_wal) break;  // the rest is not flushed yet
      if (errm != nullptr)
        ereport(ERROR, (errmsg("trellara relay of flow \"%s\" could not read WAL at %X/%X: %s", flow_name,
                               LSN_ARGS(ctx->reader->EndRecPtr), errm)));
      if (record != nullptr) LogicalDecodingProcessRecord(ctx, ctx->reader);
      CHECK_FOR_INTERRUPTS();
    }
    MemoryContextSwitchTo(decoding_memory);
    XLogRecPtr decoded_end = ctx->reader->EndRecPtr;
    pg::GuardEntry("trellara relay pass", [decoded_end] { FinishPass(decoded_end); });
    if (in_pass_transaction) CommitTransactionCommand();
    pass_sleep_ms = cadence::kRelayPass.After(std::chrono::milliseconds(pass_sleep_ms), in_pass_transaction).count();
    (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, pass_sleep_ms, PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
  }
  // SIGTERM: everything appended is made durable and confirmed before leaving.
  XLogRecPtr decoded_end = ctx->reader->EndRecPtr;
  pg::GuardEntry("trellara relay stop", [decoded_end] { FinishPass(decoded_end); });
  FreeDecodingContext(ctx);
  ReplicationSlotRelease();
  ereport(LOG, (errmsg("trellara relay of flow \"%s\" stopped", flow_name)));
  proc_exit(0);
}
