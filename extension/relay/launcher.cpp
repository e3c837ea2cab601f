// relay/launcher.cpp — the launcher background worker: keeps one relay worker running per
// enabled flow of trellara.flows, restarting failed ones with backoff, stopping disabled ones.
//
// It decides nothing about data and never touches a slot or a log: it reads the flow catalog,
// the shared status board and background-worker handles. Flow workers are registered with
// BGW_NEVER_RESTART so that the launcher alone decides when to restart them (with backoff) and a
// crashed worker is never started twice. Written in plain C style: its frames hold only plain
// data, so a Postgres ERROR (which ends the launcher; the postmaster restarts it) skips nothing.
extern "C" {
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

PGDLLEXPORT void trellara_launcher_main(Datum main_arg);
}

#include <cstring>

#include "relay/relay.h"
#include "relay/shared_state.h"
#include "trellara/base/cadence.h"
#include "trellara/capture/relay_progress.h"

namespace trellara::relay {
namespace {

constexpr int kLauncherMaxFlows = 1024;
constexpr long kRescanMs = cadence::kLauncherRescan.count();
constexpr long kFastRescanMs = cadence::kLauncherFastRescan.count();
constexpr int kFastRescans = cadence::kLauncherFastRescans;

struct FlowRow {
  char name[NAMEDATALEN];
  bool enabled;
};

struct Launched {
  bool in_use;
  char name[NAMEDATALEN];
  BackgroundWorkerHandle* handle;
};

FlowRow rows[kLauncherMaxFlows];
Launched launched[kLauncherMaxFlows];

void ClearLauncherPid(int, Datum) {
  Board* b = SharedBoard();
  if (b == nullptr) return;
  LWLockAcquire(b->lock, LW_EXCLUSIVE);
  if (b->launcher_pid == MyProcPid) b->launcher_pid = 0;
  LWLockRelease(b->lock);
}

// Reads every flow of the catalog; 0 rows when the extension is not (yet) created.
int ReadFlows() {
  int n = 0;
  SetCurrentStatementStartTimestamp();
  StartTransactionCommand();
  SPI_connect();
  PushActiveSnapshot(GetTransactionSnapshot());
  pgstat_report_activity(STATE_RUNNING, "reading trellara.flows");
  if (SPI_execute("SELECT to_regclass('trellara.flows') IS NOT NULL", true, 1) == SPI_OK_SELECT &&
      SPI_processed == 1) {
    bool isnull = true;
    Datum exists = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
    if (!isnull && DatumGetBool(exists) &&
        SPI_execute("SELECT name, enabled FROM trellara.flows ORDER BY name", true, kLauncherMaxFlows) ==
            SPI_OK_SELECT) {
      for (uint64 i = 0; i < SPI_processed && n < kLauncherMaxFlows; i++) {
        char* name = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
        Datum enabled = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull);
        strlcpy(rows[n].name, name, NAMEDATALEN);
        rows[n].enabled = !isnull && DatumGetBool(enabled);
        n++;
      }
    }
  }
  SPI_finish();
  PopActiveSnapshot();
  CommitTransactionCommand();
  pgstat_report_activity(STATE_IDLE, nullptr);
  return n;
}

Launched* FindLaunched(const char* name, bool reserve) {
  Launched* free_entry = nullptr;
  for (auto& l : launched) {
    if (l.in_use && std::strncmp(l.name, name, NAMEDATALEN) == 0) return &l;
    if (!l.in_use && free_entry == nullptr) free_entry = &l;
  }
  if (!reserve || free_entry == nullptr) return nullptr;
  free_entry->in_use = true;
  strlcpy(free_entry->name, name, NAMEDATALEN);
  free_entry->handle = nullptr;
  return free_entry;
}

bool HandleAlive(Launched* l) {
  if (l == nullptr || l->handle == nullptr) return false;
  pid_t pid;
  BgwHandleStatus status = GetBackgroundWorkerPid(l->handle, &pid);
  return status == BGWH_STARTED || status == BGWH_NOT_YET_STARTED;
}

// Pid of a live worker that claims `name` on the board (covers workers started by an earlier
// launcher incarnation, whose handles this one does not have).
pid_t BoardOwner(const char* name, int32* failures, TimestampTz* last_error_at, TimestampTz* stop_requested_at = nullptr) {
  Board* b = SharedBoard();
  pid_t pid = 0;
  *failures = 0;
  *last_error_at = 0;
  if (stop_requested_at != nullptr) *stop_requested_at = 0;
  LWLockAcquire(b->lock, LW_SHARED);
  FlowSlot* s = FindFlowSlot(b, name, false);
  if (s != nullptr) {
    pid = s->pid;
    *failures = s->consecutive_failures;
    *last_error_at = s->last_error_at;
    if (stop_requested_at != nullptr) *stop_requested_at = s->stop_requested_at;
  }
  LWLockRelease(b->lock);
  if (pid != 0 && kill(pid, 0) != 0) pid = 0;
  return pid;
}

FlowState BoardState(const char* name) {
  Board* b = SharedBoard();
  FlowState state = FlowState::kStopped;
  LWLockAcquire(b->lock, LW_SHARED);
  FlowSlot* s = FindFlowSlot(b, name, false);
  if (s != nullptr) state = s->state;
  LWLockRelease(b->lock);
  return state;
}

void StartWorker(const char* name) {
  BackgroundWorker worker;
  std::memset(&worker, 0, sizeof worker);
  worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
  worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
  worker.bgw_restart_time = BGW_NEVER_RESTART;
  strlcpy(worker.bgw_library_name, "trellara", BGW_MAXLEN);
  strlcpy(worker.bgw_function_name, "trellara_relay_main", BGW_MAXLEN);
  snprintf(worker.bgw_name, BGW_MAXLEN, "trellara relay %s", name);
  strlcpy(worker.bgw_type, "trellara relay", BGW_MAXLEN);
  strlcpy(worker.bgw_extra, name, BGW_EXTRALEN);
  worker.bgw_notify_pid = MyProcPid;
  Launched* l = FindLaunched(name, true);
  if (l == nullptr) return;
  // The previous worker's handle (palloc'd in TopMemoryContext by its registration) is done with.
  if (l->handle != nullptr) pfree(l->handle);
  l->handle = nullptr;
  if (!RegisterDynamicBackgroundWorker(&worker, &l->handle)) {
    l->handle = nullptr;
    ereport(WARNING, (errmsg("trellara launcher could not start the relay worker of flow \"%s\": no free "
                             "background worker slot",
                             name),
                      errhint("Raise max_worker_processes (each flow needs one worker, plus one launcher).")));
  }
}

void StopWorker(const char* name) {
  Launched* l = FindLaunched(name, false);
  if (l != nullptr && l->handle != nullptr) TerminateBackgroundWorker(l->handle);
  int32 failures;
  TimestampTz last_error_at;
  pid_t pid = BoardOwner(name, &failures, &last_error_at);
  if (pid != 0) (void)kill(pid, SIGTERM);
}

void Reconcile() {
  int n = ReadFlows();
  TimestampTz now = GetCurrentTimestamp();
  for (int i = 0; i < n; i++) {
    const char* name = rows[i].name;
    if (!rows[i].enabled) {
      StopWorker(name);
      continue;
    }
    Launched* l = FindLaunched(name, false);
    int32 failures;
    TimestampTz last_error_at;
    TimestampTz stop_requested_at;
    pid_t owner = BoardOwner(name, &failures, &last_error_at, &stop_requested_at);
    if (HandleAlive(l) || owner != 0) continue;
    // A flow in the error state stays stopped until start_flow clears it: restarting could only
    // fail the same way again (DESIGN §2 continuity; an uncapturable transaction).
    if (BoardState(name) == FlowState::kError) continue;
    // A stop_flow/drop_flow is stopping this flow and has not committed yet: hold off. After
    // kStopHoldMs the stopping transaction must have rolled back, and the flow runs again.
    if (stop_requested_at != 0 && !TimestampDifferenceExceeds(stop_requested_at, now, kStopHoldMs)) continue;
    // Restart with backoff after failures: the delay doubles per consecutive failure.
    long delay_ms = static_cast<long>(RestartBackoffMs(failures));
    if (failures > 0 && !TimestampDifferenceExceeds(last_error_at, now, static_cast<int>(delay_ms))) continue;
    StartWorker(name);
  }
  // Flows that disappeared from the catalog (dropped): stop their workers.
  for (auto& l : launched) {
    if (!l.in_use) continue;
    bool present = false;
    for (int i = 0; i < n; i++) present |= std::strncmp(rows[i].name, l.name, NAMEDATALEN) == 0;
    if (!present) {
      if (l.handle != nullptr) {
        TerminateBackgroundWorker(l.handle);
        pfree(l.handle);
        l.handle = nullptr;
      }
      l.in_use = false;
    }
  }
}

}  // namespace
}  // namespace trellara::relay

