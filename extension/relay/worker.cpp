// relay/worker.cpp — the relay worker of one flow: decodes the flow's logical slot with the
// `trellara` output plugin inside this background worker (no walsender), appends every record to
// the flow's local log, and confirms the slot only past what is durable there.
//
// NOTES
// - Acknowledgement (DESIGN §2, source -> log): LogicalConfirmReceivedLocation is called only
//   with AckTracker's answer: the commit LSN of the last transaction whose every frame is durable
//   (fdatasync'ed, indexed), or the LSN of a durable progress marker. Never before the fsync.
// - Restart: on start the worker finds the LSN the log already covers (last durable Envelope,
//   CommitMarker or progress marker) and passes it to the plugin as skip_through_lsn, so a crash
//   between fsync and confirm does not duplicate transactions in the log. A transaction whose
//   chunks were durable but whose commit marker was not is decoded again in full; its earlier
//   chunks stay in the log as identical duplicates that the applier's barrier recognises.
// - Idle and filtered flows: after a pass over all flushed WAL with every record durable, the
//   worker writes a progress marker when the decoder is well past what the log covers, then
//   confirms it, so the slot's restart_lsn keeps moving and WAL is not retained without bound.
// - Waiting: the worker waits on its latch, with io_uring completions arriving on an eventfd
//   watched by the same WaitLatchOrSocket; it never blocks in the ring where it cannot see
//   SIGTERM or postmaster death. WAL is read up to GetFlushRecPtr() of each pass, like
//   pg_logical_slot_get_changes, then the worker sleeps on its latch (100 ms) before the next pass.
// - Errors: any ERROR ends the worker after recording it on the status board (last_error); the
//   launcher restarts the flow with backoff. SIGTERM (stop_flow, shutdown) ends it cleanly.
// - C++ objects (device, writer, tracker) live behind one static pointer, never in a frame that a
//   Postgres ERROR could jump over; C++ calls go through GuardEntry.
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

#include <cstring>
#include <memory>
#include <string>

#include "pg/guard.h"
#include "plugin/plugin.h"
#include "relay/relay.h"
#include "relay/shared_state.h"
#include "trellara/fault.h"
#include "trellara/log/reader.h"
#include "trellara/log/retention.h"
#include "trellara/log/uring_device.h"
#include "trellara/log/writer.h"
#include "trellara/relay_progress.h"

namespace trellara::relay {
namespace {

#define LSN_ARGS(lsn) static_cast<uint32>((lsn) >> 32), static_cast<uint32>(lsn)

constexpr long kPassSleepMs = 100;
// Above this many appended-but-unacknowledged bytes, decoding pauses until they are durable.
constexpr uint64_t kMaxUnackedBytes = 32ull << 20;
constexpr long kHealthyAfterMs = 60'000;

volatile sig_atomic_t got_sigterm = false;

void HandleSigterm(SIGNAL_ARGS) {
  int save_errno = errno;
  got_sigterm = true;
  SetLatch(MyLatch);
  errno = save_errno;
}

// Everything C++ the worker owns; created once, never destroyed before exit.
struct Relay {
  std::unique_ptr<log::LogDevice> device;
  std::unique_ptr<log::LogWriter> writer;
  std::unique_ptr<AckTracker> ack;
  ProgressPolicy progress;
  uint64_t confirmed_lsn = 0;
  uint64_t last_progress_us = 0;
  uint64_t records_written = 0;
};
Relay* g_relay = nullptr;

// Plain data read from trellara.flows.
char flow_name[NAMEDATALEN];
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
  }
  if (state == FlowState::kRunning && board_slot->consecutive_failures > 0 &&
      TimestampDifferenceExceeds(started_at, GetCurrentTimestamp(), kHealthyAfterMs))
    board_slot->consecutive_failures = 0;
  LWLockRelease(b->lock);
}

