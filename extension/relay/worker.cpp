// relay/worker.cpp — the relay worker of one flow: decodes the flow's logical slot with the
// `trellara` output plugin inside this background worker (no walsender), appends every record to
// the flow's local log, and confirms the slot only past what is durable there.
//
// NOTES
// - Acknowledgement (DESIGN §2, source -> log): LogicalConfirmReceivedLocation is called only
//   with AckTracker's answer: the commit LSN of the last transaction whose every frame is durable
//   (fdatasync'ed, indexed), or the LSN of a durable progress marker. Never before the fsync.
// - Group commit pipelining: a pass does not wait for its own fdatasync. It submits its frames;
//   between passes the worker waits on its latch and the ring's eventfd, acknowledging what each
//   completion made durable, and a latch wake starts the next pass while the previous group's
//   fdatasync is still in flight (worker_confirm.cpp EndPass, WaitBetweenPasses). The writer
//   acknowledges an append made during an fdatasync only with a later one.
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
// - trellara.standby_slot_names (failover/standby_hold.cpp): each pass reads only WAL every named
//   physical standby has flushed (the page reader never returns bytes past it), so no target gets
//   ahead of a promoted standby; the worker logs every 30 s while a standby holds it.
// - Idle and filtered flows: after a pass over all flushed WAL with every record durable, the
//   worker writes a progress marker when the decoder is well past what the log covers, then
//   confirms it, so the slot's restart_lsn keeps moving and WAL is not retained without bound.
// - Pass cadence: a backend that commits (its commit record flushed) sets the latch of the relays
//   of its database (shared_state.cpp WakeRelaysAtCommit), so the next pass starts at once, as a
//   walsender is woken at a flush; a wake consumed by the durability wait starts it too. Otherwise
//   the worker sleeps 5 ms after a pass that read WAL, doubling to 100 ms while there is none (an
//   asynchronous commit is found by that poll once the WAL writer flushed it).
// - Waiting: the worker waits on its latch, with io_uring completions arriving on an eventfd
//   watched by the same WaitLatchOrSocket; it never blocks in the ring where it cannot see
//   SIGTERM or postmaster death. WAL is read up to GetFlushRecPtr() of each pass, like
//   pg_logical_slot_get_changes, then the worker sleeps on its latch (100 ms) before the next pass.
// - Errors: any ERROR ends the worker after recording it on the status board (last_error); the
//   launcher restarts the flow with backoff. SIGTERM (stop_flow, shutdown) ends it cleanly.
// - C++ objects (device, writer, tracker) live behind one static pointer, never in a frame that a
//   Postgres ERROR could jump over; C++ calls go through GuardEntry.
// - Files: this one starts the worker, runs its pass loop and ends it on an error; the
//   decoding-context callbacks, which append each record to the log, are worker_decode.cpp; the
//   durability wait, progress markers and slot confirmation worker_confirm.cpp; opening the log
//   and the restart rule worker_restart.cpp; log retention worker_retention.cpp; the flow's row of
//   trellara.flows worker_catalog.cpp; its status board slot worker_board.cpp. What they share is
//   declared in worker_internal.h.
extern "C" {
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlogreader.h"
#include "access/xlogutils.h"
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
#include "utils/timestamp.h"
#include "utils/wait_event.h"

PGDLLEXPORT void trellara_relay_main(Datum main_arg);
}

#include <cstdio>
#include <string>

#include "failover/failover.h"
#include "pg/guard.h"
#include "plugin/plugin.h"
#include "relay/relay.h"
#include "relay/shared_state.h"
#include "relay/worker_internal.h"
#include "trellara/base/cadence.h"
#include "trellara/capture/relay_progress.h"

