// snapshot_plan.cpp — what a snapshot run copies: its run id (given, the flow's one unfinished
// run, or a new one), the flow's tables as the plugin sees them (pg/source_tables.h), and each
// table's key-range chunks (core PlanChunkRanges).
//
// Only reads: never writes the source or the target's registry (snapshot_registration.cpp does),
// and never resumes a run it cannot name unambiguously.
#include <algorithm>
#include <ctime>

#include "pg/session.h"
#include "pg/source_tables.h"
#include "snapshot_command_internal.h"

namespace trellara::cli::snapshot_detail {
namespace {

std::string NewRunId() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "snap-%Y%m%d-%H%M%S", &tm);
  return buf;
}

bool ValidRunId(const std::string& id) {
  if (id.empty() || id.size() > 63) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
           c == '.';
  });
}

}  // namespace

std::vector<SnapshotTable> PublishedTables(PgConnection& source, const FlowConfig& config,
                                           const std::vector<std::string>& selected) {
  // One reader of the publication for snapshot, verify and reseed (source_tables.h): the columns
  // the stream carries, the row filter, and the leading key column when it can be split.
  std::vector<SnapshotTable> out;
  for (SourceTable& s : ReadSourceTables(source, config, selected)) {
    SnapshotTable t;
    t.name = std::move(s.name);
    t.schema = std::move(s.schema);
    t.table = std::move(s.table);
    t.qualified = std::move(s.qualified);
    t.columns = std::move(s.columns);
    t.row_filter = std::move(s.row_filter);
    t.source_partitioned = s.partitioned;
    if (s.split_key) {
      t.key_column = s.split_key_plain;
      t.key_quoted = *s.split_key;
    }
    out.push_back(std::move(t));
  }
  return out;
}

void PlanTable(PgConnection& source, SnapshotTable& t, uint64_t chunk_rows) {
  if (!t.key_column) {
    t.ranges = PlanChunkRanges(std::nullopt, std::nullopt, 0, chunk_rows);
    return;
  }
  auto bounds = MustSucceed(
      source,
      source.Exec("SELECT min(" + t.key_quoted + ")::text, max(" + t.key_quoted + ")::text, "
                  "(SELECT c.reltuples::bigint FROM pg_catalog.pg_class c WHERE c.oid = '" + t.qualified +
                  "'::regclass) FROM " + t.qualified),
      "reading the key range of " + t.name + " on the source");
  std::optional<int64_t> lo, hi;
  if (auto v = bounds.Value(0, 0)) lo = std::stoll(*v);
  if (auto v = bounds.Value(0, 1)) hi = std::stoll(*v);
  int64_t estimate = std::stoll(bounds.Value(0, 2).value_or("-1"));
  if (estimate < 0 && lo) {  // never vacuumed or analysed: count (the key's index answers)
    auto count = MustSucceed(source, source.Exec("SELECT count(*) FROM " + t.qualified),
                             "counting the rows of " + t.name + " on the source");
    estimate = std::stoll(count.Value(0, 0).value_or("0"));
  }
  t.ranges = PlanChunkRanges(lo, hi, static_cast<uint64_t>(std::max<int64_t>(estimate, 0)), chunk_rows);
}

std::string ResolveRunId(PgConnection& target, const FlowConfig& config, const Options& o) {
  if (!o.run_id.empty()) {
    if (!ValidRunId(o.run_id))
      throw CommandFailed("--run-id " + o.run_id + " is not a valid run id (1-63 characters of a-z, A-Z, 0-9, -, _, .)",
                          2);
    return o.run_id;
  }
  auto r = MustSucceed(target,
                       // A run whose tables were all taken over by a forced run has nothing left to resume.
                       target.ExecParams("SELECT r.run_id, r.state FROM trellara.snapshot_runs r WHERE r.flow = $1 "
                                         "AND r.kind = 'snapshot' AND r.state <> 'handoff_ready' AND EXISTS (SELECT 1 "
                                         "FROM trellara.snapshot_tables t WHERE t.flow = r.flow AND t.run_id = r.run_id) "
                                         "ORDER BY r.started_at",
                                         {config.flow_name}),
                       "reading the unfinished snapshot runs of flow " + config.flow_name);
  if (r.rows() == 1) return r.Value(0, 0).value_or("");
  if (r.rows() > 1) {
    std::string runs;
    for (int i = 0; i < r.rows(); i++)
      runs += (i ? ", " : "") + r.Value(i, 0).value_or("") + " (" + r.Value(i, 1).value_or("") + ")";
    throw CommandFailed("flow " + config.flow_name + " has " + std::to_string(r.rows()) +
                        " unfinished snapshot runs: " + runs + "; resume one with --run-id R");
  }
  std::string id = NewRunId();
  for (int n = 2;; n++) {
    auto exists = MustSucceed(target,
                              target.ExecParams("SELECT 1 FROM trellara.snapshot_runs WHERE flow = $1 AND run_id = $2",
                                                {config.flow_name, id}),
                              "reading snapshot run " + id);
    if (exists.rows() == 0) return id;
    id = NewRunId() + "-" + std::to_string(n);
  }
}

}  // namespace trellara::cli::snapshot_detail