void RecordFailure(const char* message) {
  Board* b = SharedBoard();
  if (b == nullptr || board_slot == nullptr) return;
  LWLockAcquire(b->lock, LW_EXCLUSIVE);
  board_slot->state = FlowState::kFailed;
  board_slot->consecutive_failures++;
  board_slot->last_error_at = GetCurrentTimestamp();
  strlcpy(board_slot->last_error, message, kLastErrorBytes);
  LWLockRelease(b->lock);
}

void ReleaseBoardSlot(int, Datum) {
  Board* b = SharedBoard();
  if (b == nullptr || board_slot == nullptr) return;
  LWLockAcquire(b->lock, LW_EXCLUSIVE);
  if (board_slot->pid == MyProcPid) {
    board_slot->pid = 0;
    if (board_slot->state != FlowState::kFailed) board_slot->state = FlowState::kStopped;
  }
  LWLockRelease(b->lock);
}

// Claims the board slot of the flow; false if another live worker already owns it.
bool ClaimBoardSlot() {
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
    return false;
  }
  s->pid = MyProcPid;
  s->database = MyDatabaseId;
  s->state = FlowState::kStarting;
  s->started_at = GetCurrentTimestamp();
  LWLockRelease(b->lock);
  board_slot = s;
  return true;
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
      "SELECT publication, slot_name, log_directory, enabled FROM trellara.flows WHERE name = $1", 1, argtypes,
      args, nullptr, true, 1);
  if (rc == SPI_OK_SELECT && SPI_processed == 1) {
    bool isnull = false;
    Datum enabled = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull);
    if (!isnull && DatumGetBool(enabled)) {
      strlcpy(publication, SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1), sizeof publication);
      strlcpy(slot_name, SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2), sizeof slot_name);
      strlcpy(log_directory, SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3), sizeof log_directory);
      found = true;
    }
  }
  SPI_finish();
  PopActiveSnapshot();
  CommitTransactionCommand();
  return found;
}

[[noreturn]] void Fail(const std::string& what, const Error& error, const char* hint = nullptr) {
  throw pg::SqlError(ERRCODE_IO_ERROR,
                     "trellara relay of flow \"" + std::string(flow_name) + "\": " + what + ": " + error.message, {},
                     hint ? hint : "");
}

// The LSN the log already covers: commit LSN of its last durable completing frame (0 if none).
uint64_t CoveredLsnOfLog() {
  log::DurableTail tail = g_relay->writer->durable_tail();
  if (!tail.offset) return 0;
  auto reader = log::LogReader::Open(*g_relay->device, log_directory);
  if (!reader.ok()) Fail("cannot read its log " + std::string(log_directory), reader.error());
  for (uint64_t o = *tail.offset + 1; o-- > 0;) {
    Status s = (*reader)->Seek(o);
    if (!s.ok()) Fail("cannot seek to offset " + std::to_string(o) + " of its log", s.error());
    auto rec = (*reader)->Next();
    if (!rec.ok()) Fail("cannot read offset " + std::to_string(o) + " of its log", rec.error());
    if (!rec->has_value()) break;
    if (CompletesTransaction((*rec)->type)) return (*rec)->commit_lsn;
    if (o == 0) break;
  }
  return 0;
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
  g_relay->ack = std::make_unique<AckTracker>(CoveredLsnOfLog());
  g_relay->confirmed_lsn = g_relay->ack->confirmable_lsn();
}

