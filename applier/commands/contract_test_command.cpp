// contract_test_command.cpp — `trellara contract-test --config F [--format text|json]`: whether the
// flow's source and target can run it, relation by relation (docs/schema-changes.md "Operator commands in detail").
//
// This file only reads catalogs: the flow's publication and its tables on the source (the table list
// through ReadSourceTables, the one reader of published tables), their columns, replica identity and
// column lists; the target's columns, triggers and rules of the same tables. Core's CheckContract
// (contract.h) decides every finding. It never writes to either side.
//
// Exit 0: nothing is an error. 1: something will fail or diverge. 2: it could not check (the
// configuration, a connection or a catalog query failed) — never 1 for a check it did not make.
#include <CLI/CLI.hpp>

#include <iostream>
#include <nlohmann/json.hpp>

#include "commands/commands.h"
#include "pg/source_tables.h"
#include "trellara/report/contract.h"

namespace trellara::cli {
// Named, not anonymous: the command files compile as unity batches (CMakeLists.txt).
namespace contract_test_command {
namespace {


bool IsTrue(const std::optional<std::string>& v) { return v == std::optional<std::string>("t"); }

ReplicaIdentity IdentityFromRelreplident(const std::string& c) {
  if (c == "n") return ReplicaIdentity::Nothing;
  if (c == "f") return ReplicaIdentity::Full;
  if (c == "i") return ReplicaIdentity::Index;
  return ReplicaIdentity::Default;
}

ContractPublication ReadPublication(PgConnection& source, const FlowConfig& config) {
  auto r = MustSucceed(source,
                       source.ExecParams("SELECT p.pubname, p.pubinsert, p.pubupdate, p.pubdelete, p.pubtruncate "
                                         "FROM trellara.flows f JOIN pg_catalog.pg_publication p ON p.pubname = "
                                         "f.publication WHERE f.name = $1",
                                         {config.flow_name}),
                       "reading the publication of flow " + config.flow_name + " on the source");
  if (r.rows() != 1)
    throw CommandFailed("flow " + config.flow_name + " or its publication does not exist on the source " +
                            source.Describe() + " (trellara.flows, pg_publication); check flow.name and "
                            "source.conninfo in " + config.path,
                        kExitCouldNotCheck);
  ContractPublication p;
  p.name = r.Value(0, 0).value_or("");
  p.inserts = IsTrue(r.Value(0, 1));
  p.updates = IsTrue(r.Value(0, 2));
  p.deletes = IsTrue(r.Value(0, 3));
  p.truncates = IsTrue(r.Value(0, 4));
  return p;
}

ContractSourceRelation ReadSourceRelation(PgConnection& source, const SourceTable& table, const std::string& publication) {
  auto r = MustSucceed(
      source,
      source.ExecParams(
          "SELECT c.relreplident, "
          "  EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid AND i.indisprimary), "
          "  EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid AND i.indisreplident), "
          "  (SELECT pr.prattrs IS NOT NULL AND NOT (a.attnum = ANY (pr.prattrs::int2[])) FROM pg_catalog.pg_publication_rel pr "
          "     JOIN pg_catalog.pg_publication p ON p.oid = pr.prpubid WHERE p.pubname = $2 AND pr.prrelid = c.oid), "
          "  (SELECT pr.prattrs IS NOT NULL FROM pg_catalog.pg_publication_rel pr "
          "     JOIN pg_catalog.pg_publication p ON p.oid = pr.prpubid WHERE p.pubname = $2 AND pr.prrelid = c.oid), "
          "  a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod), a.attgenerated <> '' "
          "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 "
          "AND NOT a.attisdropped WHERE c.oid = $1::regclass ORDER BY a.attnum",
          {table.qualified, publication}),
      "reading the definition of " + table.name + " on the source");
  ContractSourceRelation s;
  s.schema = table.schema;
  s.name = table.table;
  s.row_filter = table.row_filter;
  for (int i = 0; i < r.rows(); i++) {
    if (i == 0) {
      s.replica_identity = IdentityFromRelreplident(r.Value(i, 0).value_or("d"));
      s.has_primary_key = IsTrue(r.Value(i, 1));
      s.has_identity_index = IsTrue(r.Value(i, 2));
      s.column_list = IsTrue(r.Value(i, 4));
    }
    ContractSourceColumn c;
    c.name = r.Value(i, 5).value_or("");
    c.type_name = r.Value(i, 6).value_or("");
    c.generated = IsTrue(r.Value(i, 7));
    c.published = !IsTrue(r.Value(i, 3));
    s.columns.push_back(std::move(c));
  }
  return s;
}

void ReadTargetRelation(PgConnection& target, const SourceTable& table, ContractRelation& rel) {
  auto cols = MustSucceed(target,
                          target.ExecParams("SELECT c.oid IS NOT NULL, a.attname, format_type(a.atttypid, a.atttypmod), "
                                            "a.attnotnull, a.atthasdef, a.attidentity <> '', a.attgenerated <> '' "
                                            "FROM (SELECT pg_catalog.to_regclass($1) AS oid) AS c "
                                            "LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 "
                                            "AND NOT a.attisdropped ORDER BY a.attnum",
                                            {table.qualified}),
                          "reading the target's definition of " + table.name);
  rel.target.exists = IsTrue(cols.Value(0, 0));
  if (!rel.target.exists) return;
  for (int i = 0; i < cols.rows(); i++) {
    if (!cols.Value(i, 1)) continue;  // a table without columns
    TargetColumn c;
    c.name = *cols.Value(i, 1);
    c.type_name = cols.Value(i, 2).value_or("");
    c.not_null = IsTrue(cols.Value(i, 3));
    c.has_default = IsTrue(cols.Value(i, 4));
    c.identity = IsTrue(cols.Value(i, 5));
    c.generated = IsTrue(cols.Value(i, 6));
    rel.target.columns.push_back(std::move(c));
  }
  // pg_trigger.tgtype bits (PG's trigger.h): ROW 1, BEFORE 2, INSERT 4, DELETE 8, UPDATE 16,
  // TRUNCATE 32, INSTEAD 64. Internal triggers (foreign keys) are the target's own constraints.
  auto trig = MustSucceed(
      target,
      target.ExecParams("SELECT tgname, tgenabled::text, ((tgtype & 1) <> 0 AND (tgtype & 2) <> 0) OR (tgtype & 64) <> 0, "
                        "concat_ws(' OR ', CASE WHEN tgtype & 4 <> 0 THEN 'INSERT' END, CASE WHEN tgtype & 16 <> 0 "
                        "THEN 'UPDATE' END, CASE WHEN tgtype & 8 <> 0 THEN 'DELETE' END, CASE WHEN tgtype & 32 <> 0 "
                        "THEN 'TRUNCATE' END) FROM pg_catalog.pg_trigger WHERE tgrelid = pg_catalog.to_regclass($1) "
                        "AND NOT tgisinternal ORDER BY tgname",
                        {table.qualified}),
      "reading the triggers of " + table.name + " on the target");
  for (int i = 0; i < trig.rows(); i++) {
    ContractTargetTrigger t;
    t.name = trig.Value(i, 0).value_or("");
    t.enabled = trig.Value(i, 1).value_or("O").front();
    t.before_row = IsTrue(trig.Value(i, 2));
    t.events = trig.Value(i, 3).value_or("");
    rel.triggers.push_back(std::move(t));
  }
  auto rules = MustSucceed(target,
                           target.ExecParams("SELECT rulename, ev_enabled::text, is_instead, CASE ev_type WHEN '2' THEN "
                                             "'UPDATE' WHEN '3' THEN 'INSERT' WHEN '4' THEN 'DELETE' ELSE 'SELECT' END "
                                             "FROM pg_catalog.pg_rewrite WHERE ev_class = pg_catalog.to_regclass($1) "
                                             "AND rulename <> '_RETURN' ORDER BY rulename",
                                             {table.qualified}),
                           "reading the rules of " + table.name + " on the target");
  for (int i = 0; i < rules.rows(); i++) {
    ContractTargetRule r;
    r.name = rules.Value(i, 0).value_or("");
    r.enabled = rules.Value(i, 1).value_or("O").front();
    r.instead = IsTrue(rules.Value(i, 2));
    r.event = rules.Value(i, 3).value_or("");
    rel.rules.push_back(std::move(r));
  }
}

void Print(const ContractFacts& facts, const ContractReport& report, OutputFormat format) {
  if (format == OutputFormat::Json) {
    nlohmann::ordered_json j;
    j["flow"] = facts.flow;
    j["status"] = report.status();
    j["relations"] = report.relations;
    j["findings"] = nlohmann::ordered_json::array();
    for (const ContractFinding& f : report.findings)
      j["findings"].push_back({{"relation", f.relation.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(f.relation)},
                               {"code", f.code},
                               {"severity", ContractSeverityName(f.severity)},
                               {"problem", f.problem},
                               {"consequence", f.consequence},
                               {"fix", f.fix}});
    std::cout << j.dump(2) << "\n";
    return;
  }
  size_t errors = 0, warnings = 0;
  for (const ContractFinding& f : report.findings) {
    (f.severity == ContractSeverity::Error ? errors : warnings)++;
    std::cout << ContractSeverityName(f.severity) << " " << f.code << " "
              << (f.relation.empty() ? "publication " + facts.publication.name : f.relation) << "\n"
              << "  problem:     " << f.problem << "\n"
              << "  consequence: " << f.consequence << "\n"
              << "  fix:         " << f.fix << "\n\n";
  }
  std::cout << "contract-test flow " << facts.flow << ": " << report.relations << " relations of publication "
            << facts.publication.name << ", " << errors << " errors, " << warnings << " warnings: "
            << (report.has_error() ? "fail (the flow will fail or diverge: fix the errors above)"
                                   : "ok (the flow can run)")
            << "\n";
}

}  // namespace
}  // namespace contract_test_command

// The flow's contract facts; only `tables` (schema.table) when not empty (repair-plan uses that).
// Throws CommandFailed.
ContractFacts ReadContractFacts(const FlowConfig& config, const std::vector<std::string>& tables) {
  using namespace contract_test_command;
  if (config.source_conninfo.empty())
    throw CommandFailed("the source is not configured: set conninfo under [source] in " + config.path, kExitCouldNotCheck);
  ContractFacts facts;
  facts.flow = config.flow_name;
  facts.config_path = config.path;
  facts.session_replication_role = SettingValue(config.session_replication_role);
  auto source = ConnectPinned(config, config.source_conninfo, "source", "trellara-contract-test/" + config.flow_name);
  auto target = ConnectPinned(config, config.target_conninfo, "target", "trellara-contract-test/" + config.flow_name);
  facts.publication = ReadPublication(*source, config);
  for (const SourceTable& table : ReadSourceTables(*source, config, tables)) {
    ContractRelation rel;
    rel.source = ReadSourceRelation(*source, table, facts.publication.name);
    ReadTargetRelation(*target, table, rel);
    facts.relations.push_back(std::move(rel));
  }
  return facts;
}

void RegisterContractTest(CLI::App& app) {
  using namespace contract_test_command;
  auto* cmd = app.add_subcommand("contract-test",
                                 "whether source and target can run the flow, relation by relation (--config F)");
  auto config_path = std::make_shared<std::string>();
  auto format = std::make_shared<OutputFormat>(OutputFormat::Text);
  AddConfigOption(cmd, *config_path);
  AddFormatOption(cmd, *format);
  cmd->callback([config_path, format] {
    const FlowConfig config = LoadConfigOrFail(*config_path);
    ContractFacts facts;
    try {
      facts = ReadContractFacts(config, {});
    } catch (const CommandFailed& failed) {
      // Whatever stopped the reading, nothing was checked: exit 2, never the "will fail" code.
      throw CommandFailed(std::string("contract-test could not check flow ") + config.flow_name + ": " + failed.what(),
                          kExitCouldNotCheck);
    }
    const ContractReport report = CheckContract(facts);
    Print(facts, report, *format);
    std::cout.flush();
    if (report.has_error()) throw CommandFailed(
        "contract-test of flow " + config.flow_name + " failed: fix the errors listed above, then run it again",
        kExitContractFails);
  });
}

}  // namespace trellara::cli
