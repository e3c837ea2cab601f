// repair_plan.h — the numbered, copy-pasteable way out of a halted flow (`trellara repair-plan`,
// seed `source_schema_handoff_recovery`, docs/schema-changes.md "Operator commands in detail").
//
// The command reads the facts: the flow's open quarantine rows on the target (trellara.quarantine:
// xid, commit LSN, reason, message), the log records of each quarantined transaction (found by
// commit LSN: the relations it writes and the DDL it holds), the target's definition of the tables
// a DDL addresses, snapshot tables left failed_recoverable, the apply status, and the contract-test
// errors of the affected relations. BuildRepairPlan decides the steps; nothing here talks to a
// server or the log. Every command it prints is the real CLI syntax with the real flags; a
// conninfo is printed only when it holds no password (otherwise a placeholder the operator fills).
//
// The steps, in order (only those that apply; numbered as printed):
//   inspect -> discover the schema on both sides -> contract-test -> repair (per transaction: the
//   DDL and the statements core PlanDdl would run, the target ALTERs from contract-test's fixes, or
//   a re-snapshot with an exact handoff) -> replay-ready with the exact boundary -> resume -> verify.
// No open quarantine and no failed snapshot table: no steps ("nothing to repair").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trellara/apply/apply_decision.h"
#include "trellara/apply/apply_schema.h"
#include "trellara/report/contract.h"
#include "trellara/apply/ddl_apply.h"
#include "trellara/record/envelope.h"

namespace trellara {

// One captured DDL of a quarantined transaction. The command asks core PlanDdl (ddl_apply.h) what
// the applier would run for it under ddl = "apply" against the target as it is now, and DescribeDdl
// for its one-line description, and passes both here.
struct RepairDdl {
  Ddl ddl;
  std::string description;  // DescribeDdl(ddl)
  DdlPlan plan;             // PlanDdl(ddl, captured, target now, DdlPolicy::Apply, DropTablePolicy::Keep)
};

struct RepairTransaction {
  uint32_t xid = 0;
  uint64_t commit_lsn = 0;
  QuarantineState state = QuarantineState::Quarantined;
  std::string reason;   // as stored (QuarantineReasonName): "ddl_policy_halt", "zero_rows_matched", ...
  std::string message;  // the quarantine's operator-facing sentence
  std::vector<uint64_t> log_offsets;  // its records in the flow's log (envelope, or chunks+manifest+marker)
  std::string log_error;               // why its records could not be read ("" when they were)
  std::vector<std::string> relations;  // schema.table it writes or alters, in first-seen order
  std::vector<RepairDdl> ddls;         // in the transaction's order
};

struct RepairSnapshotTable {  // a table of trellara.snapshot_tables in state failed_recoverable
  std::string table;          // schema.table
  std::string run_id;
  std::string last_error;
};

struct RepairFacts {
  std::string flow;
  std::string config_path;
  std::string log_directory;
  std::string source_conninfo;  // as configured; printed only without a password
  std::string target_conninfo;
  bool applier_running = false;
  std::vector<RepairTransaction> open;  // quarantined or replay_ready, oldest boundary first
  std::vector<RepairSnapshotTable> failed_snapshots;
  std::vector<ContractFinding> contract;  // contract-test findings of the affected relations
  std::string contract_error;             // why they could not be read ("" when they were)
  // The target is ahead of a promoted source (core DecideTimelineContinuity failed closed on the
  // log's TIMELINE): its reason, the log's timeline and where it branched. "" when not.
  std::string timeline_refusal;
  uint32_t timeline = 0;
  uint64_t timeline_branch_lsn = 0;
};

struct RepairStep {
  int n = 0;
  std::string title;
  std::vector<std::string> commands;  // shell commands; lines starting with "#" are notes to read
  std::string why;
};

struct RepairPlan {
  std::vector<RepairStep> steps;  // empty: nothing to repair
  bool nothing_to_repair() const { return steps.empty(); }
};

RepairPlan BuildRepairPlan(const RepairFacts& facts);

// The conninfo as a shell word for psql: single-quoted when it holds no password, else the
// placeholder "'<source conninfo>'" / "'<target conninfo>'" (`side`).
std::string ConninfoForCommand(const std::string& conninfo, const std::string& side);

// Whether a conninfo (keyword/value or URI form) carries a password.
bool ConninfoHasPassword(const std::string& conninfo);

}  // namespace trellara