// Submits what is appended and waits on the latch (and the ring's eventfd) until every offset
// below `target_end` is durable. Returns early only by ERROR or process exit.
void WaitDurable(uint64_t target_end) {
  if (fault::Hit("relay.after_append_before_fsync") == fault::Action::Error)
    Fail("injected fault", MakeError("relay.after_append_before_fsync"));
  Status s = g_relay->writer->Submit();
  if (!s.ok()) Fail("cannot write to its log", s.error());
  int fd = g_relay->writer->completion_event_fd();
  for (;;) {
    auto durable = g_relay->writer->Poll();
    if (!durable.ok()) Fail("cannot make its log durable", durable.error());
    if (*durable >= target_end) return;
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

void Confirm(uint64_t lsn) {
  if (lsn <= g_relay->confirmed_lsn) return;
  if (fault::Hit("relay.after_fsync_before_confirm") == fault::Action::Error)
    Fail("injected fault", MakeError("relay.after_fsync_before_confirm"));
  pg::CallPostgres([lsn] { LogicalConfirmReceivedLocation(lsn); });
  g_relay->confirmed_lsn = lsn;
}

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

// After a pass: make everything durable, maybe mark progress, confirm what is safe.
void FinishPass(uint64_t decoded_end) {
  WaitDurable(g_relay->writer->next_offset());
  uint64_t confirmable = g_relay->ack->Durable(g_relay->writer->durable_end());
  uint64_t now = NowUs();
  if (ShouldWriteProgress(g_relay->progress, g_relay->ack->all_durable(), confirmable, decoded_end, now,
                          g_relay->last_progress_us)) {
    uint8_t payload[8];
    for (int i = 0; i < 8; i++) payload[i] = static_cast<uint8_t>(decoded_end >> (8 * i));
    auto offset = g_relay->writer->Append(kProgressRecordType, decoded_end, std::span<const uint8_t>(payload, 8));
    if (!offset.ok()) Fail("cannot append a progress marker", offset.error());
    g_relay->ack->Appended(*offset, kProgressRecordType, decoded_end);
    g_relay->records_written++;
    WaitDurable(*offset + 1);
    confirmable = g_relay->ack->Durable(g_relay->writer->durable_end());
    g_relay->last_progress_us = now;
  }
  // status() must never show the slot confirmed past log_durable_lsn: publish the durable LSN
  // before the slot can move to it.
  if (confirmable > g_relay->confirmed_lsn) Publish(FlowState::kRunning);
  Confirm(confirmable);
  Publish(FlowState::kRunning);
  ApplyRetentionWhenDue();
}

// --- decoding context callbacks -----------------------------------------------------------------
extern "C" void PrepareWrite(LogicalDecodingContext* ctx, XLogRecPtr, TransactionId, bool) {
  resetStringInfo(ctx->out);
}

extern "C" void DoWrite(LogicalDecodingContext* ctx, XLogRecPtr, TransactionId, bool) {
  const char* data = ctx->out->data;
  int len = ctx->out->len;
  pg::GuardEntry("trellara relay write", [data, len] {
    const plugin::WrittenRecord& info = plugin::LastWrittenRecord();
    if (info.record_type == 3 && fault::Hit("relay.after_chunks_before_manifest") == fault::Action::Error)
      Fail("injected fault", MakeError("relay.after_chunks_before_manifest"));
    if (fault::Hit("relay.before_log_append") == fault::Action::Error)
      Fail("injected fault", MakeError("relay.before_log_append"));
    auto offset = g_relay->writer->Append(info.record_type, info.commit_lsn,
                                        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data),
                                                                 static_cast<size_t>(len)));
    if (!offset.ok())
      Fail("cannot append the record of xid " + std::to_string(info.xid) + " to its log", offset.error());
    g_relay->ack->Appended(*offset, info.record_type, info.commit_lsn);
    g_relay->records_written++;
    // Bound memory while decoding a large transaction: drain to disk before appending more.
    if (g_relay->writer->unacknowledged_bytes() > kMaxUnackedBytes) {
      WaitDurable(g_relay->writer->next_offset());
      g_relay->ack->Durable(g_relay->writer->durable_end());
    }
  });
}

