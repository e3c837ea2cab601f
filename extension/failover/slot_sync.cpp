// failover/slot_sync.cpp — the slot sync worker of a physical standby: keeps a logical slot per
// flow with the primary slot's restart_lsn, catalog_xmin and confirmed_flush, so that after a
// promotion the flow's relay resumes from it (issue 41; docs/decisions.md "Flow slots on
// physical standbys"). The positions it may set are decided by core DecideSlotSync (never ahead
// of what the standby replayed, never backwards, a new slot only once the primary's passes what
// this standby can reserve); this file reads the primary over libpq and writes the local slot.
//
// NOTES
// - Registered only when trellara.standby_slot_sync = on (default off) and it does nothing unless
//   the server is in recovery: on a primary, or after a promotion, it exits for good (exit 0).
// - It never decodes: it copies slot metadata, the way EDB's pg_failover_slots does on PG15. That is
//   safe only because the primary's slot still reserves WAL and catalog rows from those positions
//   and this standby's physical slot with hot_standby_feedback carries the standby's catalog_xmin
//   to the primary; without both (primary_slot_name, hot_standby_feedback) it syncs nothing and
//   says so in the server log.
// - A new local slot is created RS_EPHEMERAL, reserves WAL and the catalog horizon it can honour
//   here, and is persisted only when given the primary's positions; released unpersisted it is
//   dropped, so a failed round leaves no slot that promises what it cannot keep.
// - Durable before effective: the slot's data is saved to disk before its effective catalog
//   horizon and the required LSN are recomputed, as LogicalConfirmReceivedLocation does.
// - Errors: libpq failures and waits are LOG lines and the worker tries again next round; an ERROR
//   (a slot acquired by someone else) ends the worker and the postmaster restarts it in 10 s.
// - Frames that call ERROR-capable Postgres functions hold plain data only; core's decision is made
//   inside GuardEntry and copied out into a POD.
extern "C" {
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlogrecovery.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "replication/slot.h"
#include "replication/walreceiver.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/procarray.h"
#include "storage/spin.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "libpq-fe.h"

PGDLLEXPORT void trellara_slot_sync_main(Datum main_arg);
}

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "failover/failover.h"
#include "pg/guard.h"
#include "relay/relay.h"
#include "trellara/base/fault.h"
#include "trellara/capture/slot_sync.h"

