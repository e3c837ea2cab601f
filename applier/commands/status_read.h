// status_read.h — what `trellara status` reads: the dashboard's facts (the target's
// trellara.apply_status(), quarantine_list() and snapshot_status(), whether an applier runs, the
// log's progress, core's DecideApplyStatus verdict) and, for --view diagnostics|alerts|report, the
// facts beyond it (the log's segments and consumers, the lock holder, the origin, the dedup rows,
// the source's relay). It only reads: it never writes the log directory, never takes the
// applier's lock, never bootstraps or changes target state.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kit/config.h"
#include "kit/log_progress.h"
#include "pg/pg_connection.h"
#include "trellara/apply/apply_retry.h"
#include "trellara/log/retention.h"
#include "trellara/report/apply_status.h"

namespace trellara::cli::status {

using Json = nlohmann::ordered_json;

struct QuarantineRow {
  std::string xid, commit_lsn, state, reason, message;
};

// One table of the flow's snapshot (trellara.snapshot_status()).
struct SnapshotRow {
  std::string table, run_id, state;
  int64_t chunks = 0, chunks_copied = 0, rows_copied = 0, bytes_copied = 0, skipped_transactions = 0;
  double seconds = 0;
  std::optional<std::string> last_error;
};

struct FlowStatus {
  std::string state;
  std::vector<SnapshotRow> snapshot;  // empty: nothing copied by trellara snapshot / reseed
  bool target_state_present = false;
  bool applier_running = false;
  std::string recorded_state;  // apply_status row, "" when none
  std::optional<std::string> applied_commit_lsn;
  uint64_t quarantined = 0;
  uint64_t replay_ready = 0;
  std::optional<std::string> last_error;
  std::optional<std::string> updated_at;
  std::optional<QuarantineRow> blocking;  // the oldest quarantined boundary
  std::optional<QuarantineRow> waiting;   // the oldest replay-ready boundary
  std::string target_error;                // status could not reach the target
  std::optional<ApplierRetryState> applier_state;  // consumers/.applier.state, writer alive
  LogProgress log;
  std::string next_action;
};

// The dashboard's facts and core's verdict. An unreachable target is a fact (target_error), not a
// failure. `keep_target` receives the target connection for the views that read more.
FlowStatus ReadStatus(const FlowConfig& config, const std::string& config_path,
                      std::unique_ptr<PgConnection>* keep_target = nullptr);

struct LogFacts {
  std::string error;  // "" when the segments and consumers were read
  uint64_t segments = 0;
  uint64_t bytes = 0;
  std::optional<uint64_t> first_offset;  // the oldest segment's first offset
  std::vector<std::pair<std::string, log::ConsumerState>> consumers;
  bool applier_lost = false;
};

struct LockHolder {
  std::string pid, application_name, user, client, backend_start, state;
};

struct SourceFacts {
  bool configured = false;
  bool reachable = false;
  std::string error;     // why not reachable / why the relay could not be read
  std::string described; // host/port/dbname/user, never the password
  std::optional<Json> status_row;  // trellara.status() of the flow; nullopt: no such flow there
  std::vector<std::pair<std::string, std::string>> metrics;  // trellara.relay_metrics()
  std::string metrics_error;
  std::vector<std::string> publication_tables;
  std::string publication_error;
};

struct Extended {
  LogFacts log;
  std::string target_described;
  std::vector<LockHolder> lock_holders;
  std::string lock_error;
  std::optional<std::string> origin_remote_lsn, origin_local_lsn;
  std::string origin_error;
  std::optional<uint64_t> dedup_rows;
  std::string dedup_error;
  std::optional<uint64_t> recorded_consumer_offset, applied_transactions, skipped_duplicates;
  std::string state_error;  // apply_status() / quarantine_list() unreadable (e.g. apply never ran here)
  std::map<std::string, uint64_t> quarantine_by_state;  // quarantined | replay_ready | resolved
  std::vector<QuarantineRow> open_quarantine;           // quarantined and replay_ready rows
  // Partitioned mode (docs/partitioned.md): each blocked partition ("partition K at LSN: reason"),
  // the chunks staged and not yet published, and the partition appliers that reported.
  bool partitioned = false;
  std::vector<std::string> partition_blockers;
  uint64_t staged_chunks = 0;
  uint64_t partition_appliers = 0;
  std::string partition_error;
  SourceFacts source;
};


// Each optional piece that cannot be read (a privilege the status role lacks, the source down, no
// [source] configured) is recorded as a fact with its reason: the command itself still succeeds.
Extended ReadExtended(const FlowConfig& config, PgConnection* target);

}  // namespace trellara::cli::status
