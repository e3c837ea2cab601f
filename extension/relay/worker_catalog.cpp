// relay/worker_catalog.cpp — the relay worker's reads and writes of its row of trellara.flows:
// reads the flow's settings at start (plain data kept for the worker's life) and records when the
// flow's log was started. Plain C frames only (SPI may raise ERROR); it must never touch the log
// or the slot.
extern "C" {
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/pg_lsn.h"
#include "utils/snapmgr.h"
}

#include <cstring>

#include "relay/worker_internal.h"

namespace trellara::relay::worker {

// Plain data read from trellara.flows.
bool has_log_started_lsn = false;
SourceAck source_ack = SourceAck::kLocal;  // trellara.flows.source_ack
int flow_partitions = 0;          // trellara.flows.mode = 'partitioned': its partitions (0: strict)
int flow_map_version = 1;         // trellara.flows.partition_map_version
XLogRecPtr log_started_lsn = InvalidXLogRecPtr;
char publication[NAMEDATALEN * 4];
char slot_name[NAMEDATALEN];
char log_directory[MAXPGPATH];

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
      "SELECT publication, slot_name, log_directory, enabled, log_started_lsn, source_ack, "
      "CASE WHEN mode = 'partitioned' THEN partitions ELSE 0 END, partition_map_version FROM trellara.flows "
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
      source_ack = ack_mode != nullptr && strcmp(ack_mode, "broker_quorum") == 0 ? SourceAck::kBrokerQuorum
                   : ack_mode != nullptr && strcmp(ack_mode, "applied") == 0    ? SourceAck::kApplied
                                                                                : SourceAck::kLocal;
      Datum partitions = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 7, &isnull);
      flow_partitions = isnull ? 0 : DatumGetInt32(partitions);
      Datum map_version = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 8, &isnull);
      flow_map_version = isnull ? 1 : DatumGetInt32(map_version);
      found = true;
    }
  }
  SPI_finish();
  PopActiveSnapshot();
  CommitTransactionCommand();
  return found;
}

// Records in the catalog that this flow's log was started (covering the source from `lsn`), so a
// later start can tell a deleted log directory from a new flow. `replace`: a new log replaces the
// one recorded (after a promotion, failover/log_timeline.cpp). Plain C frame.
void RecordLogStart(XLogRecPtr lsn, bool replace) {
  SetCurrentStatementStartTimestamp();
  StartTransactionCommand();
  SPI_connect();
  PushActiveSnapshot(GetTransactionSnapshot());
  Oid argtypes[3] = {TEXTOID, PG_LSNOID, BOOLOID};
  Datum args[3] = {CStringGetTextDatum(flow_name), LSNGetDatum(lsn), BoolGetDatum(replace)};
  // SKIP LOCKED: stop_flow/drop_flow hold the row while they wait for this worker to exit, and a
  // lock wait does not see SIGTERM, so waiting here would hold stop_flow for its whole timeout.
  // A skipped row is recorded at the next start (has_log_started_lsn stays false).
  int rc = SPI_execute_with_args(
      "UPDATE trellara.flows SET log_started_lsn = $2 WHERE name IN (SELECT name FROM trellara.flows WHERE name = $1 "
      "AND (log_started_lsn IS NULL OR $3) FOR UPDATE SKIP LOCKED)",
      3, argtypes, args, nullptr, false, 0);
  const bool recorded = rc == SPI_OK_UPDATE && SPI_processed == 1;
  SPI_finish();
  PopActiveSnapshot();
  CommitTransactionCommand();
  if (!recorded) return;
  has_log_started_lsn = true;
  log_started_lsn = lsn;
}

}  // namespace trellara::relay::worker
