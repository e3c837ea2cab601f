// ddl_apply.h — what the applier does with a captured DDL change (DESIGN §6 "Schema changes",
// docs/schema-changes.md), and how it knows a relation's definition did not change behind its back.
//
// The extension's event triggers record each DDL command on a published relation as a `Ddl`
// (envelope.h): structured steps (add column, rename, ...) and the relation's definition after
// the command. The applier never parses the statement text. For every Ddl change, in the order of
// the source transaction and inside the same target transaction, core decides here:
//
//   PlanDdl  Execute the returned statements; or NoTargetChange (nothing to run: an index, a
//            replica identity, a comment, DROP TABLE under ddl_drop_table = "keep"); or
//            Quarantine with ddl_policy_halt ([apply] ddl = "halt") or ddl_unsupported (anything
//            that cannot be reproduced exactly: ALTER TYPE with USING or a narrowing/converting
//            type, ADD COLUMN with a volatile default or an identity, partitions, SET SCHEMA, ...).
//            Steps are checked against the target's definition as it is now (TargetRelation, read
//            inside the transaction), step by step on a simulated copy: a step the target already
//            reflects (a column a DBA added ahead of time with an accepted type) is a no-op, a step
//            whose object is missing is ddl_unsupported naming it. After the last step the simulated
//            target must accept the captured relation (CheckTargetRelation) — a DDL record that
//            does not explain the definition it carries is never applied half-way.
//            "Already reflected" is checked before a step is refused (a column already there with
//            an accepted type, a type the target already takes even where USING was given), so
//            planning is idempotent: a transaction replayed after the operator changed the target
//            by hand plans no-ops for what was done. (Under ddl = "halt" the policy alone decides;
//            the applier chooses what a replay-ready transaction is planned with.)
//            ALTER COLUMN TYPE to another typmod of the same type is always executed (the same
//            cast runs on both sides), never left to the target's typmod, which could round.
//
//   Drift    Every change that names a relation is checked, in order, against what the flow knows
//            (trellara.relation_schemas on the target: the last fingerprint the applier accepted
//            for that source oid). A DDL change of the same transaction, earlier in order, moves
//            the known fingerprint; a relation seen for the first time is accepted (the target
//            catalog check decides, as before); any other difference is schema_drift, and the
//            transaction is rolled back and quarantined before anything of it is committed. A
//            transaction the operator marked replay-ready after drift is accepted when the target
//            (re-read) accepts the new definition (`replay_ready` below).
//
// Every statement quotes identifiers (QuoteIdentifier); type names and default / generation
// expressions come from the source's format_type / pg_get_expr and are SQL text by construction.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trellara/apply/apply_decision.h"
#include "trellara/apply/apply_schema.h"
#include "trellara/apply/relation_drift.h"
#include "trellara/apply/snapshot.h"
#include "trellara/record/envelope.h"
#include "trellara/base/result.h"

