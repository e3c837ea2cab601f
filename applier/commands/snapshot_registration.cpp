// snapshot_registration.cpp — a table of a snapshot run registered (or resumed) in the target's
// snapshot tables (trellara.snapshot_runs, snapshot_tables, snapshot_chunks, snapshot_skips), in
// one target transaction under the flow's control lock, as core's DecideRegistration says.
//
// A re-registered table keeps every skip recorded against its old chunks (carried onto each new
// chunk), and the applier learns of it through the registry version. Never moves a table's state
// backwards without --force (CheckSnapshotTransition), and never leaves half a registration: any
// failure rolls the transaction back.
#include <string>
#include <vector>

#include "pg/session.h"
#include "snapshot_command_internal.h"

namespace trellara::cli::snapshot_detail {
namespace {

std::string IntArray(const std::vector<std::optional<int64_t>>& values) {
  std::string s = "{";
  for (size_t i = 0; i < values.size(); i++)
    s += (i ? "," : "") + (values[i] ? std::to_string(*values[i]) : std::string("NULL"));
  return s + "}";
}

}  // namespace

Registration Decide(const SnapshotTable& t, const std::optional<std::pair<std::string, SnapshotState>>& row,
                    const std::string& run_id, const Options& o, const FlowConfig& config) {
  std::optional<RegisteredTable> registered;
  if (row) registered = RegisteredTable{row->first, row->second};
  auto decision = DecideRegistration(t.name, registered,
                                     RegistrationRequest{run_id, !o.run_id.empty(), o.force, config.flow_name, config.path});
  if (!decision.ok()) throw CommandFailed(decision.error().message);
  return *decision;
}

std::optional<std::pair<std::string, SnapshotState>> ReadTableRow(PgConnection& target, const FlowConfig& config,
                                                                  const SnapshotTable& t, bool for_update) {
  auto r = MustSucceed(target,
                       target.ExecParams(std::string("SELECT run_id, state FROM trellara.snapshot_tables "
                                                     "WHERE flow = $1 AND schema_name = $2 AND table_name = $3") +
                                             (for_update ? " FOR UPDATE" : ""),
                                         {config.flow_name, t.schema, t.table}),
                       "reading the snapshot state of " + t.name);
  if (r.rows() == 0) return std::nullopt;
  return std::make_pair(r.Value(0, 0).value_or(""), StateOrFail(r.Value(0, 1), "table " + t.name));
}

void RegisterTable(PgConnection& target, const FlowConfig& config, const std::string& run_id, SnapshotTable& t,
                   const Options& o) {
  const std::string what = "registering " + t.name + " for snapshot run " + run_id;
  MustSucceed(target, target.Exec("BEGIN"), what);
  try {
    MustSucceed(target,
                target.ExecParams("SELECT pg_advisory_xact_lock(hashtextextended('trellara control ' || $1::text, 0))",
                                  {config.flow_name}),
                "taking the control lock of flow " + config.flow_name);
    auto row = ReadTableRow(target, config, t, true);
    const Registration decision = Decide(t, row, run_id, o, config);
    t.registration = decision;
    if (decision != Registration::Skip)  // a run exists once it owns a table
      MustSucceed(target,
                  target.ExecParams("INSERT INTO trellara.snapshot_runs (flow, run_id, kind, state) "
                                    "VALUES ($1, $2, 'snapshot', 'pending') ON CONFLICT (flow, run_id) DO NOTHING",
                                    {config.flow_name, run_id}),
                  what);
    if (decision == Registration::New || decision == Registration::Reregister) {
      const std::vector<std::string> keys{config.flow_name, t.schema, t.table};
      // Skips recorded against the old layout's pending chunks still bind the new copy: each
      // of them is carried onto every new chunk (the copy's snapshot must see them all).
      auto skips = MustSucceed(target,
                               target.ExecParams("DELETE FROM trellara.snapshot_skips WHERE flow = $1 AND "
                                                 "schema_name = $2 AND table_name = $3 RETURNING xid::text, "
                                                 "commit_lsn::text",
                                                 {keys[0], keys[1], keys[2]}),
                               what);
      MustSucceed(target,
                  target.ExecParams("DELETE FROM trellara.snapshot_chunks WHERE flow = $1 AND schema_name = $2 "
                                    "AND table_name = $3",
                                    {keys[0], keys[1], keys[2]}),
                  what);
      MustSucceed(target,
                  target.ExecParams(
                      "INSERT INTO trellara.snapshot_tables (flow, schema_name, table_name, run_id, state, "
                      "key_column, chunks) VALUES ($1, $2, $3, $4, 'pending', $5, $6) "
                      "ON CONFLICT (flow, schema_name, table_name) DO UPDATE SET run_id = EXCLUDED.run_id, "
                      "state = 'pending', key_column = EXCLUDED.key_column, row_filter = NULL, "
                      "chunks = EXCLUDED.chunks, rows_copied = 0, bytes_copied = 0, seconds = 0, last_error = NULL, "
                      "updated_at = now()",
                      {keys[0], keys[1], keys[2], run_id, t.key_column, std::to_string(t.ranges.size())}),
                  what);
      std::vector<std::optional<int64_t>> nos, los, his;
      for (const auto& c : t.ranges) {
        nos.push_back(c.chunk_no);
        los.push_back(c.lo);
        his.push_back(c.hi);
      }
      MustSucceed(target,
                  target.ExecParams("INSERT INTO trellara.snapshot_chunks (flow, schema_name, table_name, chunk_no, "
                                    "lo, hi, state) SELECT $1, $2, $3, u.n, u.lo, u.hi, 'pending' "
                                    "FROM unnest($4::int[], $5::bigint[], $6::bigint[]) AS u(n, lo, hi)",
                                    {keys[0], keys[1], keys[2], IntArray(nos), IntArray(los), IntArray(his)}),
                  what);
      if (skips.rows() > 0) {
        std::vector<std::optional<int64_t>> xids;
        std::string lsns = "{";
        for (int i = 0; i < skips.rows(); i++) {
          xids.push_back(std::stoll(skips.Value(i, 0).value_or("0")));
          lsns += (i ? "," : "") + skips.Value(i, 1).value_or("0/0");
        }
        MustSucceed(target,
                    target.ExecParams("INSERT INTO trellara.snapshot_skips (flow, schema_name, table_name, chunk_no, "
                                      "xid, commit_lsn) SELECT $1, $2, $3, c.chunk_no, s.xid, max(s.lsn) "
                                      "FROM unnest($4::bigint[], $5::pg_lsn[]) AS s(xid, lsn) "
                                      "CROSS JOIN trellara.snapshot_chunks c WHERE c.flow = $1 AND c.schema_name = $2 "
                                      "AND c.table_name = $3 GROUP BY c.chunk_no, s.xid",
                                      {keys[0], keys[1], keys[2], IntArray(xids), lsns + "}"}),
                    what);
      }
      MustSucceed(target,
                  target.ExecParams("INSERT INTO trellara.apply_control (flow, version) VALUES ($1, 1) "
                                    "ON CONFLICT (flow) DO UPDATE SET version = trellara.apply_control.version + 1, "
                                    "updated_at = now()",
                                    {config.flow_name}),
                  "bumping the snapshot registry version of flow " + config.flow_name);
    }
    if (decision == Registration::Skip) {
      auto count = MustSucceed(target,
                               target.ExecParams("SELECT chunks FROM trellara.snapshot_tables WHERE flow = $1 AND "
                                                 "schema_name = $2 AND table_name = $3",
                                                 {config.flow_name, t.schema, t.table}),
                               "reading the chunk count of " + t.name);
      t.chunks = std::stoi(count.Value(0, 0).value_or("0"));
    } else {
      auto chunks = MustSucceed(target,
                                target.ExecParams("SELECT chunk_no, lo, hi, state, rows_copied FROM "
                                                  "trellara.snapshot_chunks WHERE flow = $1 AND schema_name = $2 AND "
                                                  "table_name = $3 ORDER BY chunk_no",
                                                  {config.flow_name, t.schema, t.table}),
                                "reading the chunks of " + t.name);
      t.pending.clear();
      t.chunks = chunks.rows();
      for (int i = 0; i < chunks.rows(); i++) {
        if (chunks.Value(i, 3) == std::optional<std::string>("copied")) continue;
        ChunkRange c;
        c.chunk_no = std::stoi(chunks.Value(i, 0).value_or("0"));
        if (auto v = chunks.Value(i, 1)) c.lo = std::stoll(*v);
        if (auto v = chunks.Value(i, 2)) c.hi = std::stoll(*v);
        t.pending.push_back(c);
      }
      // The key the chunks split on is the registered one (a resumed table keeps its layout).
      auto key = MustSucceed(target,
                             target.ExecParams("SELECT key_column, quote_ident(key_column) FROM trellara.snapshot_tables "
                                               "WHERE flow = $1 AND schema_name = $2 AND table_name = $3",
                                               {config.flow_name, t.schema, t.table}),
                             "reading the key column of " + t.name);
      t.key_column = key.Value(0, 0);
      t.key_quoted = key.Value(0, 1).value_or("");
      const SnapshotState from = decision == Registration::Resume ? row->second : SnapshotState::Pending;
      // A failed table is copying again on every rerun (also when its failure came after its
      // last chunk), so that it can move on to copied.
      if (!t.pending.empty() || from == SnapshotState::FailedRecoverable) {
        Status allowed = CheckSnapshotTransition(from, SnapshotState::Copying, o.force, "table " + t.name);
        if (!allowed.ok()) throw CommandFailed(allowed.error().message);
        MustSucceed(target,
                    target.ExecParams("UPDATE trellara.snapshot_tables SET state = 'copying', last_error = NULL, "
                                      "updated_at = now() WHERE flow = $1 AND schema_name = $2 AND table_name = $3",
                                      {config.flow_name, t.schema, t.table}),
                    what);
      }
    }
    MustSucceed(target, target.Exec("COMMIT"), what);
  } catch (...) {
    target.Exec("ROLLBACK");
    throw;
  }
}

}  // namespace trellara::cli::snapshot_detail