void RecordErrorAndExit() {
  // Called after a longjmp: the error is pending in the error data stack.
  HOLD_INTERRUPTS();
  MemoryContextSwitchTo(TopMemoryContext);
  ErrorData* edata = CopyErrorData();
  // The board keeps what an operator needs: the message and, when there is one, the remedy.
  char text[kLastErrorBytes];
  snprintf(text, sizeof text, "%s%s%s", edata->message != nullptr ? edata->message : "unknown error",
           edata->hint != nullptr ? " HINT: " : "", edata->hint != nullptr ? edata->hint : "");
  RecordFailure(text);
  EmitErrorReport();
  FlushErrorState();
  proc_exit(1);
}

}  // namespace
}  // namespace trellara::relay

void trellara_relay_main(Datum) {
  using namespace trellara::relay;
  using namespace trellara;
  pqsignal(SIGHUP, SignalHandlerForConfigReload);
  pqsignal(SIGTERM, HandleSigterm);
  BackgroundWorkerUnblockSignals();
  strlcpy(flow_name, MyBgworkerEntry->bgw_extra, NAMEDATALEN);
  BackgroundWorkerInitializeConnection(FlowDatabase(), nullptr, 0);
  if (SharedBoard() == nullptr) proc_exit(1);
  if (!ClaimBoardSlot()) {
    ereport(LOG, (errmsg("trellara relay of flow \"%s\" is already running; this duplicate exits", flow_name)));
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
  char skip_lsn[32];
  uint64 covered = g_relay->ack->confirmable_lsn();
  snprintf(skip_lsn, sizeof skip_lsn, "%X/%X", LSN_ARGS(covered));
  List* options = NIL;
  options = lappend(options, makeDefElem(pstrdup("publication"), (Node*)makeString(pstrdup(publication)), -1));
  options = lappend(options, makeDefElem(pstrdup("flow"), (Node*)makeString(pstrdup(flow_name)), -1));
  options = lappend(options, makeDefElem(pstrdup("skip_through_lsn"), (Node*)makeString(pstrdup(skip_lsn)), -1));
  static XLogReaderRoutine routine;
  routine.page_read = read_local_xlog_page;
  routine.segment_open = wal_segment_open;
  routine.segment_close = wal_segment_close;
  MemoryContext decoding_memory =
      AllocSetContextCreate(TopMemoryContext, "trellara relay decoding", ALLOCSET_DEFAULT_SIZES);
  LogicalDecodingContext* ctx =
      CreateDecodingContext(InvalidXLogRecPtr, options, false, &routine, PrepareWrite, DoWrite, nullptr);
  XLogBeginRead(ctx->reader, MyReplicationSlot->data.restart_lsn);
  ereport(LOG, (errmsg("trellara relay of flow \"%s\" started: slot \"%s\", publication \"%s\", log \"%s\", log "
                       "covers the source through %s",
                       flow_name, slot_name, publication, log_directory, skip_lsn)));
  pg::GuardEntry("trellara relay publish", [] { Publish(FlowState::kRunning); });

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
    if (in_pass_transaction) {
      StartTransactionCommand();
      // The WAL reader grows its record buffer in CurrentMemoryContext and keeps it across
      // passes: it must not be the transaction's context, which the commit below frees.
      MemoryContextSwitchTo(decoding_memory);
    }
    while (ctx->reader->EndRecPtr < end_of_wal && !got_sigterm) {
      char* errm = nullptr;
      XLogRecord* record = XLogReadRecord(ctx->reader, &errm);
      if (errm != nullptr)
        ereport(ERROR, (errmsg("trellara relay of flow \"%s\" could not read WAL at %X/%X: %s", flow_name,
                               LSN_ARGS(ctx->reader->EndRecPtr), errm)));
      if (record != nullptr) LogicalDecodingProcessRecord(ctx, ctx->reader);
      CHECK_FOR_INTERRUPTS();
    }
    XLogRecPtr decoded_end = ctx->reader->EndRecPtr;
    pg::GuardEntry("trellara relay pass", [decoded_end] { FinishPass(decoded_end); });
    if (in_pass_transaction) CommitTransactionCommand();
    (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, kPassSleepMs, PG_WAIT_EXTENSION);
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
