// contract.h — whether a flow's source and target can run it, relation by relation, decided from
// catalog facts (`trellara contract-test`, docs/schema-changes.md "Operator commands in detail").
//
// The command reads the source's publication and catalog and the target's catalog into the plain
// structs below; CheckContract decides. Nothing here talks to a server. Every finding names the
// relation, a stable snake_case code, its severity, the problem, what happens if the flow runs as
// it is, and a concrete fix (a statement or a command). Severity `error`: the flow will fail or
// diverge (a statement the source refuses, a transaction the applier quarantines, a target that
// silently differs); `warning`: the flow runs but the target can differ from the source in a way
// the operator must choose to accept.
//
// The column rules are the applier's own (apply_schema.h TargetTypeAccepts, CheckTargetRelation;
// value_types.h for REPLICA IDENTITY FULL), so contract-test never passes a table the applier would
// quarantine: after the per-column checks, CheckTargetRelation runs on the same facts and any cause
// not already reported becomes a finding.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trellara/apply/apply_schema.h"
#include "trellara/record/envelope.h"

namespace trellara {

struct ContractSourceColumn {
  std::string name;
  std::string type_name;   // format_type(atttypid, atttypmod) with an empty search_path
  bool generated = false;  // attgenerated <> '': never sent by the plugin (as pgoutput in PG15)
  bool published = true;   // false: left out by the publication's column list
};

struct ContractPublication {
  std::string name;
  bool inserts = true, updates = true, deletes = true, truncates = true;  // pubinsert, ...
};

struct ContractSourceRelation {
  std::string schema, name;
  std::vector<ContractSourceColumn> columns;  // attribute order, dropped excluded, generated included
  ReplicaIdentity replica_identity = ReplicaIdentity::Default;  // relreplident
  bool has_primary_key = false;
  bool has_identity_index = false;  // REPLICA IDENTITY USING INDEX and the index still exists
  std::optional<std::string> row_filter;  // the flow's publication's WHERE for this table
  bool column_list = false;               // the flow's publication lists columns for this table
};

// A trigger or rule on the target table (internal triggers, e.g. of foreign keys, excluded).
struct ContractTargetTrigger {
  std::string name;
  char enabled = 'O';         // pg_trigger.tgenabled: O origin, A always, R replica, D disabled
  bool before_row = false;    // BEFORE ... FOR EACH ROW (or INSTEAD OF): it can change or skip the row
  std::string events;         // "INSERT OR UPDATE", for messages
};
struct ContractTargetRule {
  std::string name;
  char enabled = 'O';   // pg_rewrite.ev_enabled
  bool instead = false; // DO INSTEAD: the applier's statement is replaced
  std::string event;    // "INSERT", "UPDATE", "DELETE"
};

struct ContractRelation {
  ContractSourceRelation source;
  TargetRelation target;  // exists = false when the target has no table of that name
  std::vector<ContractTargetTrigger> triggers;
  std::vector<ContractTargetRule> rules;
};

struct ContractFacts {
  std::string flow;
  std::string config_path;                          // for the fixes that name a command
  std::string session_replication_role = "replica";  // [apply] session_replication_role
  ContractPublication publication;
  std::vector<ContractRelation> relations;
};

enum class ContractSeverity : uint8_t { Error, Warning };
const char* ContractSeverityName(ContractSeverity severity);  // "error" / "warning"

struct ContractFinding {
  std::string relation;  // "public.orders"; "" for a finding about the publication itself
  std::string code;      // missing_table, missing_column, type_mismatch, ... (stable)
  ContractSeverity severity = ContractSeverity::Error;
  std::string problem;
  std::string consequence;
  std::string fix;
};

struct ContractReport {
  std::vector<ContractFinding> findings;  // publication findings first, then relation by relation
  size_t relations = 0;
  bool has_error() const;
  const char* status() const { return has_error() ? "fail" : "ok"; }  // JSON "status"
};

// Whether a trigger / rule with this pg_trigger.tgenabled / pg_rewrite.ev_enabled fires in a
// session with `session_replication_role` ("replica": A and R fire; "origin" or "local": O and A).
bool FiresForReplicatedRows(char enabled, const std::string& session_replication_role);

ContractReport CheckContract(const ContractFacts& facts);

}  // namespace trellara
