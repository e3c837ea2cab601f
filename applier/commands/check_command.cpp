// check_command.cpp — `trellara check --config F [--format text|json]`: a DBA's preflight of one
// flow (docs/apply.md "trellara check").
//
// Source: the rows of trellara.check(flow), reported unchanged, and the flow's published tables
// (ReadSourceTables, the one reader of them). Target: whether `trellara apply` can run there as the
// configured role — reachable, the replication origin, the state schema, session_replication_role,
// the privileges on every published table, the triggers and rules that fire for replicated rows,
// keys, and unresolved quarantined transactions.
//
// This file only reads catalogs and adapts rows into core's PreflightReport (preflight.h), which
// decides the status, the exit code and the output. Both sessions run with
// default_transaction_read_only = on: it never writes to either side, never creates the origin or
// the state schema. A check it could not make is a finding, never a silent pass.
//
// Exit 0: nothing critical. 2: a critical finding (including a side that cannot be reached).
// 1: the command line or the configuration file is wrong (no report is printed).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <iostream>

#include "commands/commands.h"
#include "pg/source_tables.h"
#include "trellara/report/preflight.h"

namespace trellara::cli {
// Named, not anonymous: the command files compile as unity batches (CMakeLists.txt).
namespace check_command {
namespace {


bool IsTrue(const std::optional<std::string>& v) { return v == std::optional<std::string>("t"); }

struct Findings {
  PreflightSide& side;
  void Add(PreflightSeverity severity, std::string check, std::string subject, std::string detail,
           std::string remedy = "") {
    side.findings.push_back({severity, std::move(check), std::move(subject), std::move(detail), std::move(remedy)});
  }
};

// A session for reading only: the pinned settings plus default_transaction_read_only, so no
// statement of this command can write. nullptr (and a critical finding) when it cannot connect.
std::unique_ptr<PgConnection> ConnectReadOnly(const FlowConfig& config, const std::string& conninfo,
                                              const std::string& side_name, Findings& out) {
  const std::string where = PgConnection::DescribeConninfo(conninfo);
  auto conn = PgConnection::Connect(conninfo, "trellara-check/" + config.flow_name);
  if (!conn) {
    out.Add(PreflightSeverity::Critical, side_name + "_reachable", where,
            "cannot connect to the " + side_name + " of flow " + config.flow_name + ": " + conn.error().message,
            "start the " + side_name + " server or fix " + side_name + ".conninfo in " + config.path);
    return nullptr;
  }
  auto pinned = (*conn)->Exec(std::string(kPinnedSessionSettingsSql) + "; SET default_transaction_read_only = on");
  if (!pinned.ok()) {
    out.Add(PreflightSeverity::Critical, side_name + "_reachable", where,
            "connected, but setting up a read-only session failed: " + pinned.Describe(),
            "check the " + side_name + " server's log and the role in " + side_name + ".conninfo");
    return nullptr;
  }
  return std::move(conn.value());
}

// ---- source -------------------------------------------------------------------------------------

// trellara.check(flow) rows unchanged, then the published tables (nullopt when they could not be read).
std::optional<std::vector<SourceTable>> CheckSource(const FlowConfig& config, PreflightSide& side) {
  Findings out{side};
  if (config.source_conninfo.empty()) {
    out.Add(PreflightSeverity::Warning, "source_configured", "[source] conninfo",
            "[source] conninfo is not set in " + config.path +
                ": the source checks (trellara.check) were not run, and the target's table checks, which need the "
                "flow's published tables, were not run either",
            "set conninfo under [source] in " + config.path + " and run trellara check again");
    return std::nullopt;
  }
  auto source = ConnectReadOnly(config, config.source_conninfo, "source", out);
  if (!source) return std::nullopt;
  side.reachable = true;
  auto rows = source->ExecParams("SELECT severity, \"check\", subject, detail, remedy FROM trellara.check($1)",
                                 {config.flow_name});
  if (!rows.ok()) {
    out.Add(PreflightSeverity::Critical, "source_check", source->Describe(),
            "SELECT * FROM trellara.check('" + config.flow_name + "') failed: " + rows.Describe(),
            "make sure the trellara extension is installed on the source, flow " + config.flow_name +
                " exists (trellara.flows), and the role is a member of pg_monitor or trellara_admin");
  } else {
    for (int i = 0; i < rows.rows(); i++) {
      const std::string severity = rows.Value(i, 0).value_or("");
      PreflightFinding f{PreflightSeverity::Critical, rows.Value(i, 1).value_or(""), rows.Value(i, 2).value_or(""),
                         rows.Value(i, 3).value_or(""), rows.Value(i, 4).value_or("")};
      if (auto parsed = ParsePreflightSeverity(severity))
        f.severity = *parsed;
      else  // never guess what an unknown severity means: it is shown, and stops the flow
        f.detail = "(unknown severity '" + severity + "' from trellara.check, reported as critical) " + f.detail;
      side.findings.push_back(std::move(f));
    }
  }
  try {
    return ReadSourceTables(*source, config, {});
  } catch (const CommandFailed& failed) {
    out.Add(PreflightSeverity::Critical, "source_tables", "flow " + config.flow_name,
            std::string("reading the flow's published tables failed: ") + failed.what(),
            "fix the flow's publication on the source; the target's table checks need it");
    return std::nullopt;
  }
}

// ---- target -------------------------------------------------------------------------------------

struct TargetRole {
  std::string name;
  bool superuser = false;
};

PgResult Read(PgConnection& target, Findings& out, const std::string& check, const std::string& subject,
              const std::string& sql, const SqlParams& params) {
  PgResult r = target.ExecParams(sql, params);
  if (!r.ok())
    out.Add(PreflightSeverity::Critical, check, subject,
            "the check could not be made: the catalog query failed on " + target.Describe() + ": " + r.Describe(),
            "read the error; the role in target.conninfo must be able to read the system catalogs");
  return r;
}

void CheckOrigin(PgConnection& target, const FlowConfig& config, const TargetRole& role, Findings& out) {
  const std::string origin = "trellara_" + config.flow_name;
  // pg_replication_origin_oid() is not executable by PUBLIC; the catalog is readable.
  auto r = Read(target, out, "replication_origin", origin,
                "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_replication_origin WHERE roname = $1), "
                "has_function_privilege('pg_catalog.pg_replication_origin_create(text)', 'EXECUTE'), "
                "has_function_privilege('pg_catalog.pg_replication_origin_session_setup(text)', 'EXECUTE') AND "
                "has_function_privilege('pg_catalog.pg_replication_origin_xact_setup(pg_lsn, timestamp with time zone)', "
                "'EXECUTE') AND has_function_privilege('pg_catalog.pg_replication_origin_xact_reset()', 'EXECUTE') AND "
                "has_function_privilege('pg_catalog.pg_replication_origin_progress(text, boolean)', 'EXECUTE') AND "
                "has_function_privilege('pg_catalog.pg_replication_origin_oid(text)', 'EXECUTE')",
                {origin});
  if (!r.ok()) return;
  const bool exists = IsTrue(r.Value(0, 0));
  const bool can_create = IsTrue(r.Value(0, 1));
  const bool can_use = IsTrue(r.Value(0, 2));
  const std::string grant =
      "as a superuser on the target: GRANT EXECUTE ON FUNCTION pg_replication_origin_oid(text), "
      "pg_replication_origin_session_setup(text), pg_replication_origin_xact_setup(pg_lsn, timestamptz), "
      "pg_replication_origin_xact_reset(), pg_replication_origin_progress(text, boolean)" +
      std::string(exists ? "" : ", pg_replication_origin_create(text)") + " TO " + role.name +
      " (or run apply as a superuser)";
  if (!can_use) {
    out.Add(PreflightSeverity::Critical, "replication_origin", origin,
            std::string("replication origin ") + origin + (exists ? " exists" : " does not exist") + ", and role " +
                role.name + " cannot use replication origins (no EXECUTE on the pg_replication_origin_* functions apply calls)",
            grant);
  } else if (exists) {
    out.Add(PreflightSeverity::Ok, "replication_origin", origin,
            "replication origin " + origin + " exists and role " + role.name + " can use it");
  } else if (can_create) {
    out.Add(PreflightSeverity::Ok, "replication_origin", origin,
            "replication origin " + origin + " does not exist yet; role " + role.name +
                " can create it (trellara apply creates it on its first run)");
  } else {
    out.Add(PreflightSeverity::Critical, "replication_origin", origin,
            "replication origin " + origin + " does not exist and role " + role.name +
                " cannot create it (no EXECUTE on pg_replication_origin_create(text))",
            "as a superuser on the target: SELECT pg_replication_origin_create('" + origin + "'), or " + grant);
  }
}

void CheckSessionReplicationRole(PgConnection& target, const FlowConfig& config, const TargetRole& role,
                                 Findings& out) {
  const std::string wanted = SettingValue(config.session_replication_role);
  // session_replication_role is a superuser setting: apply's SET needs superuser or GRANT SET
  // (PostgreSQL 15), whatever the value.
  auto r = Read(target, out, "session_replication_role", "apply.session_replication_role",
                "SELECT has_parameter_privilege('session_replication_role', 'SET')", {});
  if (!r.ok()) return;
  const bool can_set = role.superuser || IsTrue(r.Value(0, 0));
  if (can_set)
    out.Add(PreflightSeverity::Ok, "session_replication_role", "apply.session_replication_role",
            "role " + role.name + " can SET session_replication_role = " + wanted +
                (role.superuser ? " (superuser)" : " (GRANT SET ON PARAMETER)"));
  else
    out.Add(PreflightSeverity::Critical, "session_replication_role", "apply.session_replication_role",
            "apply sets session_replication_role = " + wanted + " (apply.session_replication_role in " + config.path +
                "), and role " + role.name + " is not a superuser and has no SET privilege on that parameter",
            "as a superuser on the target: GRANT SET ON PARAMETER session_replication_role TO " + role.name);
}

// Whether apply's bootstrap (sql/trellara_target.sql) and its state writes can run as this role.
// Returns whether the state tables exist and can be read (for the quarantine check).
bool CheckStateSchema(PgConnection& target, const TargetRole& role, Findings& out) {
  auto r = Read(target, out, "target_state_schema", "schema trellara",
                "SELECT has_database_privilege(current_database(), 'CREATE'), current_database(), n.oid IS NOT NULL, "
                "  coalesce(has_schema_privilege(n.oid, 'USAGE') AND has_schema_privilege(n.oid, 'CREATE'), false), "
                "  coalesce(pg_has_role(n.nspowner, 'USAGE'), false) "
                "FROM (SELECT 1) AS one LEFT JOIN pg_catalog.pg_namespace n ON n.nspname = 'trellara'",
                {});
  if (!r.ok()) return false;
  const bool db_create = role.superuser || IsTrue(r.Value(0, 0));
  const std::string database = r.Value(0, 1).value_or("");
  const bool exists = IsTrue(r.Value(0, 2));
  const bool usable = role.superuser || IsTrue(r.Value(0, 3));
  const bool owns_schema = role.superuser || IsTrue(r.Value(0, 4));
  bool ok = true;
  // apply runs CREATE SCHEMA IF NOT EXISTS trellara on every start; PostgreSQL checks CREATE on the
  // database before it looks whether the schema exists.
  if (!db_create) {
    ok = false;
    out.Add(PreflightSeverity::Critical, "target_state_schema", "database " + database,
            "role " + role.name + " has no CREATE privilege on database " + database +
                ": trellara apply starts with CREATE SCHEMA IF NOT EXISTS trellara (sql/trellara_target.sql), which "
                "PostgreSQL refuses without it even when the schema exists",
            "as a superuser on the target: GRANT CREATE ON DATABASE " + database + " TO " + role.name);
  }
  if (exists && (!usable || !owns_schema)) {
    ok = false;
    out.Add(PreflightSeverity::Critical, "target_state_schema", "schema trellara",
            "schema trellara exists but role " + role.name +
                (usable ? " does not own it" : " lacks USAGE or CREATE on it") +
                ": apply's bootstrap creates and grants on objects in it",
            "ALTER SCHEMA trellara OWNER TO " + role.name + " (as its owner or a superuser), or run apply as the role "
            "that created it");
  }
  if (!exists) {
    if (ok)
      out.Add(PreflightSeverity::Ok, "target_state_schema", "schema trellara",
              "the target holds no trellara state yet; role " + role.name +
                  " can create it (trellara apply bootstraps sql/trellara_target.sql on its first run)");
    return false;
  }
  // Existing state: apply re-runs CREATE OR REPLACE FUNCTION and GRANT/REVOKE on its functions
  // (ownership needed) and writes its tables.
  auto objects = Read(target, out, "target_state_schema", "schema trellara",
                      "SELECT 'function ' || p.oid::regprocedure::text, pg_has_role(p.proowner, 'USAGE'), NULL "
                      "FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'trellara'::regnamespace "
                      "UNION ALL SELECT 'table ' || c.oid::regclass::text, true, "
                      "  concat_ws(', ', CASE WHEN NOT has_table_privilege(c.oid, 'SELECT') THEN 'SELECT' END, "
                      "    CASE WHEN NOT has_table_privilege(c.oid, 'INSERT') THEN 'INSERT' END, "
                      "    CASE WHEN NOT has_table_privilege(c.oid, 'UPDATE') THEN 'UPDATE' END, "
                      "    CASE WHEN NOT has_table_privilege(c.oid, 'DELETE') THEN 'DELETE' END) "
                      "FROM pg_catalog.pg_class c WHERE c.relnamespace = 'trellara'::regnamespace AND c.relkind = 'r' "
                      "ORDER BY 1",
                      {});
  if (!objects.ok()) return false;
  // One finding per kind of problem, naming every object it concerns.
  std::string not_owned, not_writable;
  for (int i = 0; i < objects.rows(); i++) {
    const std::string object = objects.Value(i, 0).value_or("");
    const std::string missing = objects.Value(i, 2).value_or("");
    if (role.superuser) continue;
    if (!IsTrue(objects.Value(i, 1))) not_owned += (not_owned.empty() ? "" : ", ") + object;
    if (!missing.empty()) not_writable += (not_writable.empty() ? "" : "; ") + object + " (" + missing + ")";
  }
  if (!not_owned.empty()) {
    ok = false;
    out.Add(PreflightSeverity::Critical, "target_state_schema", "schema trellara",
            "owned by another role than " + role.name + ": " + not_owned +
                "; apply's bootstrap (CREATE OR REPLACE FUNCTION, GRANT, REVOKE) fails on them",
            "run apply as the role that owns the trellara state, or as a superuser: ALTER FUNCTION ... OWNER TO " +
                role.name + " for each");
  }
  if (!not_writable.empty()) {
    ok = false;
    out.Add(PreflightSeverity::Critical, "target_state_schema", "schema trellara",
            "role " + role.name + " lacks privileges apply needs on its state tables: " + not_writable,
            "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA trellara TO " + role.name +
                " (or run apply as the role that owns them)");
  }
  if (ok)
    out.Add(PreflightSeverity::Ok, "target_state_schema", "schema trellara",
            "schema trellara exists and role " + role.name + " can run apply's bootstrap and write its state");
  return true;
}

void CheckQuarantine(PgConnection& target, const FlowConfig& config, Findings& out) {
  auto r = Read(target, out, "quarantine", "trellara.quarantine",
                "SELECT xid, commit_lsn::text, state, reason, message, next_step FROM trellara.quarantine "
                "WHERE flow = $1 AND state <> 'resolved' ORDER BY commit_lsn",
                {config.flow_name});
  if (!r.ok()) return;
  if (r.rows() == 0) {
    out.Add(PreflightSeverity::Ok, "quarantine", "flow " + config.flow_name,
            "no unresolved quarantined transaction of flow " + config.flow_name);
    return;
  }
  for (int i = 0; i < r.rows(); i++) {
    const std::string xid = r.Value(i, 0).value_or(""), lsn = r.Value(i, 1).value_or("");
    const std::string state = r.Value(i, 2).value_or("");
    const std::string subject = "transaction " + xid + " (commit " + lsn + ")";
    if (state == "replay_ready")
      // Repaired and released by the operator: the next apply replays it; nothing blocks.
      out.Add(PreflightSeverity::Warning, "quarantine", subject,
              "quarantined as " + r.Value(i, 3).value_or("") + ", marked replay_ready: the next trellara apply replays it",
              "run trellara apply --config " + config.path);
    else
      out.Add(PreflightSeverity::Critical, "quarantine", subject,
              "unresolved quarantined transaction (" + r.Value(i, 3).value_or("") + "), the flow halts there: " +
                  r.Value(i, 4).value_or(""),
              r.Value(i, 5).value_or(""));
  }
}

void CheckTable(PgConnection& target, const FlowConfig& config, const TargetRole& role, const SourceTable& table,
                Findings& out) {
  auto r = Read(target, out, "target_table", table.name,
                "SELECT c.oid IS NOT NULL, "
                "  concat_ws(', ', CASE WHEN NOT has_table_privilege(c.oid, 'SELECT') THEN 'SELECT' END, "
                "    CASE WHEN NOT has_table_privilege(c.oid, 'INSERT') THEN 'INSERT' END, "
                "    CASE WHEN NOT has_table_privilege(c.oid, 'UPDATE') THEN 'UPDATE' END, "
                "    CASE WHEN NOT has_table_privilege(c.oid, 'DELETE') THEN 'DELETE' END), "
                "  EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid AND (i.indisprimary OR i.indisreplident)), "
                "  (SELECT relreplident FROM pg_catalog.pg_class WHERE oid = c.oid)::text, "
                "  has_schema_privilege((SELECT relnamespace FROM pg_catalog.pg_class WHERE oid = c.oid), 'USAGE') "
                "FROM (SELECT pg_catalog.to_regclass($1) AS oid) AS c",
                {table.qualified});
  if (!r.ok()) return;
  if (!IsTrue(r.Value(0, 0))) {
    out.Add(PreflightSeverity::Critical, "target_table", table.name,
            "published table " + table.name + " does not exist on the target: its first replicated change is quarantined",
            "create it on the target with the source's definition (pg_dump -s -t " + table.qualified +
                " on the source), then copy it with trellara snapshot --config " + config.path + " --table " + table.name);
    return;
  }
  std::string missing = r.Value(0, 1).value_or("");
  if (!role.superuser && !IsTrue(r.Value(0, 4))) missing = "USAGE on its schema" + (missing.empty() ? "" : ", " + missing);
  if (!missing.empty() && !role.superuser)
    out.Add(PreflightSeverity::Critical, "target_table_privileges", table.name,
            "role " + role.name + " lacks " + missing + " on " + table.name +
                ": apply writes every replicated INSERT, UPDATE and DELETE of it (an UPDATE or DELETE also reads its key)",
            "GRANT SELECT, INSERT, UPDATE, DELETE ON " + table.qualified + " TO " + role.name +
                " (and USAGE on its schema) on the target");
  else
    out.Add(PreflightSeverity::Ok, "target_table", table.name,
            "exists; role " + role.name + " can SELECT, INSERT, UPDATE and DELETE it");
  // Every published column must exist on the target (contract-test says more: types, keys).
  auto cols = Read(target, out, "target_table_columns", table.name,
                   "SELECT coalesce(array_to_string(ARRAY(SELECT quote_ident(a.attname) FROM pg_catalog.pg_attribute a "
                   "  WHERE a.attrelid = pg_catalog.to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped "
                   "  ORDER BY a.attnum), ','), '')",
                   {table.qualified});
  if (cols.ok()) {
    std::vector<std::string> have;
    std::string list = cols.Value(0, 0).value_or("");
    for (size_t start = 0; start < list.size();) {
      // quote_ident output never holds a comma outside double quotes
      size_t end = start;
      bool quoted = false;
      while (end < list.size() && (quoted || list[end] != ',')) {
        if (list[end] == '"') quoted = !quoted;
        end++;
      }
      have.push_back(list.substr(start, end - start));
      start = end + 1;
    }
    std::string missing_columns;
    for (const auto& c : table.column_list)
      if (std::find(have.begin(), have.end(), c) == have.end())
        missing_columns += (missing_columns.empty() ? "" : ", ") + c;
    if (!missing_columns.empty())
      out.Add(PreflightSeverity::Critical, "target_table_columns", table.name,
              "the target's " + table.name + " lacks published column(s) " + missing_columns +
                  ": the first replicated change of it is quarantined (missing_column)",
              "add them on the target with the source's types (pg_dump -s -t " + table.qualified +
                  " on the source shows them), or see trellara contract-test --config " + config.path);
  }
  if (!IsTrue(r.Value(0, 2)))
    out.Add(PreflightSeverity::Warning, "target_table_key", table.name,
            table.name + " has no primary key and no replica identity index on the target (replica identity " +
                r.Value(0, 3).value_or("?") + "): each replicated UPDATE and DELETE has no index to find its row by",
            "add a primary key on the target matching the source's key (" +
                (table.key_columns.empty() ? std::string("the source has none either") : [&] {
                  std::string k;
                  for (const auto& c : table.key_columns) k += (k.empty() ? "" : ", ") + c;
                  return k;
                }()) +
                ")");

  // pg_trigger.tgtype bits (PG's trigger.h): INSERT 4, DELETE 8, UPDATE 16, TRUNCATE 32.
  auto trig = Read(target, out, "target_trigger_fires", table.name,
                   "SELECT tgname, tgenabled::text, concat_ws(' OR ', CASE WHEN tgtype & 4 <> 0 THEN 'INSERT' END, "
                   "CASE WHEN tgtype & 16 <> 0 THEN 'UPDATE' END, CASE WHEN tgtype & 8 <> 0 THEN 'DELETE' END, "
                   "CASE WHEN tgtype & 32 <> 0 THEN 'TRUNCATE' END), false FROM pg_catalog.pg_trigger "
                   "WHERE tgrelid = pg_catalog.to_regclass($1) AND NOT tgisinternal "
                   "UNION ALL SELECT rulename, ev_enabled::text, 'ON ' || CASE ev_type WHEN '2' THEN 'UPDATE' WHEN '3' "
                   "THEN 'INSERT' WHEN '4' THEN 'DELETE' ELSE 'SELECT' END || CASE WHEN is_instead THEN ' DO INSTEAD' "
                   "ELSE ' DO ALSO' END, true FROM pg_catalog.pg_rewrite WHERE ev_class = pg_catalog.to_regclass($1) "
                   "AND rulename <> '_RETURN' ORDER BY 4, 1",
                   {table.qualified});
  if (!trig.ok()) return;
  for (int i = 0; i < trig.rows(); i++) {
    TargetTriggerFact fact{table.name, table.qualified, trig.Value(i, 0).value_or(""),
                           trig.Value(i, 1).value_or("O").front(), trig.Value(i, 2).value_or(""),
                           IsTrue(trig.Value(i, 3))};
    if (auto f = ReplicatedTriggerFinding(fact, SettingValue(config.session_replication_role))) out.side.findings.push_back(*f);
  }
}

void CheckTarget(const FlowConfig& config, const std::optional<std::vector<SourceTable>>& tables, PreflightSide& side) {
  Findings out{side};
  auto target = ConnectReadOnly(config, config.target_conninfo, "target", out);
  if (!target) return;
  side.reachable = true;
  auto who = target->Exec("SELECT current_user, rolsuper, current_setting('server_version') FROM pg_catalog.pg_roles "
                          "WHERE rolname = current_user");
  if (!who.ok() || who.rows() != 1) {
    out.Add(PreflightSeverity::Critical, "target_reachable", target->Describe(),
            "connected, but reading the session's role failed: " + who.Describe(),
            "check the role in target.conninfo");
    return;
  }
  TargetRole role{who.Value(0, 0).value_or(""), IsTrue(who.Value(0, 1))};
  out.Add(PreflightSeverity::Ok, "target_reachable", target->Describe(),
          "connected as role " + role.name + (role.superuser ? " (superuser)" : " (not a superuser)") +
              ", PostgreSQL " + who.Value(0, 2).value_or(""));
  CheckOrigin(*target, config, role, out);
  CheckSessionReplicationRole(*target, config, role, out);
  if (CheckStateSchema(*target, role, out)) CheckQuarantine(*target, config, out);
  if (!tables) {
    out.Add(PreflightSeverity::Warning, "target_tables", "flow " + config.flow_name,
            "the target's tables were not checked: their list is the flow's publication on the source, which could "
            "not be read (see the source findings)",
            "make the source reachable, then run trellara check again");
    return;
  }
  for (const SourceTable& table : *tables) CheckTable(*target, config, role, table, out);
}

}  // namespace
}  // namespace check_command

void RegisterCheck(CLI::App& app) {
  using namespace check_command;
  auto* cmd = app.add_subcommand("check", "preflight of one flow: source safety (trellara.check) and whether apply can "
                                          "run on the target (--config F); exit 0 ok, 2 critical, 1 usage");
  auto config_path = std::make_shared<std::string>();
  auto format = std::make_shared<OutputFormat>(OutputFormat::Text);
  AddConfigOption(cmd, *config_path);
  AddFormatOption(cmd, *format);
  cmd->callback([config_path, format] {
    FlowConfig config;
    try {
      config = LoadConfigOrFail(*config_path);
    } catch (const CommandFailed& failed) {
      throw CommandFailed(failed.what(), kExitCheckCouldNotRun);
    }
    PreflightReport report;
    report.flow = config.flow_name;
    const auto tables = CheckSource(config, report.source);
    CheckTarget(config, tables, report.target);
    std::cout << (*format == OutputFormat::Json ? RenderPreflightJson(report) : RenderPreflightText(report));
    std::cout.flush();
    if (PreflightExitCode(report) != kExitOk)
      throw CommandFailed("check of flow " + config.flow_name + " found critical problems: fix them (see above), "
                          "then run trellara check again",
                          PreflightExitCode(report));
  });

  // The source half alone (seed 000's `trellara source-safety`): slot, WAL retention, replica
  // identity, and the failover posture per physical standby (trellara.check on the source). The
  // target is not contacted; the same exit codes.
  auto* safety = app.add_subcommand("source-safety", "the source's safety checks only (trellara.check): slot, WAL "
                                                     "retention, replica identity, failover posture per standby "
                                                     "(--config F); exit 0 ok, 2 critical, 1 usage");
  auto safety_path = std::make_shared<std::string>();
  auto safety_format = std::make_shared<OutputFormat>(OutputFormat::Text);
  AddConfigOption(safety, *safety_path);
  AddFormatOption(safety, *safety_format);
  safety->callback([safety_path, safety_format] {
    FlowConfig config;
    try {
      config = LoadConfigOrFail(*safety_path);
    } catch (const CommandFailed& failed) {
      throw CommandFailed(failed.what(), kExitCheckCouldNotRun);
    }
    PreflightReport report;
    report.flow = config.flow_name;
    (void)CheckSource(config, report.source);
    std::cout << (*safety_format == OutputFormat::Json ? RenderPreflightJson(report) : RenderPreflightText(report));
    std::cout.flush();
    if (PreflightExitCode(report) != kExitOk)
      throw CommandFailed("source-safety of flow " + config.flow_name + " found critical problems: fix them (see "
                          "above), then run trellara source-safety again",
                          PreflightExitCode(report));
  });
}

}  // namespace trellara::cli
