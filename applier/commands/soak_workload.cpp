// soak_workload.cpp — the soak table on the source and what `trellara soak` writes to it: the
// table is resolved, created when missing and checked against the flow's publication
// (PrepareTable), written by the workload (Workload), and digested on both sides at the end
// (Digest).
//
// Per iteration, on the source (one session): INSERT of N rows; UPDATE of a quarter of them;
// DELETE of the batch written two iterations before (so the table holds at most two batches and a
// 1-hour run does not grow without bound); one transaction with a SAVEPOINT whose part (N/2
// inserts, N/4 deletes) is rolled back with ROLLBACK TO SAVEPOINT; one whole transaction (N
// inserts, N updates) rolled back. With N large the committed ones are streamed in progress and
// the aborted ones exercise the relay's discard of aborted (sub)transactions.
//
// Writes only the soak table, only on the source; never creates a table the flow's publication
// would not capture, and never writes the target.
#include <string>
#include <utility>

#include "soak_command_internal.h"
#include "trellara/record/envelope.h"

namespace trellara::cli::soak_detail {
namespace {

uint64_t LsnOrFail(const std::optional<std::string>& text, const std::string& what) {
  auto lsn = text ? ParseLsn(*text) : std::nullopt;
  if (!lsn) throw CommandFailed("reading " + what + " returned '" + text.value_or("NULL") + "', not an LSN", kExitSetup);
  return *lsn;
}

}  // namespace

SoakTable PrepareTable(PgConnection& source, const FlowConfig& config, const std::string& table_arg) {
  auto flow = MustSucceed(source, source.ExecParams("SELECT publication FROM trellara.flows WHERE name = $1",
                                                    {config.flow_name}),
                          "reading flow " + config.flow_name + " from trellara.flows on the source");
  if (flow.rows() != 1)
    throw SetupFailed("flow " + config.flow_name + " does not exist on the source " + source.Describe() +
                      " (trellara.flows); check flow.name and source.conninfo in " + config.path);
  SoakTable t;
  t.publication = flow.Value(0, 0).value_or("");
  auto ident = source.ExecParams("SELECT CASE array_length(n, 1) WHEN 1 THEN 'public' WHEN 2 THEN n[1] END, n[array_length(n, 1)] "
                                 "FROM (SELECT pg_catalog.parse_ident($1) AS n) s",
                                 {table_arg});
  if (!ident.ok() || !ident.Value(0, 0))
    throw SetupFailed("invalid --table '" + table_arg + "': give schema.table or table (in schema public)" +
                      (ident.ok() ? std::string() : ": " + ident.Describe()));
  t.schema = *ident.Value(0, 0);
  t.table = ident.Value(0, 1).value_or("");
  auto q = MustSucceed(source, source.ExecParams("SELECT pg_catalog.format('%I.%I', $1::text, $2::text)", {t.schema, t.table}),
                       "quoting the soak table's name");
  t.qualified = q.Value(0, 0).value_or("");
  t.name = t.schema + "." + t.table;

  auto exists = MustSucceed(source, source.ExecParams("SELECT pg_catalog.to_regclass($1) IS NOT NULL", {t.qualified}),
                            "looking up " + t.name + " on the source");
  const bool created = exists.Value(0, 0) != std::optional<std::string>("t");
  const std::string published_sql =
      "SELECT 1 FROM pg_catalog.pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3";
  if (created) {
    MustSucceed(source, source.Exec("BEGIN"), "BEGIN");
    MustSucceed(source, source.Exec("CREATE TABLE " + t.qualified + " (id bigint PRIMARY KEY, payload text NOT NULL)"),
                "creating the soak table " + t.name + " on the source");
  } else {
    auto cols = MustSucceed(source,
                            source.ExecParams("SELECT count(*) FROM pg_catalog.pg_attribute WHERE attrelid = $1::regclass "
                                              "AND attname IN ('id', 'payload') AND attnum > 0 AND NOT attisdropped",
                                              {t.qualified}),
                            "reading the columns of " + t.name + " on the source");
    if (cols.Value(0, 0) != std::optional<std::string>("2"))
      throw SetupFailed("table " + t.name + " exists on the source " + source.Describe() +
                        " but has no columns id and payload; soak writes (id bigint PRIMARY KEY, payload text): "
                        "pass --table naming a new table (soak creates it) or one of that shape");
  }
  auto published = MustSucceed(source, source.ExecParams(published_sql, {t.publication, t.schema, t.table}),
                               "reading pg_publication_tables for publication " + t.publication);
  if (published.rows() == 0) {
    if (created) source.Exec("ROLLBACK");
    throw SetupFailed("the soak table " + t.name + " is not published by publication " + t.publication + " of flow " +
                      config.flow_name + " on the source " + source.Describe() +
                      (created ? " (soak did not create it: a new table would not be captured)" : "") +
                      "; add it with ALTER PUBLICATION " + t.publication + " ADD TABLE " + t.qualified +
                      " (and create it on the target), or use a flow whose publication is FOR ALL TABLES");
  }
  if (created) MustSucceed(source, source.Exec("COMMIT"), "committing the creation of " + t.name);
  return t;
}

soak::TableDigest Digest(PgConnection& conn, const SourceTable& t) {
  soak::TableDigest d;
  auto r = conn.Exec("SELECT count(*), coalesce(sum(pg_catalog.hashtextextended(ROW(" + t.columns +
                     ")::text, 0)::numeric), 0) FROM " + t.qualified);
  if (!r.ok()) {
    d.error = r.Describe() + " on " + conn.Describe();
    return d;
  }
  d.rows = std::stoull(r.Value(0, 0).value_or("0"));
  d.digest = r.Value(0, 1).value_or("0");
  return d;
}

void Workload::Iterate(int64_t batch_start, int64_t previous_previous_start, Clock::time_point deadline) {
  const int64_t n = static_cast<int64_t>(rows_);
  const std::string lo = std::to_string(batch_start), hi = std::to_string(batch_start + n - 1);
  const std::string next_lo = std::to_string(batch_start + n);
  const std::string in_batch = " WHERE id BETWEEN " + lo + " AND " + hi;

  Begin();
  report_.rows_inserted += Run("INSERT INTO " + table_.qualified +
                                   " (id, payload) SELECT g, pg_catalog.repeat(pg_catalog.md5(g::text), 10) "
                                   "FROM pg_catalog.generate_series(" + lo + "::bigint, " + hi + "::bigint) g",
                               "inserting " + std::to_string(n) + " rows");
  Commit("INSERT of rows " + lo + ".." + hi);
  if (Clock::now() >= deadline) return;

  Begin();
  report_.rows_updated += Run("UPDATE " + table_.qualified + " SET payload = pg_catalog.md5(payload) || ' updated'" +
                                  in_batch + " AND id % 4 = 0",
                              "updating a quarter of rows " + lo + ".." + hi);
  Commit("UPDATE of rows " + lo + ".." + hi + " with id % 4 = 0");
  if (Clock::now() >= deadline) return;

  if (previous_previous_start >= 0) {
    const std::string old_lo = std::to_string(previous_previous_start);
    const std::string old_hi = std::to_string(previous_previous_start + n - 1);
    Begin();
    report_.rows_deleted += Run("DELETE FROM " + table_.qualified + " WHERE id BETWEEN " + old_lo + " AND " + old_hi,
                                "deleting rows " + old_lo + ".." + old_hi);
    Commit("DELETE of rows " + old_lo + ".." + old_hi);
    if (Clock::now() >= deadline) return;
  }

  // A subtransaction abort inside a committed transaction.
  Begin();
  report_.rows_updated += Run("UPDATE " + table_.qualified + " SET payload = payload || ' kept'" + in_batch +
                                  " AND id % 4 = 1",
                              "updating rows before the savepoint");
  Run("SAVEPOINT trellara_soak", "SAVEPOINT");
  report_.rows_rolled_back +=
      Run("INSERT INTO " + table_.qualified + " (id, payload) SELECT g, 'rolled back to savepoint ' || g " +
              "FROM pg_catalog.generate_series(" + next_lo + "::bigint, " + std::to_string(batch_start + n + n / 2 - 1) +
              "::bigint) g",
          "inserting rows inside the savepoint");
  report_.rows_rolled_back += Run("DELETE FROM " + table_.qualified + in_batch + " AND id % 4 = 2",
                                  "deleting rows inside the savepoint");
  Run("ROLLBACK TO SAVEPOINT trellara_soak", "ROLLBACK TO SAVEPOINT");
  report_.rows_updated += Run("UPDATE " + table_.qualified + " SET payload = payload || ' after savepoint'" +
                                  in_batch + " AND id % 97 = 3",
                              "updating rows after the savepoint rollback");
  Commit("transaction with a rolled-back savepoint on rows " + lo + ".." + hi);
  report_.savepoint_rollbacks++;
  if (Clock::now() >= deadline) return;

  // A top-level abort.
  Begin();
  report_.rows_rolled_back +=
      Run("INSERT INTO " + table_.qualified + " (id, payload) SELECT g, 'rolled back ' || g " +
              "FROM pg_catalog.generate_series(" + next_lo + "::bigint, " + std::to_string(batch_start + 2 * n - 1) +
              "::bigint) g",
          "inserting rows in the rolled-back transaction");
  report_.rows_rolled_back += Run("UPDATE " + table_.qualified + " SET payload = 'rolled back'" + in_batch,
                                  "updating rows in the rolled-back transaction");
  Run("ROLLBACK", "ROLLBACK");
  report_.rolled_back++;
}

void Workload::Fail(const std::string& what, const PgResult& r) {
  throw CommandFailed("soak workload on " + table_.name + ": " + what + " failed on the source " +
                          source_.Describe() + ": " + r.Describe() + "; the run stopped (nothing was judged)",
                      kExitSetup);
}

uint64_t Workload::Run(const std::string& sql, const std::string& what) {
  auto r = source_.Exec(sql);
  if (!r.ok()) Fail(what, r);
  return r.affected();
}

void Workload::Commit(const std::string& what) {
  auto before = source_.Exec("SELECT pg_catalog.pg_current_wal_insert_lsn()::text, pg_catalog.pg_current_xact_id()::text");
  if (!before.ok()) Fail("reading the WAL position before COMMIT", before);
  CommittedTransaction t;
  t.lower_lsn = LsnOrFail(before.Value(0, 0), "pg_current_wal_insert_lsn() before COMMIT");
  t.xid = before.Value(0, 1).value_or("0");
  t.xid32 = std::to_string(std::stoull(t.xid) & 0xFFFFFFFFull);
  Run("COMMIT", "COMMIT of the " + what);
  t.committed_at = Clock::now();
  auto after = source_.Exec("SELECT pg_catalog.pg_current_wal_insert_lsn()::text");
  if (!after.ok()) Fail("reading the WAL position after COMMIT", after);
  t.upper_lsn = LsnOrFail(after.Value(0, 0), "pg_current_wal_insert_lsn() after COMMIT");
  t.what = what;
  report_.committed++;
  lag_.Add(std::move(t));
}

}  // namespace trellara::cli::soak_detail
