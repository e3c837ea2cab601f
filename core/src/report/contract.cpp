// contract.cpp — see contract.h.
#include "trellara/report/contract.h"

#include <algorithm>
#include <map>
#include <set>

#include "trellara/apply/apply_plan.h"
#include "trellara/base/fault.h"

namespace trellara {
namespace {

// Always quoted, so a fix is correct for keywords and mixed case alike ("user", "Order").
std::string Ident(const std::string& name) {
  std::string out = "\"";
  for (char c : name) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string Qualified(const ContractSourceRelation& r) { return Ident(r.schema) + "." + Ident(r.name); }
std::string Display(const ContractSourceRelation& r) { return r.schema + "." + r.name; }

class Findings {
 public:
  Findings(std::vector<ContractFinding>& out, std::string relation) : out_(out), relation_(std::move(relation)) {}
  void Add(const char* code, ContractSeverity severity, std::string problem, std::string consequence, std::string fix) {
    out_.push_back(ContractFinding{relation_, code, severity, std::move(problem), std::move(consequence), std::move(fix)});
  }
  const std::string& relation() const { return relation_; }

 private:
  std::vector<ContractFinding>& out_;
  std::string relation_;
};

bool PublishesUpdateOrDelete(const ContractPublication& p) { return p.updates || p.deletes; }

std::string RoleNote(const std::string& role) {
  return "the applier's session runs with session_replication_role = " + role;
}

// The publication's own actions: an action it does not publish leaves the target diverging.
void CheckPublication(const ContractFacts& facts, std::vector<ContractFinding>& out) {
  const ContractPublication& p = facts.publication;
  Findings f(out, "");
  struct Action {
    bool published;
    const char* name;
    const char* consequence;
  };
  const Action actions[] = {
      {p.inserts, "insert", "rows inserted on the source never reach the target"},
      {p.updates, "update", "rows updated on the source keep their old values on the target"},
      {p.deletes, "delete", "rows deleted on the source stay on the target"},
      {p.truncates, "truncate", "a TRUNCATE on the source leaves every row on the target"},
  };
  std::string skipped;
  std::string consequence;
  for (const Action& a : actions) {
    if (a.published) continue;
    skipped += (skipped.empty() ? "" : ", ") + std::string(a.name);
    consequence += (consequence.empty() ? "" : "; ") + std::string(a.consequence);
  }
  if (skipped.empty()) return;
  f.Add("publication_skips_action", ContractSeverity::Warning,
        "publication " + p.name + " of flow " + facts.flow + " does not publish " + skipped,
        consequence + "; trellara verify then reports the tables as different",
        "ALTER PUBLICATION " + Ident(p.name) + " SET (publish = 'insert, update, delete, truncate'); -- on the source, "
        "if the target must follow the source exactly");
}

void CheckFiltered(const ContractFacts& facts, const ContractSourceRelation& s, Findings& f) {
  const std::string pub = facts.publication.name;
  if (s.row_filter)
    f.Add("filtered_publication", ContractSeverity::Error,
          "publication " + pub + " publishes " + Display(s) + " with a row filter (WHERE " + *s.row_filter + ")",
          "the trellara output plugin refuses filtered tables: decoding stops with an ERROR and the flow captures "
          "nothing more until the filter is removed",
          "ALTER PUBLICATION " + Ident(pub) + " SET TABLE ...; -- on the source: list " + Qualified(s) +
              " without WHERE, or capture it through another publication");
  if (s.column_list)
    f.Add("filtered_publication", ContractSeverity::Error,
          "publication " + pub + " publishes " + Display(s) + " with a column list",
          "the trellara output plugin refuses column lists: decoding stops with an ERROR and the flow captures "
          "nothing more until the list is removed",
          "ALTER PUBLICATION " + Ident(pub) + " SET TABLE ...; -- on the source: list " + Qualified(s) +
              " without a column list");
}

void CheckReplicaIdentity(const ContractFacts& facts, const ContractSourceRelation& s, Findings& f) {
  const ContractPublication& p = facts.publication;
  if (!PublishesUpdateOrDelete(p)) return;
  const std::string actions = std::string(p.updates ? "UPDATE" : "") + (p.updates && p.deletes ? " and " : "") +
                              (p.deletes ? "DELETE" : "");
  bool usable = true;
  std::string why;
  switch (s.replica_identity) {
    case ReplicaIdentity::Nothing:
      usable = false;
      why = "REPLICA IDENTITY NOTHING";
      break;
    case ReplicaIdentity::Default:
      // Negative control (tests only, TRELLARA_FAULTS=defect.contract_default_identity_without_key:1:defect;
      // seed row missing_replica_identity, caught by the ctest
      // contract_passes_a_keyless_default_identity_table_negative_control): DEFAULT is taken to mean
      // "has a key", so a published table without a primary key passes the contract.
      usable = s.has_primary_key ||
               fault::Hit("defect.contract_default_identity_without_key") == fault::Action::Defect;
      why = "REPLICA IDENTITY DEFAULT and no primary key";
      break;
    case ReplicaIdentity::Index:
      usable = s.has_identity_index;
      why = "REPLICA IDENTITY USING INDEX, but the index no longer exists";
      break;
    case ReplicaIdentity::Full:
      break;
  }
  if (!usable) {
    f.Add("missing_replica_identity", ContractSeverity::Error,
          Display(s) + " has " + why + ", and publication " + p.name + " publishes " + actions,
          "the source refuses every " + actions + " on " + Display(s) +
              " (ERROR: cannot update/delete ... because it does not have a replica identity and publishes updates), "
              "and the applier could not address the target rows",
          "ALTER TABLE " + Qualified(s) + " ADD PRIMARY KEY (<key columns>); -- on the source, or ALTER TABLE " +
              Qualified(s) + " REPLICA IDENTITY USING INDEX <unique index on NOT NULL columns>; or, as a last "
              "resort, ALTER TABLE " + Qualified(s) + " REPLICA IDENTITY FULL");
    return;
  }
  // REPLICA IDENTITY FULL matches on every column, each exactly whatever its type (value_types.h
  // FullRowMatchPredicate): no type is refused.
}

// Columns, types, generated and NOT NULL columns; then the applier's own check as a safety net.
void CheckColumns(const ContractFacts& facts, const ContractRelation& rel, Findings& f) {
  const ContractSourceRelation& s = rel.source;
  const TargetRelation& t = rel.target;
  std::map<std::string, const TargetColumn*> target_by_name;
  for (const auto& c : t.columns) target_by_name.emplace(c.name, &c);
  std::set<std::string> sent;  // the columns the stream carries
  RelationInfo captured;       // what the applier will check: the columns the stream carries
  captured.schema = s.schema;
  captured.name = s.name;
  bool error_found = false;
  for (const auto& c : s.columns) {
    auto found = target_by_name.find(c.name);
    if (c.generated) {
      // Not replicated: the target computes its own value, or has none.
      std::string consequence;
      std::string fix;
      if (found == target_by_name.end()) {
        consequence = "the target has no column " + c.name + "; the source's generated values are not replicated";
        fix = "nothing, if the target does not need it; otherwise ALTER TABLE " + Qualified(s) + " ADD COLUMN " +
              Ident(c.name) + " " + c.type_name + " GENERATED ALWAYS AS (<the source's expression>) STORED; -- on the "
              "target";
      } else if (found->second->generated) {
        consequence = "the target computes " + c.name + " with its own expression; it matches the source only if the "
                      "expressions are the same";
        fix = "compare the expressions: \\d " + Qualified(s) + " on both sides";
      } else {
        consequence = "the target column " + c.name + " is an ordinary column: it stays NULL (or its default) for "
                      "every replicated row and differs from the source";
        fix = "ALTER TABLE " + Qualified(s) + " DROP COLUMN " + Ident(c.name) + ", ADD COLUMN " + Ident(c.name) + " " +
              c.type_name + " GENERATED ALWAYS AS (<the source's expression>) STORED; -- on the target";
      }
      f.Add("generated_on_source", ContractSeverity::Warning,
            "column " + c.name + " of " + Display(s) + " is a generated column on the source", consequence, fix);
      continue;
    }
    if (!c.published) continue;  // a column list: reported as filtered_publication
    sent.insert(c.name);
    Column col;
    col.name = c.name;
    col.type_name = c.type_name;
    captured.columns.push_back(col);
    if (found == target_by_name.end()) {
      error_found = true;
      f.Add("missing_column", ContractSeverity::Error,
            "column " + c.name + " (" + c.type_name + ") of " + Display(s) + " does not exist on the target",
            "the first replicated change of " + Display(s) + " is quarantined (missing_column) and the flow halts there",
            "ALTER TABLE " + Qualified(s) + " ADD COLUMN " + Ident(c.name) + " " + c.type_name + "; -- on the target");
      continue;
    }
    const TargetColumn& tc = *found->second;
    if (!TargetTypeAccepts(c.type_name, tc.type_name)) {
      error_found = true;
      f.Add("type_mismatch", ContractSeverity::Error,
            "column " + c.name + " of " + Display(s) + " is " + c.type_name + " on the source but " + tc.type_name +
                " on the target, which cannot take every value exactly",
            "the first replicated change of " + Display(s) + " is quarantined (schema_mismatch) and the flow halts there",
            "ALTER TABLE " + Qualified(s) + " ALTER COLUMN " + Ident(c.name) + " TYPE " + c.type_name +
                "; -- on the target");
    }
    if (tc.generated) {
      error_found = true;
      f.Add("generated_on_target", ContractSeverity::Error,
            "column " + c.name + " of " + Display(s) + " is a generated column on the target, but the source sends its "
            "values",
            "the replicated value cannot be written: the first replicated change of " + Display(s) +
                " is quarantined (schema_mismatch) and the flow halts there",
            "ALTER TABLE " + Qualified(s) + " ALTER COLUMN " + Ident(c.name) + " DROP EXPRESSION; -- on the target");
    }
  }
  for (const auto& tc : t.columns) {
    if (sent.contains(tc.name) || !tc.not_null || tc.has_default || tc.identity || tc.generated) continue;
    // A source generated column of that name is not sent either: its NOT NULL is just as fatal.
    error_found = true;
    f.Add("not_null_without_default", ContractSeverity::Error,
          "column " + tc.name + " of " + Display(s) + " is NOT NULL without a default on the target, and the source "
          "does not send it",
          "every replicated INSERT into " + Display(s) + " fails: the transaction is quarantined and the flow halts "
          "there",
          "ALTER TABLE " + Qualified(s) + " ALTER COLUMN " + Ident(tc.name) + " DROP NOT NULL; -- on the target (or SET "
          "DEFAULT <value>)");
  }
  (void)facts;
  // The applier's own rule on the same facts: never pass what it would quarantine.
  if (!error_found) {
    if (auto cause = CheckTargetRelation(captured, t)) {
      const char* code = cause->reason == QuarantineReason::MissingColumn ? "missing_column" : "type_mismatch";
      f.Add(code, ContractSeverity::Error, cause->detail,
            "the first replicated change of " + Display(s) + " is quarantined (" +
                QuarantineReasonName(cause->reason) + ") and the flow halts there",
            "change the target as the problem says, then run trellara contract-test again");
    }
  }
}

void CheckTriggersAndRules(const ContractFacts& facts, const ContractRelation& rel, Findings& f) {
  const ContractSourceRelation& s = rel.source;
  const std::string& role = facts.session_replication_role;
  for (const auto& trig : rel.triggers) {
    if (!FiresForReplicatedRows(trig.enabled, role)) continue;
    const std::string enabled = trig.enabled == 'A'   ? "ENABLE ALWAYS"
                                : trig.enabled == 'R' ? "ENABLE REPLICA"
                                                      : "enabled";
    const std::string problem = "trigger " + trig.name + " (" + trig.events + ", " + enabled + ") on the target's " +
                                Display(s) + " fires for replicated rows (" + RoleNote(role) + ")";
    const std::string fix = "ALTER TABLE " + Qualified(s) + " DISABLE TRIGGER " + Ident(trig.name) +
                            "; -- on the target, or ENABLE TRIGGER (origin only) if it must not see replicated rows";
    if (trig.before_row)
      f.Add("replicated_trigger", ContractSeverity::Error, problem,
            "a BEFORE ROW trigger can change or skip the row the applier writes: the target diverges from the source, "
            "or an UPDATE/DELETE that it skips matches 0 rows and the transaction is quarantined",
            fix);
    else
      f.Add("replicated_trigger", ContractSeverity::Warning, problem,
            "it runs once per replicated row or statement: its side effects (writes to other tables, notifications) "
            "happen on the target for every source change",
            fix);
  }
  for (const auto& rule : rel.rules) {
    if (!FiresForReplicatedRows(rule.enabled, role)) continue;
    const std::string problem = "rule " + rule.name + " (ON " + rule.event + (rule.instead ? " DO INSTEAD" : " DO ALSO") +
                                ") on the target's " + Display(s) + " fires for replicated rows (" + RoleNote(role) +
                                ")";
    const std::string fix = "ALTER TABLE " + Qualified(s) + " DISABLE RULE " + Ident(rule.name) + "; -- on the target";
    if (rule.instead)
      f.Add("replicated_rule", ContractSeverity::Error, problem,
            "the applier's " + rule.event + " is replaced by the rule's action: the row is not written, the statement "
            "matches 0 rows and the transaction is quarantined, or the target silently diverges",
            fix);
    else
      f.Add("replicated_rule", ContractSeverity::Warning, problem,
            "the rule's extra statements run on the target for every replicated " + rule.event, fix);
  }
}

}  // namespace

const char* ContractSeverityName(ContractSeverity severity) {
  switch (severity) {
    case ContractSeverity::Error: return "error";
    case ContractSeverity::Warning: return "warning";
  }
  return "error";
}

bool ContractReport::has_error() const {
  return std::any_of(findings.begin(), findings.end(),
                     [](const ContractFinding& f) { return f.severity == ContractSeverity::Error; });
}

bool FiresForReplicatedRows(char enabled, const std::string& session_replication_role) {
  if (enabled == 'A') return true;
  if (enabled == 'D') return false;
  if (session_replication_role == "replica") return enabled == 'R';
  return enabled == 'O';  // origin / local
}

ContractReport CheckContract(const ContractFacts& facts) {
  ContractReport report;
  report.relations = facts.relations.size();
  CheckPublication(facts, report.findings);
  for (const ContractRelation& rel : facts.relations) {
    Findings f(report.findings, Display(rel.source));
    CheckFiltered(facts, rel.source, f);
    CheckReplicaIdentity(facts, rel.source, f);
    if (!rel.target.exists) {
      f.Add("missing_table", ContractSeverity::Error,
            Display(rel.source) + " is published by " + facts.publication.name + " but does not exist on the target",
            "the first replicated change of " + Display(rel.source) +
                " is quarantined (missing_table) and the flow halts there",
            "pg_dump --schema-only --table='" + Qualified(rel.source) +
                "' <source conninfo> | psql <target conninfo>; then trellara snapshot --config " + facts.config_path +
                " --table " + Display(rel.source));
      continue;
    }
    CheckColumns(facts, rel, f);
    CheckTriggersAndRules(facts, rel, f);
  }
  return report;
}

}  // namespace trellara