namespace trellara {

enum class DdlPolicy : uint8_t { Apply, Halt };            // [apply] ddl
enum class DropTablePolicy : uint8_t { Keep, Apply };      // [apply] ddl_drop_table
const char* DdlPolicyName(DdlPolicy policy);               // "apply" / "halt"
const char* DropTablePolicyName(DropTablePolicy policy);   // "keep" / "apply"

enum class DdlAction : uint8_t { Execute, NoTargetChange, Quarantine };

struct DdlPlan {
  DdlAction action = DdlAction::NoTargetChange;
  std::vector<std::string> statements;  // Execute: run in order, inside the open transaction
  std::vector<std::string> notes;       // what was deliberately not carried to the target, and why
                                        // (a mutable default, a replica identity, a kept table...)
  QuarantineCause cause;                // Quarantine: reason DdlPolicyHalt or DdlUnsupported,
                                        // relation, detail naming the step, the statement text
  // How the flow knows the relation after this change (trellara.relation_schemas):
  bool forget_relation = false;         // DROP TABLE (either policy): the oid is no longer followed
};

// `ddl`: the captured change. `captured`: the record's RelationInfo of ddl.relation_oid (what the
// relation's DML carries from now on; nullptr after DROP TABLE). `target`: the target's definition
// of the table the DDL addresses — ddl.relation_schema.ddl.relation_name, the name before the
// command — read inside the open transaction (exists = false when there is none).
// `replay_ready`: the transaction is replayed after the operator repaired the target by hand; a
// step that rewrites values (ALTER COLUMN TYPE ... USING) is then taken as done when the target's
// column already has the new type, and halts otherwise — never planned as "no change" before.
DdlPlan PlanDdl(const Ddl& ddl, const RelationInfo* captured, const TargetRelation& target, DdlPolicy policy,
                DropTablePolicy drop_table, bool replay_ready = false);

// One line for logs and the quarantine detail: "ALTER TABLE public.orders: add_column note, rename_column a -> b".
std::string DescribeDdl(const Ddl& ddl);

// Whether `change` is the CREATE TABLE AS or SELECT INTO that creates relation `relation_oid` (its
// first step CreateTable; a plain CREATE TABLE is not). They write their rows before their DDL record, so the applier meets
// rows of a table the target does not have yet; when the same transaction creates that table
// later, the applier runs the CREATE first and leaves it out where it comes
// (docs/schema-changes.md "CREATE TABLE AS and SELECT INTO").
bool CreatesRelation(const Change& change, uint32_t relation_oid);
// The first change after position `after` of `changes` that creates `relation_oid`.
std::optional<size_t> CreatedLaterAt(const std::vector<Change>& changes, size_t after, uint32_t relation_oid);

// ---- a DDL change and the relation's snapshot -------------------------------------------------

// The DDL policy a transaction is planned under: the configured one, or "apply" when the
// transaction is replayed after the operator marked it replay-ready (the operator reviewed its
// DDL, so a step already applied by hand is then a no-op).
DdlPolicy PolicyOnReplay(DdlPolicy configured, bool replay_ready);

// Whether the DDL change moves the relation's definition as the flow knows it: it executes on the
// target, forgets the relation, has no captured definition, the flow does not know the relation,
// or the known fingerprint differs from the captured one. Only such a change meets a snapshot.
bool DdlChangesShape(const DdlPlan& plan, const RelationInfo* captured, const std::optional<KnownRelation>& known);

// What a shape-changing DDL does to the relation's snapshot (docs/snapshot.md "DDL during a
// snapshot"): nothing when there is no snapshot or its copy retired before this commit; a copy
// not finished is withheld (the adapter marks it failed_recoverable, to be copied again under the
// new definition); a finished copy is checked chunk by chunk (FinishedCopySawDdl) unless the
// transaction is replayed after the operator's review.
enum class DdlSnapshotStep : uint8_t {
  None,
  WithholdOrCheck,  // withhold the copy if unfinished; else CheckFinishedChunksAfterWithhold decides
};
struct DdlSnapshotFacts {
  bool shape_changed = false;
  bool has_snapshot = false;       // the registry has a snapshot of the relation
  bool retired_at_commit = false;  // its copy is over for the stream at this transaction's commit
};
DdlSnapshotStep DecideDdlBesideSnapshot(const DdlSnapshotFacts& facts);
// After the adapter tried to withhold: whether the finished copy's chunks must be checked.
bool CheckFinishedChunksAfterWithhold(bool withheld, bool replay_ready);

// The fail-closed rule of a finished copy: a chunk read in a source snapshot that already saw this
// DDL transaction (DecideHalf says its effect is InCopy) was copied with the column list before
// the DDL, so its rows may lack what the stream now leaves to the copy. Returns the quarantine
// cause (DdlUnsupported, naming the chunk, the table and the way out) for the first such chunk of
// `chunks` (chunk_no, what the applier read of it FOR SHARE); nullopt when none saw it.
std::optional<QuarantineCause> FinishedCopySawDdl(const std::vector<std::pair<int32_t, ChunkView>>& chunks,
                                                  uint32_t xid, uint64_t commit_lsn, const std::string& table,
                                                  const std::string& ddl_description, const std::string& config_path);

}  // namespace trellara
