// apply_session_snapshot.cpp — the target session's reads and writes of the snapshot registry
// (apply_session.h): the registry as the applier loads it, the control version, one chunk's state
// read FOR SHARE inside the apply transaction, recorded skips, and the hold rows and lock of
// `trellara hold`. Never defaults a position it cannot read: a wrong snapshot_lsn would decide
// which changes a copy holds.
#include "engine/apply_session.h"

#include <iostream>

namespace trellara::cli::apply {

// snapshot_chunks.snapshot_lsn as pg_lsn prints it (never defaulted: a wrong position would decide
// which changes the copy holds).
uint64_t ApplySession::SnapshotLsnOf(const std::string& text, const std::string& chunk, const std::string& table) {
  auto lsn = ParseLsn(text);
  if (!lsn)
    Fail(chunk + " is copied at a snapshot_lsn the applier cannot read (" + text + "); rerun trellara snapshot "
         "--table " + table + " --force");
  return *lsn;
}

uint64_t ApplySession::LoadSnapshotRegistry(SnapshotRegistry& registry) {
  const std::string& flow = config_.flow_name;
  const std::string what = "reading the snapshot registry of flow " + flow +
                           " (trellara.apply_control, snapshot_tables, snapshot_chunks, apply_holds)";
  Must(conn_->Exec("BEGIN"), what);
  // The control lock, shared: no registration and no hold request commits between these reads.
  Must(conn_->ExecParams("SELECT pg_advisory_xact_lock_shared(hashtextextended('trellara control ' || $1, 0))", {flow}),
       what + ": taking the control lock shared");
  auto version = Must(conn_->ExecParams(
                          "SELECT coalesce((SELECT version FROM trellara.apply_control WHERE flow = $1), 0)", {flow}),
                      what);
  auto progress = Must(
      conn_->ExecParams("SELECT coalesce(pg_replication_origin_progress($1, false), '0/0')::text", {origin_name_}),
      what + ": reading the origin progress");
  // With each table the partitioned tables above it on the target (a TRUNCATE naming one of them
  // reaches it), separated by U+001F.
  auto tables = Must(conn_->ExecParams(
                         "SELECT t.schema_name, t.table_name, t.key_column, t.state, "
                         "  pg_catalog.array_to_string(ARRAY(SELECT n.nspname || '.' || c.relname "
                         "    FROM pg_catalog.pg_partition_ancestors(pg_catalog.to_regclass(pg_catalog.format('%I.%I', "
                         "           t.schema_name, t.table_name))) AS a(relid) "
                         "    JOIN pg_catalog.pg_class c ON c.oid = a.relid AND c.relkind = 'p' "
                         "    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace), E'\\x1f') "
                         "FROM trellara.snapshot_tables t WHERE t.flow = $1",
                         {flow}),
                     what);
  auto chunks = Must(conn_->ExecParams("SELECT schema_name, table_name, chunk_no, lo, hi, state, snapshot, "
                                       "snapshot_lsn::text FROM trellara.snapshot_chunks WHERE flow = $1 "
                                       "ORDER BY schema_name, table_name, lo NULLS FIRST, chunk_no",
                                       {flow}),
                     what);
  const std::string applied = progress.Value(0, 0).value_or("0/0");
  // A hold the target is already beyond can no longer be reached exactly: `passed` (the holder
  // retries with a new point).
  auto passed = Must(conn_->ExecParams("UPDATE trellara.apply_holds SET state = 'passed', applied_lsn = $2::pg_lsn, "
                                       "updated_at = now() WHERE flow = $1 AND state = 'requested' AND lsn < $2::pg_lsn "
                                       "RETURNING hold_id, lsn::text",
                                       {flow, applied}),
                     what + ": marking holds the applier is already beyond as passed");
  auto holds = Must(conn_->ExecParams("SELECT hold_id, lsn::text FROM trellara.apply_holds "
                                      "WHERE flow = $1 AND state = 'requested' ORDER BY lsn, hold_id",
                                      {flow}),
                    what);
  Must(conn_->Exec("COMMIT"), what + ": COMMIT");

  const uint64_t version_value = std::stoull(version.Value(0, 0).value_or("0"));
  registry.Reset(version_value);
  for (int i = 0; i < tables.rows(); i++) {
    SnapshotTable& table =
        registry.AddTable(tables.Value(i, 0).value_or(""), tables.Value(i, 1).value_or(""), tables.Value(i, 2));
    table.handed_off = tables.Value(i, 3) == std::optional<std::string>("handoff_ready");
    const std::string ancestors = tables.Value(i, 4).value_or("");
    for (size_t start = 0; start < ancestors.size();) {
      size_t end = ancestors.find('\x1f', start);
      if (end == std::string::npos) end = ancestors.size();
      table.partition_ancestors.push_back(ancestors.substr(start, end - start));
      start = end + 1;
    }
  }
  for (int i = 0; i < chunks.rows(); i++) {
    const std::string schema = chunks.Value(i, 0).value_or("");
    const std::string name = chunks.Value(i, 1).value_or("");
    const std::string chunk_no_text = chunks.Value(i, 2).value_or("0");
    const std::string chunk = "chunk " + chunk_no_text + " of " + schema + "." + name + " (flow " + flow + ")";
    SnapshotTable* table = registry.Find(schema, name);
    if (table == nullptr)
      Fail(chunk + " is in trellara.snapshot_chunks but its table is not in trellara.snapshot_tables; the registry "
           "was edited by hand: rerun trellara snapshot --table " + schema + "." + name + " --force");
    ChunkRange range;
    range.chunk_no = static_cast<int32_t>(std::stol(chunk_no_text));
    if (auto lo = chunks.Value(i, 3)) range.lo = std::stoll(*lo);
    if (auto hi = chunks.Value(i, 4)) range.hi = std::stoll(*hi);
    table->ranges.push_back(range);
    ChunkView view;
    if (chunks.Value(i, 5) == std::optional<std::string>("copied")) {
      auto parsed = ParseSourceSnapshot(chunks.Value(i, 6).value_or(""));
      if (!parsed)
        Fail(chunk + " is copied with a snapshot the applier cannot read: " + parsed.error().message +
             "; rerun trellara snapshot --table " + schema + "." + name + " --force");
      view.kind = ChunkView::Kind::Copied;
      view.snapshot = std::move(parsed.value());
      if (auto lsn = chunks.Value(i, 7)) view.snapshot_lsn = SnapshotLsnOf(*lsn, chunk, schema + "." + name);
    }
    table->views[range.chunk_no] = std::move(view);
  }
  for (int i = 0; i < tables.rows(); i++)
    if (SnapshotTable* table = registry.Find(tables.Value(i, 0).value_or(""), tables.Value(i, 1).value_or("")))
      table->Learnt();
  for (int i = 0; i < passed.rows(); i++)
    std::cerr << "apply flow=" << flow << " event=hold_passed hold=" << passed.Value(i, 0).value_or("")
              << " lsn=" << passed.Value(i, 1).value_or("") << " applied_lsn=" << applied << std::endl;
  for (int i = 0; i < holds.rows(); i++)
    registry.AddHold(RequestedHold{holds.Value(i, 0).value_or(""), ParseLsn(holds.Value(i, 1).value_or("0/0")).value_or(0)});
  registry.Sealed();
  return ParseLsn(applied).value_or(0);
}

uint64_t ApplySession::ReadControlVersion() {
  auto r = Must(conn_->ExecParams("SELECT coalesce((SELECT version FROM trellara.apply_control WHERE flow = $1), 0)",
                                  {config_.flow_name}),
                "reading the snapshot control version of flow " + config_.flow_name + " (trellara.apply_control)");
  return std::stoull(r.Value(0, 0).value_or("0"));
}

ChunkView ApplySession::ReadChunkForShare(const SnapshotTable& table, int32_t chunk_no, uint64_t version) {
  const std::string chunk = "chunk " + std::to_string(chunk_no) + " of " + table.Display() + " (flow " +
                            config_.flow_name + ")";
  auto r = Must(conn_->ExecParams("SELECT state, snapshot, snapshot_lsn::text FROM trellara.snapshot_chunks WHERE flow = $1 AND "
                                  "schema_name = $2 AND table_name = $3 AND chunk_no = $4 FOR SHARE",
                                  {config_.flow_name, table.schema, table.name, std::to_string(chunk_no)}),
                "reading the state of " + chunk + " FOR SHARE");
  if (r.rows() != 1)
    Fail(chunk + " is in the applier's registry (control version " + std::to_string(version) +
         ") but not in trellara.snapshot_chunks, although the registry did not change; it was edited by hand: rerun "
         "trellara snapshot --table " + table.Display() + " --force, then trellara apply");
  ChunkView view;
  if (r.Value(0, 0) == std::optional<std::string>("copied")) {
    auto parsed = ParseSourceSnapshot(r.Value(0, 1).value_or(""));
    if (!parsed)
      Fail(chunk + " is copied with a snapshot the applier cannot read: " + parsed.error().message +
           "; rerun trellara snapshot --table " + table.Display() + " --force");
    view.kind = ChunkView::Kind::Copied;
    view.snapshot = std::move(parsed.value());
    if (auto lsn = r.Value(0, 2)) view.snapshot_lsn = SnapshotLsnOf(*lsn, chunk, table.Display());
  } else {
    view.kind = ChunkView::Kind::Pending;
  }
  return view;
}

void ApplySession::RecordSkip(const SnapshotTable& table, int32_t chunk_no, const TxIdentity& tx) {
  Must(conn_->ExecParams("INSERT INTO trellara.snapshot_skips (flow, schema_name, table_name, chunk_no, xid, commit_lsn) "
                         "VALUES ($1, $2, $3, $4, $5, $6::pg_lsn) ON CONFLICT DO NOTHING",
                         {config_.flow_name, table.schema, table.name, std::to_string(chunk_no), std::to_string(tx.xid),
                          FormatLsn(tx.commit_lsn)}),
       "recording that " + DescribeTransaction(tx) + " was left out of pending chunk " + std::to_string(chunk_no) +
           " of " + table.Display() + " (trellara.snapshot_skips)");
}

bool ApplySession::MarkHold(const std::string& hold_id, const char* state) {
  auto r = Must(conn_->ExecParams("UPDATE trellara.apply_holds SET state = $3, "
                                  "applied_lsn = coalesce(pg_replication_origin_progress($4, false), '0/0'), "
                                  "updated_at = now() WHERE flow = $1 AND hold_id = $2 AND state = 'requested'",
                                  {config_.flow_name, hold_id, std::string(state), origin_name_}),
                std::string("marking hold ") + hold_id + " of flow " + config_.flow_name + " " + state +
                    " (trellara.apply_holds)");
  return r.affected() == 1;
}

bool ApplySession::TryHoldLock() {
  auto r = Must(conn_->ExecParams("SELECT pg_try_advisory_lock_shared(hashtextextended('trellara hold ' || $1, 0))",
                                  {config_.flow_name}),
                "waiting for the hold lock of flow " + config_.flow_name);
  return r.Value(0, 0) == std::optional<std::string>("t");
}

bool ApplySession::HoldRowExists(const std::string& hold_id) {
  auto r = Must(conn_->ExecParams("SELECT EXISTS (SELECT 1 FROM trellara.apply_holds WHERE flow = $1 AND hold_id = $2)",
                                  {config_.flow_name, hold_id}),
                "reading hold " + hold_id + " of flow " + config_.flow_name + " (trellara.apply_holds)");
  return r.Value(0, 0) == std::optional<std::string>("t");
}

void ApplySession::ReleaseHoldLock() {
  Must(conn_->ExecParams("SELECT pg_advisory_unlock_shared(hashtextextended('trellara hold ' || $1, 0))",
                         {config_.flow_name}),
       "releasing the hold lock of flow " + config_.flow_name);
}

}  // namespace trellara::cli::apply