namespace trellara::failover {

namespace {

bool standby_slot_sync = false;  // trellara.standby_slot_sync

constexpr long kSyncRoundMs = 1000;          // one round a second
constexpr int kSlotsMax = 1024;              // as trellara.max_flows' maximum
constexpr int kQuietRoundsBetweenLogs = 30;  // a repeated wait or refusal is logged every 30 rounds
constexpr char kSlotQuery[] =
    "SELECT s.slot_name, s.restart_lsn, s.confirmed_flush_lsn, s.catalog_xmin, s.plugin, s.database "
    "FROM trellara.flows f JOIN pg_catalog.pg_replication_slots s ON s.slot_name = f.slot_name "
    "WHERE s.slot_type = 'logical' AND ($1::name IS NULL OR s.slot_name = $1::name) ORDER BY 1";
// Negative control (tests only, TRELLARA_FAULTS=defect.standby_slot_past_downstream:1:defect): the
// standby's slot is given the primary's log-durable position (trellara.status().log_durable_lsn)
// as its confirmed position, past what the targets have applied under source_ack = 'applied'. After
// an unplanned promotion the new relay starts past transactions no target has: they are lost.
constexpr char kSlotQueryDefect[] =
    "SELECT s.slot_name, s.restart_lsn, coalesce(st.log_durable_lsn, s.confirmed_flush_lsn), s.catalog_xmin, "
    "s.plugin, s.database "
    "FROM trellara.flows f JOIN pg_catalog.pg_replication_slots s ON s.slot_name = f.slot_name "
    "LEFT JOIN trellara.status() st ON st.flow = f.name "
    "WHERE s.slot_type = 'logical' AND ($1::name IS NULL OR s.slot_name = $1::name) ORDER BY 1";
// What the worker tells the primary about each flow slot (trellara.report_standby_slot), at a
// change and at least every kReportEveryMs.
constexpr char kReportQuery[] =
    "SELECT trellara.report_standby_slot($1::name, $2::name, $3, $4::pg_lsn, $5::pg_lsn, $6::pg_lsn, $7)";
constexpr long kReportEveryMs = 10'000;

// A decision copied out of core: plain data only.
struct Decision {
  SlotSyncDecision::Kind kind;
  XLogRecPtr restart_lsn;
  XLogRecPtr confirmed_flush;
  TransactionId catalog_xmin;
  char reason[512];
};

// As relay/worker_internal.h: PG15's LSN_FORMAT_ARGS uses a C-only builtin.
#define LSN_ARGS(lsn) static_cast<uint32>((lsn) >> 32), static_cast<uint32>(lsn)

int rounds = 0;

bool ShouldLog() { return rounds % kQuietRoundsBetweenLogs == 1; }

XLogRecPtr ParseLsn(const char* text) {
  unsigned hi = 0, lo = 0;
  if (text == nullptr || sscanf(text, "%X/%X", &hi, &lo) != 2) return InvalidXLogRecPtr;
  return (static_cast<XLogRecPtr>(hi) << 32) | lo;
}

Decision Decide(const PrimarySlot& primary, bool has_local, const LocalSlot& local, bool local_is_new,
                XLogRecPtr replay_lsn, const char* slot_name) {
  Decision out{};
  pg::GuardEntry("trellara slot sync decision", [&] {
    SlotSyncDecision d = DecideSlotSync(primary, has_local ? std::optional<LocalSlot>(local) : std::nullopt,
                                        local_is_new, replay_lsn, slot_name);
    out.kind = d.kind;
    out.restart_lsn = d.restart_lsn;
    out.confirmed_flush = d.confirmed_flush_lsn;
    out.catalog_xmin = d.catalog_xmin;
    strlcpy(out.reason, d.reason.c_str(), sizeof out.reason);
  });
  return out;
}

// Gives the acquired slot the decided positions: saved to disk first, made effective after.
void SetAcquiredSlot(const Decision& d, bool is_new) {
  ReplicationSlot* slot = MyReplicationSlot;
  SpinLockAcquire(&slot->mutex);
  slot->data.restart_lsn = d.restart_lsn;
  slot->data.catalog_xmin = d.catalog_xmin;
  slot->data.confirmed_flush = d.confirmed_flush;
  SpinLockRelease(&slot->mutex);
  ReplicationSlotMarkDirty();
  if (is_new)
    ReplicationSlotPersist();  // saves it
  else
    ReplicationSlotSave();
  SpinLockAcquire(&slot->mutex);
  slot->effective_catalog_xmin = d.catalog_xmin;
  SpinLockRelease(&slot->mutex);
  ReplicationSlotsComputeRequiredXmin(false);
  ReplicationSlotsComputeRequiredLSN();
}

int FetchPrimarySlots(const char* only_slot);
extern PrimarySlot slots[kSlotsMax];

// What the primary is told about one flow slot (trellara.standby_slots).
struct SlotReport {
  char state[16];  // synced | waiting | unprotected
  XLogRecPtr confirmed;
  XLogRecPtr restart;
  XLogRecPtr replay;
  char detail[512];
};

void SetReport(SlotReport* report, const char* state, const char* detail) {
  // Negative control (tests only, TRELLARA_FAULTS=defect.standby_reports_synced_while_waiting:1:defect):
  // the primary is told the slot is synced while this worker waits or cannot keep it.
  if (strcmp(state, "synced") != 0 &&
      fault::Hit("defect.standby_reports_synced_while_waiting") == fault::Action::Defect)
    state = "synced";
  strlcpy(report->state, state, sizeof report->state);
  strlcpy(report->detail, detail, sizeof report->detail);
  report->replay = GetXLogReplayRecPtr(nullptr);
  report->confirmed = InvalidXLogRecPtr;
  report->restart = InvalidXLogRecPtr;
  ReplicationSlot* slot = MyReplicationSlot;
  if (slot != nullptr) {
    report->confirmed = slot->data.confirmed_flush;
    report->restart = slot->data.restart_lsn;
  }
}

// One flow's slot: create or acquire the local slot, decide, set or leave it, release; `report`
// says where it is for the primary.
void SyncOneSlot(const char* slot_name, const PrimarySlot& primary, SlotReport* report) {
  SetReport(report, "waiting", "the slot is not on this standby yet");
  XLogRecPtr replay_lsn = GetXLogReplayRecPtr(nullptr);
  ReplicationSlot* existing = SearchNamedReplicationSlot(slot_name, true);
  if (existing != nullptr && SlotIsPhysical(existing)) {
    if (ShouldLog())
      ereport(WARNING, (errmsg("trellara slot sync: \"%s\" is a physical slot on this standby; the flow's logical slot "
                               "cannot be kept here", slot_name),
                        errhint("Drop the physical slot \"%s\" on the standby.", slot_name)));
    SetReport(report, "waiting", "a physical slot of the same name exists on the standby; drop it there");
    return;
  }
  const bool is_new = existing == nullptr;
  LocalSlot local;
  if (is_new) {
    ReplicationSlotCreate(slot_name, true, RS_EPHEMERAL, false);
    ReplicationSlot* slot = MyReplicationSlot;
    SpinLockAcquire(&slot->mutex);
    slot->data.database = MyDatabaseId;
    namestrcpy(&slot->data.plugin, "trellara");
    SpinLockRelease(&slot->mutex);
    // Reserve what this standby can still honour: WAL from its last restartpoint, catalog rows
    // from the oldest xid decoding could need. The primary's slot must be at or past both.
    ReplicationSlotReserveWal();
    LWLockAcquire(ReplicationSlotControlLock, LW_EXCLUSIVE);
    LWLockAcquire(ProcArrayLock, LW_EXCLUSIVE);
    TransactionId horizon = GetOldestSafeDecodingTransactionId(true);
    slot->effective_catalog_xmin = horizon;
    slot->data.catalog_xmin = horizon;
    ReplicationSlotsComputeRequiredXmin(true);
    LWLockRelease(ProcArrayLock);
    LWLockRelease(ReplicationSlotControlLock);
  } else {
    ReplicationSlotAcquire(slot_name, true);
  }
  local.restart_lsn = MyReplicationSlot->data.restart_lsn;
  local.confirmed_flush_lsn = MyReplicationSlot->data.confirmed_flush;
  local.catalog_xmin = MyReplicationSlot->data.catalog_xmin;
  Decision d = Decide(primary, true, local, is_new, replay_lsn, slot_name);
  // A new slot keeps its reservation while it waits (as pg_failover_slots does): dropped and made
  // again each round, its catalog horizon would move with the standby's next xid and a busy
  // primary's slot might never pass it.
  PrimarySlot latest = primary;
  while (is_new && d.kind == SlotSyncDecision::Kind::kWait) {
    if (ShouldLog()) ereport(LOG, (errmsg("trellara slot sync: waiting: %s", d.reason)));
    (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, kSyncRoundMs, PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
    CHECK_FOR_INTERRUPTS();
    rounds++;
    if (!RecoveryInProgress() || FetchPrimarySlots(slot_name) != 1) {
      ReplicationSlotRelease();  // not persisted: dropped
      SetReport(report, "waiting", d.reason);
      return;
    }
    latest = slots[0];
    replay_lsn = GetXLogReplayRecPtr(nullptr);
    d = Decide(latest, true, local, is_new, replay_lsn, slot_name);
  }
  switch (d.kind) {
    case SlotSyncDecision::Kind::kSet:
      SetAcquiredSlot(d, is_new);
      SetReport(report, "synced", "in step with the primary's slot");
      if (is_new)
        ereport(LOG, (errmsg("trellara slot sync: created slot \"%s\" on this standby at restart %X/%X, catalog_xmin "
                             "%u, confirmed %X/%X (the primary's slot; replayed to %X/%X)",
                             slot_name, LSN_ARGS(d.restart_lsn), d.catalog_xmin,
                             LSN_ARGS(d.confirmed_flush), LSN_ARGS(replay_lsn))));
      else
        ereport(DEBUG1, (errmsg("trellara slot sync: slot \"%s\" at restart %X/%X, catalog_xmin %u, confirmed %X/%X",
                                slot_name, LSN_ARGS(d.restart_lsn), d.catalog_xmin,
                                LSN_ARGS(d.confirmed_flush))));
      break;
    case SlotSyncDecision::Kind::kWait:
      if (ShouldLog()) ereport(LOG, (errmsg("trellara slot sync: waiting: %s", d.reason)));
      SetReport(report, is_new ? "waiting" : "synced", d.reason);
      break;
    case SlotSyncDecision::Kind::kKeep:
      ereport(DEBUG1, (errmsg("trellara slot sync: %s", d.reason)));
      SetReport(report, "synced", d.reason);
      break;
  }
  ReplicationSlotRelease();  // an ephemeral slot that was not persisted is dropped here
}

// Whether this standby can keep a slot at all: the primary must be told our catalog horizon.
bool HorizonProtected() {
  if (!hot_standby_feedback || PrimarySlotName == nullptr || PrimarySlotName[0] == '\0') {
    if (ShouldLog())
      ereport(WARNING,
              (errmsg("trellara slot sync: not syncing flow slots: hot_standby_feedback is %s and primary_slot_name is "
                      "\"%s\"; without both the primary may remove catalog rows the standby's slots need",
                      hot_standby_feedback ? "on" : "off", PrimarySlotName != nullptr ? PrimarySlotName : ""),
               errhint("Create a physical slot for this standby on the primary, set primary_slot_name to it and "
                       "hot_standby_feedback = on on the standby, then reload.")));
    return false;
  }
  if (PrimaryConnInfo == nullptr || PrimaryConnInfo[0] == '\0') {
    if (ShouldLog()) ereport(WARNING, (errmsg("trellara slot sync: primary_conninfo is empty; nothing to sync from")));
    return false;
  }
  return true;
}

// The primary's flow slots (all, or only `only_slot`), copied into `names`/`slots`; -1 when the
// primary cannot be read (logged). libpq never raises ERROR; the connection is closed on every path.
char names[kSlotsMax][NAMEDATALEN];
PrimarySlot slots[kSlotsMax];

int FetchPrimarySlots(const char* only_slot) {
  const char* keys[] = {"dbname", "dbname", "application_name", "connect_timeout", nullptr};
  const char* values[] = {PrimaryConnInfo, relay::FlowDatabase(), "trellara slot sync", "10", nullptr};
  PGconn* conn = PQconnectdbParams(keys, values, /*expand_dbname=*/1);
  if (PQstatus(conn) != CONNECTION_OK) {
    char message[512];
    strlcpy(message, PQerrorMessage(conn), sizeof message);
    PQfinish(conn);
    if (ShouldLog())
      ereport(LOG, (errmsg("trellara slot sync: cannot connect to the primary (primary_conninfo, database \"%s\"): %s",
                           relay::FlowDatabase(), message)));
    return -1;
  }
  const char* params[1] = {only_slot};
  const bool defect = fault::Hit("defect.standby_slot_past_downstream") == fault::Action::Defect;
  PGresult* res = PQexecParams(conn, defect ? kSlotQueryDefect : kSlotQuery, 1, nullptr, params, nullptr, nullptr, 0);
  if (PQresultStatus(res) != PGRES_TUPLES_OK) {
    char message[512];
    strlcpy(message, PQerrorMessage(conn), sizeof message);
    PQclear(res);
    PQfinish(conn);
    if (ShouldLog())
      ereport(LOG, (errmsg("trellara slot sync: cannot read the flow slots of the primary: %s", message)));
    return -1;
  }
  int count = 0;
  int skipped = 0;
  for (int i = 0; i < PQntuples(res) && count < kSlotsMax; i++) {
    const char* plugin = PQgetvalue(res, i, 4);
    const char* database = PQgetvalue(res, i, 5);
    if (strcmp(plugin, "trellara") != 0 || strcmp(database, relay::FlowDatabase()) != 0) {
      skipped++;
      continue;
    }
    strlcpy(names[count], PQgetvalue(res, i, 0), NAMEDATALEN);
    slots[count].restart_lsn = PQgetisnull(res, i, 1) ? 0 : ParseLsn(PQgetvalue(res, i, 1));
    slots[count].confirmed_flush_lsn = PQgetisnull(res, i, 2) ? 0 : ParseLsn(PQgetvalue(res, i, 2));
    slots[count].catalog_xmin =
        PQgetisnull(res, i, 3) ? 0 : static_cast<uint32_t>(strtoul(PQgetvalue(res, i, 3), nullptr, 10));
    count++;
  }
  PQclear(res);
  PQfinish(conn);
  if (skipped > 0 && ShouldLog())
    ereport(LOG, (errmsg("trellara slot sync: %d flow slot(s) on the primary use another plugin or database than "
                         "trellara in \"%s\"; not synced", skipped, relay::FlowDatabase())));
  return count;
}

// The last report sent per slot, to send again only at a change or every kReportEveryMs.
SlotReport last_reports[kSlotsMax];
char last_report_names[kSlotsMax][NAMEDATALEN];
TimestampTz last_report_at[kSlotsMax];

bool ReportChanged(int i, const char* name, const SlotReport& r, TimestampTz now) {
  return strcmp(last_report_names[i], name) != 0 || strcmp(last_reports[i].state, r.state) != 0 ||
         last_reports[i].confirmed != r.confirmed || last_reports[i].restart != r.restart ||
         strcmp(last_reports[i].detail, r.detail) != 0 ||
         TimestampDifferenceExceeds(last_report_at[i], now, static_cast<int>(kReportEveryMs));
}

// Tells the primary where each slot is (trellara.report_standby_slot), so check() there can say per
// standby whether a promotion keeps the flow. Best effort: a failure is logged, retried next round.
void SendReports(int count, char (*round_names)[NAMEDATALEN], const SlotReport* reports) {
  if (PrimarySlotName == nullptr || PrimarySlotName[0] == '\0' || count <= 0) return;
  const TimestampTz now = GetCurrentTimestamp();
  bool any = false;
  for (int i = 0; i < count && !any; i++) any = ReportChanged(i, round_names[i], reports[i], now);
  if (!any) return;
  const char* keys[] = {"dbname", "dbname", "application_name", "connect_timeout", nullptr};
  const char* values[] = {PrimaryConnInfo, relay::FlowDatabase(), "trellara slot sync", "10", nullptr};
  PGconn* conn = PQconnectdbParams(keys, values, /*expand_dbname=*/1);
  if (PQstatus(conn) != CONNECTION_OK) {
    PQfinish(conn);
    return;  // FetchPrimarySlots logs unreachable primaries
  }
  for (int i = 0; i < count; i++) {
    if (!ReportChanged(i, round_names[i], reports[i], now)) continue;
    char confirmed[32], restart[32], replay[32];
    snprintf(confirmed, sizeof confirmed, "%X/%X", LSN_ARGS(reports[i].confirmed));
    snprintf(restart, sizeof restart, "%X/%X", LSN_ARGS(reports[i].restart));
    snprintf(replay, sizeof replay, "%X/%X", LSN_ARGS(reports[i].replay));
    const char* params[7] = {PrimarySlotName, round_names[i], reports[i].state,
                             reports[i].confirmed != InvalidXLogRecPtr ? confirmed : nullptr,
                             reports[i].restart != InvalidXLogRecPtr ? restart : nullptr, replay, reports[i].detail};
    PGresult* res = PQexecParams(conn, kReportQuery, 7, nullptr, params, nullptr, nullptr, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
      if (ShouldLog())
        ereport(LOG, (errmsg("trellara slot sync: cannot report slot \"%s\" to the primary "
                             "(trellara.report_standby_slot; the role in primary_conninfo needs trellara_admin): %s",
                             round_names[i], PQerrorMessage(conn))));
      PQclear(res);
      break;
    }
    PQclear(res);
    last_reports[i] = reports[i];
    strlcpy(last_report_names[i], round_names[i], NAMEDATALEN);
    last_report_at[i] = now;
  }
  PQfinish(conn);
}

// Slots this worker keeps for flows that no longer exist — the flow was dropped on the primary and
// the drop replayed here — are dropped: left, they would hold WAL on this standby and, through
// hot_standby_feedback, the catalog horizon on the primary. Only slots of the trellara plugin in
// this database that nobody uses; on PostgreSQL 15 a standby cannot create logical slots itself, so
// such a slot is always this worker's. The flows are read from this standby's own (replicated)
// catalog. Plain C frame.
void DropSlotsOfDroppedFlows() {
  static char candidates[kSlotsMax][NAMEDATALEN];
  int n = 0;
  LWLockAcquire(ReplicationSlotControlLock, LW_SHARED);
  for (int i = 0; i < max_replication_slots && n < kSlotsMax; i++) {
    ReplicationSlot* slot = &ReplicationSlotCtl->replication_slots[i];
    if (!slot->in_use || SlotIsPhysical(slot) || slot->data.database != MyDatabaseId || slot->active_pid != 0 ||
        strcmp(NameStr(slot->data.plugin), "trellara") != 0)
      continue;
    strlcpy(candidates[n++], NameStr(slot->data.name), NAMEDATALEN);
  }
  LWLockRelease(ReplicationSlotControlLock);
  if (n == 0) return;
  bool stale[kSlotsMax] = {};
  SetCurrentStatementStartTimestamp();
  StartTransactionCommand();
  SPI_connect();
  PushActiveSnapshot(GetTransactionSnapshot());
  Oid argtypes[1] = {NAMEOID};
  for (int i = 0; i < n; i++) {
    NameData name;
    namestrcpy(&name, candidates[i]);
    Datum args[1] = {NameGetDatum(&name)};
    int rc = SPI_execute_with_args("SELECT 1 FROM trellara.flows WHERE slot_name = $1", 1, argtypes, args, nullptr,
                                   true, 1);
    stale[i] = rc == SPI_OK_SELECT && SPI_processed == 0;
  }
  SPI_finish();
  PopActiveSnapshot();
  CommitTransactionCommand();
  for (int i = 0; i < n; i++) {
    if (!stale[i]) continue;
    ReplicationSlotDrop(candidates[i], true);
    ereport(LOG, (errmsg("trellara slot sync: dropped slot \"%s\" on this standby: no flow uses it any more (the flow "
                         "was dropped on the primary)", candidates[i])));
  }
}

// Reads the primary's flow slots and syncs each, then reports them to the primary.
void SyncRound() {
  static char round_names[kSlotsMax][NAMEDATALEN];
  static PrimarySlot round_slots[kSlotsMax];
  static SlotReport reports[kSlotsMax];
  const bool protected_horizon = HorizonProtected();
  const int count = FetchPrimarySlots(nullptr);
  // Copied: SyncOneSlot may fetch again (into the same arrays) while it waits on a new slot.
  for (int i = 0; i < count; i++) {
    strlcpy(round_names[i], names[i], NAMEDATALEN);
    round_slots[i] = slots[i];
  }
  for (int i = 0; i < count; i++) {
    if (!RecoveryInProgress()) return;
    if (!protected_horizon) {
      SetReport(&reports[i], "unprotected",
                "hot_standby_feedback or primary_slot_name is not set on the standby: the slot is not synced");
      continue;
    }
    SyncOneSlot(round_names[i], round_slots[i], &reports[i]);
  }
  SendReports(count, round_names, reports);
  // Only once the primary was read (its trellara.flows exists, and so does this replica of it).
  if (count >= 0 && RecoveryInProgress()) DropSlotsOfDroppedFlows();
}

}  // namespace

void DefineFailoverGucs() {
  DefineCustomBoolVariable(
      "trellara.standby_slot_sync",
      "On a physical standby, keeps each flow's logical slot in step with the primary's (issue 41).",
      "Needs primary_slot_name and hot_standby_feedback = on. Does nothing on a primary. Takes effect at server "
      "start.",
      &standby_slot_sync, false, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
  DefineStandbyHoldGuc();
}

void RegisterSlotSync() {
  if (!standby_slot_sync) return;
  BackgroundWorker worker;
  std::memset(&worker, 0, sizeof worker);
  worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
  worker.bgw_start_time = BgWorkerStart_ConsistentState;
  worker.bgw_restart_time = 10;
  strlcpy(worker.bgw_library_name, "trellara", BGW_MAXLEN);
  strlcpy(worker.bgw_function_name, "trellara_slot_sync_main", BGW_MAXLEN);
  strlcpy(worker.bgw_name, "trellara slot sync", BGW_MAXLEN);
  strlcpy(worker.bgw_type, "trellara slot sync", BGW_MAXLEN);
  RegisterBackgroundWorker(&worker);
}

}  // namespace trellara::failover

void trellara_slot_sync_main(Datum) {
  using namespace trellara::failover;
  pqsignal(SIGHUP, SignalHandlerForConfigReload);
  pqsignal(SIGTERM, die);
  BackgroundWorkerUnblockSignals();
  if (!RecoveryInProgress()) {
    ereport(LOG, (errmsg("trellara slot sync: the server is not a standby; the worker exits")));
    proc_exit(0);  // 0: never restarted
  }
  BackgroundWorkerInitializeConnection(trellara::relay::FlowDatabase(), nullptr, 0);
  pgstat_report_appname("trellara slot sync");
  ereport(LOG, (errmsg("trellara slot sync started: keeping the flow slots of database \"%s\" in step with the "
                       "primary", trellara::relay::FlowDatabase())));
  for (;;) {
    CHECK_FOR_INTERRUPTS();
    if (ConfigReloadPending) {
      ConfigReloadPending = false;
      ProcessConfigFile(PGC_SIGHUP);
    }
    if (!RecoveryInProgress()) {
      ereport(LOG, (errmsg("trellara slot sync: the server was promoted; the worker exits and the flows' relays start "
                           "from the synced slots")));
      proc_exit(0);
    }
    rounds++;
    SyncRound();
    (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, kSyncRoundMs, PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
  }
}