namespace trellara::relay::worker {

// The state the worker's files share (worker_internal.h), defined here once.
volatile sig_atomic_t got_sigterm = false;
Relay* g_relay = nullptr;
char flow_name[NAMEDATALEN];

namespace {

// Sleep between passes: cadence::kRelayPass (base/cadence.h).
constexpr long kPassSleepMs = cadence::kRelayPass.max.count();

void HandleSigterm(SIGNAL_ARGS) {
  int save_errno = errno;
  got_sigterm = true;
  SetLatch(MyLatch);
  errno = save_errno;
}

// The decoding context exists (an error from here on may belong to a source transaction).
bool decoding_started = false;
// The no-wait page reader's report that it reached the end of flushed WAL.
ReadLocalXLogPageNoWaitPrivate wal_reader_private;

// trellara.standby_slot_names (failover/standby_hold.cpp): the WAL position this pass may read up
// to, UINT64_MAX when no standby is named. The page reader below never returns bytes past it, so
// a record (a commit) ending past what every named standby flushed is not decoded this pass.
uint64_t standby_hold_lsn = UINT64_MAX;
uint64_t standby_hold_logged_us = 0;
constexpr uint64_t kStandbyHoldLogEveryUs = 30'000'000;

int ReadPageHeld(XLogReaderState* state, XLogRecPtr page, int required, XLogRecPtr record, char* buffer) {
  const uint64_t hold = standby_hold_lsn;
  if (hold != UINT64_MAX && page + static_cast<uint64_t>(required) > hold) {
    wal_reader_private.end_of_wal = true;  // as at the end of flushed WAL: read again next pass
    return -1;
  }
  int read = read_local_xlog_page_no_wait(state, page, required, record, buffer);
  if (read > 0 && hold != UINT64_MAX && page + static_cast<uint64_t>(read) > hold)
    read = static_cast<int>(hold - page);  // >= required (checked above)
  return read;
}

// The pass's end of WAL: flushed WAL, held back to what the named standbys flushed. Logs (at most
// every 30 s) while a standby holds capture.
XLogRecPtr PassEndOfWal() {
  XLogRecPtr end = GetFlushRecPtr(nullptr);
  char why[256];
  standby_hold_lsn = failover::StandbyHoldLsn(why, sizeof why);
  if (standby_hold_lsn < end) {
    const uint64_t now = NowUs();
    if (now - standby_hold_logged_us >= kStandbyHoldLogEveryUs) {
      standby_hold_logged_us = now;
      ereport(LOG, (errmsg("trellara relay of flow \"%s\": capture is held at %X/%X (WAL is flushed to %X/%X): %s",
                           flow_name, LSN_ARGS(standby_hold_lsn), LSN_ARGS(end), why),
                    errhint("trellara.standby_slot_names holds capture until every named standby has the WAL; "
                            "check the standby, or remove it from the setting and reload.")));
    }
    end = standby_hold_lsn;
  }
  return end;
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

  sigjmp_buf local_sigjmp_buf;
  if (sigsetjmp(local_sigjmp_buf, 1) != 0) RecordErrorAndExit();
  PG_exception_stack = &local_sigjmp_buf;

  if (!ReadFlow()) {
    ereport(LOG, (errmsg("trellara relay of flow \"%s\" exits: the flow is dropped or disabled", flow_name)));
    proc_exit(0);
  }
  pgstat_report_appname(flow_name);
  // After a promotion the directory holds the standby's copy of the old primary's log: never
  // append to it (failover/log_timeline.cpp). A new log starts from the slot and replaces the
  // catalog's log_started_lsn.
  static char timeline_refusal[kLastErrorBytes];
  bool replace_log_start = false;
  switch (failover::PrepareLogForTimeline(flow_name, log_directory, timeline_refusal, sizeof timeline_refusal)) {
    case failover::LogTimeline::kRefuse: EnterErrorState(timeline_refusal);
    case failover::LogTimeline::kNewLogAfterPromotion:
      has_log_started_lsn = false;
      replace_log_start = true;
      break;
    case failover::LogTimeline::kOwn: break;
  }
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
  if (log_started_now || !has_log_started_lsn)
    RecordLogStart(log_started_now ? slot_confirmed : covered, replace_log_start);
  char skip_lsn[32];
  snprintf(skip_lsn, sizeof skip_lsn, "%X/%X", LSN_ARGS(covered));
  List* options = NIL;
  options = lappend(options, makeDefElem(pstrdup("publication"), (Node*)makeString(pstrdup(publication)), -1));
  options = lappend(options, makeDefElem(pstrdup("flow"), (Node*)makeString(pstrdup(flow_name)), -1));
  options = lappend(options, makeDefElem(pstrdup("skip_through_lsn"), (Node*)makeString(pstrdup(skip_lsn)), -1));
  options = lappend(options, makeDefElem(pstrdup("streaming"), (Node*)makeString(pstrdup("true")), -1));
  if (flow_partitions > 0) {
    char partitions[16];
    char map_version[16];
    snprintf(partitions, sizeof partitions, "%d", flow_partitions);
    snprintf(map_version, sizeof map_version, "%d", flow_map_version);
    options = lappend(options, makeDefElem(pstrdup("partitions"), (Node*)makeString(pstrdup(partitions)), -1));
    options = lappend(options, makeDefElem(pstrdup("map_version"), (Node*)makeString(pstrdup(map_version)), -1));
  }
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
  routine.page_read = ReadPageHeld;
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
    XLogRecPtr end_of_wal = PassEndOfWal();
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
    // Group commit pipelining: the pass's frames are submitted, not waited for; what is durable
    // is confirmed and published now, the rest by the wait below as its fdatasync completes.
    pg::GuardEntry("trellara relay pass", [decoded_end] { EndPass(decoded_end); });
    if (in_pass_transaction) CommitTransactionCommand();
    pass_sleep_ms = cadence::kRelayPass.After(std::chrono::milliseconds(pass_sleep_ms), in_pass_transaction).count();
    // A commit flushed during the pass set the latch (WakeRelaysAtCommit): go on at once.
    const long sleep_ms = pass_sleep_ms;
    if (!latch_wake_consumed)
      pg::GuardEntry("trellara relay wait", [sleep_ms, decoded_end] { WaitBetweenPasses(sleep_ms, decoded_end); });
    latch_wake_consumed = false;
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