void trellara_launcher_main(Datum) {
  using namespace trellara::relay;
  pqsignal(SIGHUP, SignalHandlerForConfigReload);
  pqsignal(SIGTERM, die);
  BackgroundWorkerUnblockSignals();
  BackgroundWorkerInitializeConnection(FlowDatabase(), nullptr, 0);
  Board* b = SharedBoard();
  if (b == nullptr) proc_exit(1);
  LWLockAcquire(b->lock, LW_EXCLUSIVE);
  b->launcher_pid = MyProcPid;
  LWLockRelease(b->lock);
  before_shmem_exit(ClearLauncherPid, 0);
  ereport(LOG, (errmsg("trellara launcher started; flow catalog in database \"%s\"", FlowDatabase())));
  int fast_rescans = 0;
  for (;;) {
    CHECK_FOR_INTERRUPTS();
    if (ConfigReloadPending) {
      ConfigReloadPending = false;
      ProcessConfigFile(PGC_SIGHUP);
    }
    Reconcile();
    // A wake comes from create/start/stop_flow before their transaction commits: look again
    // soon, a few times, instead of waiting a whole rescan period for the commit to be visible.
    long timeout = fast_rescans > 0 ? kFastRescanMs : kRescanMs;
    if (fast_rescans > 0) fast_rescans--;
    int rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, timeout, PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
    if (rc & WL_LATCH_SET) fast_rescans = kFastRescans;
  }
}
