// functions/flows.cpp — SQL functions that talk to the relay: the status board rows behind
// trellara.status(), waking the launcher, and stopping a flow's worker.
//
// The flow catalog (trellara.flows) and the SQL-level checks live in sql/; this file only reads
// shared memory and signals processes. It never changes a flow or a slot; the only files it
// removes are the ones Trellara created in a dropped flow's log directory.
extern "C" {
#include "postgres.h"

#include <signal.h>

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/numeric.h"
#include "utils/pg_lsn.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
#include "utils/wait_event.h"

PGDLLEXPORT Datum trellara_relay_status(PG_FUNCTION_ARGS);
PGDLLEXPORT Datum trellara_wake_launcher(PG_FUNCTION_ARGS);
PGDLLEXPORT Datum trellara_stop_flow_worker(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(trellara_relay_status);
PG_FUNCTION_INFO_V1(trellara_wake_launcher);
PG_FUNCTION_INFO_V1(trellara_stop_flow_worker);
PGDLLEXPORT Datum trellara_clear_stop_request(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(trellara_clear_stop_request);
PGDLLEXPORT Datum trellara_relay_metrics(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(trellara_relay_metrics);
PGDLLEXPORT Datum trellara_request_progress(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(trellara_request_progress);
}

#include <cstring>

#include "relay/shared_state.h"

using namespace trellara::relay;

namespace {

void RequireBoard(const char* function) {
  if (SharedBoard() == nullptr)
    ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                    errmsg("%s needs the trellara library in shared_preload_libraries", function),
                    errhint("Add trellara to shared_preload_libraries in postgresql.conf and restart the server.")));
}

}  // namespace

// trellara._relay_status(): one row per flow on the status board. Plain C style: no C++ objects.
Datum trellara_relay_status(PG_FUNCTION_ARGS) {
  RequireBoard("trellara._relay_status()");
  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  InitMaterializedSRF(fcinfo, 0);
  Board* b = SharedBoard();
  constexpr int kCols = 11;
  LWLockAcquire(b->lock, LW_SHARED);
  for (int i = 0; i < b->max_flows; i++) {
    FlowSlot s;
    std::memcpy(&s, &b->flows[i], sizeof s);
    if (!s.in_use) continue;
    Datum values[kCols];
    bool nulls[kCols];
    std::memset(nulls, 0, sizeof nulls);
    values[0] = CStringGetTextDatum(s.name);
    values[1] = CStringGetTextDatum(FlowStateName(s.state));
    values[2] = Int32GetDatum(s.pid);
    nulls[2] = s.pid == 0;
    values[3] = Int64GetDatum(static_cast<int64>(s.log_durable_offset));
    nulls[3] = !s.has_durable_offset;
    values[4] = LSNGetDatum(s.log_durable_lsn);
    nulls[4] = s.log_durable_lsn == 0;
    values[5] = LSNGetDatum(s.confirmed_lsn);
    nulls[5] = s.confirmed_lsn == 0;
    values[6] = Int64GetDatum(static_cast<int64>(s.records_written));
    values[7] = CStringGetTextDatum(s.last_error);
    nulls[7] = s.last_error[0] == '\0';
    values[8] = TimestampTzGetDatum(s.last_error_at);
    nulls[8] = s.last_error_at == 0;
    values[9] = TimestampTzGetDatum(s.started_at);
    nulls[9] = s.started_at == 0;
    values[10] = Int32GetDatum(s.consecutive_failures);
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
  }
  LWLockRelease(b->lock);
  return (Datum)0;
}

// trellara._relay_metrics(): the relay's counters on the status board, one (flow, metric, value)
// row each, in a fixed order per flow (docs/relay.md "Relay metrics"). An LSN is a number (bytes
// from 0/0) like pg_wal_lsn_diff's; a figure the worker has not published yet is left out rather
// than shown as 0. Plain C style: no C++ objects.
Datum trellara_relay_metrics(PG_FUNCTION_ARGS) {
  RequireBoard("trellara._relay_metrics()");
  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  InitMaterializedSRF(fcinfo, 0);
  Board* b = SharedBoard();
  // Copied under the lock, turned into rows (palloc, may ERROR) after it is released.
  FlowSlot* slots = static_cast<FlowSlot*>(palloc(sizeof(FlowSlot) * b->max_flows));
  LWLockAcquire(b->lock, LW_SHARED);
  std::memcpy(static_cast<void*>(slots), static_cast<const void*>(b->flows), sizeof(FlowSlot) * b->max_flows);
  LWLockRelease(b->lock);
  for (int i = 0; i < b->max_flows; i++) {
    const FlowSlot& s = slots[i];
    if (!s.in_use) continue;
    struct Row {
      const char* metric;
      uint64_t value;
      bool present;
    };
    const Row rows[] = {
        {"worker_up", s.pid != 0 ? 1u : 0u, true},
        {"records_written", s.records_written, true},
        {"payload_bytes_appended", s.payload_bytes_appended, true},
        {"fsyncs_completed", s.fsyncs_completed, true},
        {"log_durable_offset", s.log_durable_offset, s.has_durable_offset},
        {"log_durable_lsn", s.log_durable_lsn, s.log_durable_lsn != 0},
        {"confirmed_lsn", s.confirmed_lsn, s.confirmed_lsn != 0},
        {"streamed_transactions", s.streamed_transactions, true},
        {"stream_spilled_bytes", s.stream_spilled_bytes, true},
        {"consecutive_failures", static_cast<uint64_t>(s.consecutive_failures > 0 ? s.consecutive_failures : 0), true},
    };
    for (const Row& row : rows) {
      if (!row.present) continue;
      char number[32];
      snprintf(number, sizeof number, "%llu", static_cast<unsigned long long>(row.value));
      Datum values[3];
      bool nulls[3] = {false, false, false};
      values[0] = CStringGetTextDatum(s.name);
      values[1] = CStringGetTextDatum(row.metric);
      values[2] = DirectFunctionCall3(numeric_in, CStringGetDatum(number), ObjectIdGetDatum(InvalidOid),
                                      Int32GetDatum(-1));
      tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
    }
  }
  pfree(slots);
  return (Datum)0;
}

// trellara._clear_stop_request(flow text): start_flow/create_flow let the launcher run it again.
Datum trellara_clear_stop_request(PG_FUNCTION_ARGS) {
  RequireBoard("trellara._clear_stop_request()");
  char* name = text_to_cstring(PG_GETARG_TEXT_PP(0));
  Board* b = SharedBoard();
  LWLockAcquire(b->lock, LW_EXCLUSIVE);
  FlowSlot* s = FindFlowSlot(b, name, false);
  if (s != nullptr) {
    s->stop_requested_at = 0;
    s->consecutive_failures = 0;
    // start_flow is the operator's answer to the error state: run the relay again (it re-checks).
    if (s->state == FlowState::kError && s->pid == 0) s->state = FlowState::kStopped;
    s->failing_count = 0;
  }
  LWLockRelease(b->lock);
  PG_RETURN_VOID();
}

// trellara._request_progress(flow text, lsn pg_lsn), behind trellara.request_progress(): asks the
// flow's relay to make its log cover the source through `lsn` now rather than at its next periodic
// progress marker (trellara.progress_interval). At each pass (at most 100 ms apart) that ends with
// everything durable and the decoder past what the log covers, the worker writes a progress marker
// at its decoded end while the log does not cover `lsn` yet (core ShouldWriteProgress). A verify or
// reseed --where asks this for its source point, so an idle flow's applier reaches it at once.
// Writes nothing itself; true when a relay worker of the flow is running to see the request, false
// otherwise (the request stays on the board for the flow's next worker).
Datum trellara_request_progress(PG_FUNCTION_ARGS) {
  RequireBoard("trellara._request_progress()");
  char* name = text_to_cstring(PG_GETARG_TEXT_PP(0));
  const uint64_t lsn = PG_GETARG_LSN(1);
  Board* b = SharedBoard();
  LWLockAcquire(b->lock, LW_EXCLUSIVE);
  FlowSlot* s = FindFlowSlot(b, name, false);
  bool running = false;
  if (s != nullptr) {
    if (lsn > s->progress_requested_lsn) s->progress_requested_lsn = lsn;
    running = s->pid != 0 && s->state == FlowState::kRunning;
  }
  LWLockRelease(b->lock);
  PG_RETURN_BOOL(running);
}

Datum trellara_wake_launcher(PG_FUNCTION_ARGS) {
  (void)fcinfo;
  RequireBoard("trellara._wake_launcher()");
  WakeLauncher();
  PG_RETURN_VOID();
}

// trellara._stop_flow_worker(flow text, timeout_ms int): asks the flow's worker to stop (it makes
// what it appended durable and confirms first) and waits for it to exit; true once no worker
// holds the flow.
Datum trellara_stop_flow_worker(PG_FUNCTION_ARGS) {
  RequireBoard("trellara._stop_flow_worker()");
  char* name = text_to_cstring(PG_GETARG_TEXT_PP(0));
  int timeout_ms = PG_GETARG_INT32(1);
  Board* b = SharedBoard();
  LWLockAcquire(b->lock, LW_EXCLUSIVE);
  FlowSlot* held = FindFlowSlot(b, name, true);
  if (held != nullptr) held->stop_requested_at = GetCurrentTimestamp();
  LWLockRelease(b->lock);
  for (int waited = 0;; waited += 100) {
    LWLockAcquire(b->lock, LW_SHARED);
    FlowSlot* s = FindFlowSlot(b, name, false);
    pid_t pid = s != nullptr ? s->pid : 0;
    LWLockRelease(b->lock);
    if (pid == 0 || kill(pid, 0) != 0) PG_RETURN_BOOL(true);
    if (waited >= timeout_ms) PG_RETURN_BOOL(false);
    (void)kill(pid, SIGTERM);
    (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 100, PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
    CHECK_FOR_INTERRUPTS();
  }
}

extern "C" {
#include <dirent.h>
#include <sys/stat.h>

#include "catalog/pg_type.h"
#include "nodes/pg_list.h"
#include "port.h"
#include "storage/fd.h"
#include "utils/array.h"

PGDLLEXPORT Datum trellara_log_bytes(PG_FUNCTION_ARGS);
PGDLLEXPORT Datum trellara_remove_log_directory(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(trellara_log_bytes);
PG_FUNCTION_INFO_V1(trellara_remove_log_directory);
}

namespace {

// Whether `name` is exactly `prefix` + 20 digits + `suffix` (a segment or index file, format.cpp),
// optionally followed by ".tmp" (an index being rewritten).
bool IsNumberedName(const char* name, const char* prefix, const char* suffix) {
  size_t plen = std::strlen(prefix), slen = std::strlen(suffix), len = std::strlen(name);
  constexpr size_t kDigits = 20;
  if (len >= 4 && std::strcmp(name + len - 4, ".tmp") == 0) len -= 4;
  if (len != plen + kDigits + slen || std::strncmp(name, prefix, plen) != 0 ||
      std::strncmp(name + plen + kDigits, suffix, slen) != 0)
    return false;
  for (size_t i = 0; i < kDigits; i++)
    if (name[plen + i] < '0' || name[plen + i] > '9') return false;
  return true;
}

// Files Trellara creates at the top of a flow log directory (docs/log.md).
bool IsOwnLogFile(const char* name) {
  return IsNumberedName(name, "segment-", ".log") || IsNumberedName(name, "index-", ".idx") ||
         std::strcmp(name, "LOCK") == 0 || std::strcmp(name, "WRITER_FAILED") == 0 ||  // writer_failure.h
         std::strcmp(name, "WRITER_FAILED.tmp") == 0 ||
         std::strcmp(name, "TIMELINE") == 0 || std::strcmp(name, "TIMELINE.tmp") == 0;  // failover/log_timeline.cpp
}

bool IsDotEntry(const char* name) { return std::strcmp(name, ".") == 0 || std::strcmp(name, "..") == 0; }

// Files Trellara creates in consumers/: <name> (offset), .<name>.lock, .<name>.tmp. Consumer names
// never contain '/', and these are regular files; anything else is not ours.
bool IsOwnConsumerFile(const char* name) { return !IsDotEntry(name) && std::strchr(name, '/') == nullptr; }

// Spill files of streamed transactions in <log_directory>/spill (core stream_spill.h):
// xid-<decimal xid>.spill.
bool IsOwnSpillFile(const char* name) {
  const size_t len = std::strlen(name);
  constexpr char kPrefix[] = "xid-", kSuffix[] = ".spill";
  const size_t plen = sizeof kPrefix - 1, slen = sizeof kSuffix - 1;
  if (len <= plen + slen || len > plen + 10 + slen || std::strncmp(name, kPrefix, plen) != 0 ||
      std::strcmp(name + len - slen, kSuffix) != 0)
    return false;
  for (size_t i = plen; i < len - slen; i++)
    if (name[i] < '0' || name[i] > '9') return false;
  return true;
}

// Appends `entry` to the list of what was kept (a palloc'd text array is built from it later).
void Keep(List** kept, const char* dir, const char* entry, const char* why) {
  *kept = lappend(*kept, psprintf("%s/%s (%s)", dir, entry, why));
}

// Removes the regular files of `dir` that `is_own` accepts; never follows a symlink, never
// removes a directory other than the ones Trellara made, records everything else in `kept`.
void RemoveOwnFiles(const char* dir, bool (*is_own)(const char*), List** kept) {
  DIR* d = AllocateDir(dir);
  if (d == nullptr) {
    if (errno != ENOENT) Keep(kept, dir, ".", strerror(errno));
    return;
  }
  struct dirent* de;
  while ((de = ReadDirExtended(d, dir, WARNING)) != nullptr) {
    if (IsDotEntry(de->d_name)) continue;
    char path[MAXPGPATH];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    struct stat st;
    if (lstat(path, &st) != 0) {
      Keep(kept, dir, de->d_name, strerror(errno));
      continue;
    }
    const bool consumers = std::strcmp(de->d_name, "consumers") == 0;
    if (S_ISDIR(st.st_mode) && (consumers || std::strcmp(de->d_name, "spill") == 0) && is_own == IsOwnLogFile) {
      RemoveOwnFiles(path, consumers ? IsOwnConsumerFile : IsOwnSpillFile, kept);
      if (rmdir(path) != 0 && errno != ENOTEMPTY && errno != EEXIST) Keep(kept, dir, de->d_name, strerror(errno));
      continue;
    }
    if (!S_ISREG(st.st_mode) || !is_own(de->d_name)) {
      Keep(kept, dir, de->d_name, "not created by trellara");
      continue;
    }
    if (unlink(path) != 0) Keep(kept, dir, de->d_name, strerror(errno));
  }
  FreeDir(d);
}

}  // namespace

// trellara._caller_is_superuser(): whether the role calling a SECURITY DEFINER function (the
// session's current role outside it, after SET ROLE) is a superuser; the definer's own rights
// do not count.
extern "C" {
PGDLLEXPORT Datum trellara_caller_is_superuser(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(trellara_caller_is_superuser);
}
Datum trellara_caller_is_superuser(PG_FUNCTION_ARGS) {
  (void)fcinfo;
  PG_RETURN_BOOL(superuser_arg(GetOuterUserId()));
}

// trellara._log_bytes(dir): bytes of the segment and index files of a log directory; NULL when
// the directory cannot be read (not created yet, or permissions broken): status() must keep
// working when a flow is broken, and its last_error column says why.
Datum trellara_log_bytes(PG_FUNCTION_ARGS) {
  char* dir = text_to_cstring(PG_GETARG_TEXT_PP(0));
  DIR* d = AllocateDir(dir);
  if (d == nullptr) PG_RETURN_NULL();
  int64 total = 0;
  struct dirent* de;
  while ((de = ReadDir(d, dir)) != nullptr) {
    if (std::strncmp(de->d_name, "segment-", 8) != 0 && std::strncmp(de->d_name, "index-", 6) != 0) continue;
    char path[MAXPGPATH];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    struct stat st;
    if (stat(path, &st) == 0) total += st.st_size;
  }
  FreeDir(d);
  PG_RETURN_INT64(total);
}

// trellara._remove_log_directory(dir): removes what Trellara created in a dropped flow's log
// directory (segments, indexes, LOCK, consumers/ and spill/ and their files), then the directory if that left
// it empty. Returns what it kept, with the reason: entries Trellara did not create (never
// touched, symlinks not followed) and removals that failed. Never raises for those: the flow and
// its slot are already gone when drop_flow calls it, so the caller reports them as a WARNING.
Datum trellara_remove_log_directory(PG_FUNCTION_ARGS) {
  char* dir = text_to_cstring(PG_GETARG_TEXT_PP(0));
  List* kept = NIL;
  struct stat st;
  if (lstat(dir, &st) != 0) {
    if (errno != ENOENT) Keep(&kept, dir, ".", strerror(errno));
  } else if (!S_ISDIR(st.st_mode)) {
    Keep(&kept, dir, ".", "not a directory");
  } else {
    RemoveOwnFiles(dir, IsOwnLogFile, &kept);
    if (kept == NIL && rmdir(dir) != 0 && errno != ENOENT) Keep(&kept, dir, ".", strerror(errno));
  }
  int n = list_length(kept);
  Datum* items = static_cast<Datum*>(palloc(sizeof(Datum) * (n > 0 ? n : 1)));
  int i = 0;
  ListCell* lc;
  foreach (lc, kept) items[i++] = CStringGetTextDatum(static_cast<char*>(lfirst(lc)));
  PG_RETURN_ARRAYTYPE_P(construct_array(items, n, TEXTOID, -1, false, TYPALIGN_INT));
}
