// group_rewrite.h — how a grouped batch (one target transaction for many source transactions,
// apply_pipeline.h) may be sent differently from in-order apply without anyone seeing the
// difference: superseded UPDATEs left out, a table's consecutive writes merged into one statement,
// and the guard before COMMIT that makes the target refuse the group when a trigger or rule could
// see the difference (docs/apply.md "Grouped batches"). Pure: the adapter asks the target what it
// must (which relations fire triggers, which UPDATE shapes it accepts merged) and sends the answer.
#pragma once

#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "trellara/apply/apply_plan.h"
#include "trellara/base/result.h"

namespace trellara {

// ---- superseded updates in a grouped batch (docs/apply.md "Superseded updates in a group") ----
//
// A grouped batch commits all of its source transactions in one target transaction, so no one ever
// sees the row an UPDATE leaves when a later UPDATE of the same group overwrites it: the adapter
// sends only the later one. UPDATE plan P of the group is superseded when a later UPDATE plan Q of
// the group (in log order, the same transaction or a later one)
//   - has P's row_key (same relation, same key values, key unchanged by both) and P's
//     statement_key (the same SET columns, so Q assigns every value P assigned), and
//   - no plan between P and Q writes P's relation otherwise (an INSERT, a DELETE, a key-changing or
//     key-less UPDATE of it, a TRUNCATE of anything, or a plan without a target relation): only
//     key-preserving UPDATEs of the relation come between, so its rows are the same set at P and at
//     Q, and Q's row-count check (exactly one row) stands for P's;
//   - neither P's relation nor the relation of any plan between P and Q is in `refused`: the target
//     fires triggers or rules for replicated changes of those, and such a trigger may read any
//     table — P's row included — so it must run against exactly the rows in-order apply would
//     show it (the adapter learns these relations from the target's refusal, below).
// A chain P1, P2, .., Pn of such UPDATEs leaves Pn only. Nothing else is ever superseded, and
// ungrouped batches (one target transaction per source transaction) never call this.
//
// `relations` lists every relation written from some superseded P to its Q, both included: the
// adapter's guard before COMMIT refuses the group (TR011) if the target fires a trigger or rule for
// replicated changes of any of them — an UPDATE trigger of P's relation would miss P, and a
// trigger of another relation written between P and Q could read P's row without P. A write
// outside every such span sees the rows in-order apply would show it, and a refused relation is
// never inside one (its write ends every chain), so the guard never refuses a group for a
// relation already refused.
struct SupersededUpdates {
  std::vector<std::vector<bool>> superseded;  // [transaction of the group][plan]: not sent
  size_t count = 0;                           // plans superseded
  std::vector<std::string> relations;         // written inside a P..Q span, sorted, unique (empty when count == 0)
};
SupersededUpdates FindSupersededUpdates(const std::vector<const std::vector<ChangePlan>*>& group,
                                        const std::set<std::string>& refused);

// ---- which rewrites a batch may use, and what its guard covers ----

// A grouped batch may leave out superseded UPDATEs and merge statements only when it is one target
// transaction (grouped), the setting allows it, and the session runs with
// session_replication_role = replica (no ordinary trigger or foreign key fires; the guard covers
// the replica and always triggers).
struct GroupRewrites {
  bool leave_out_superseded = false;
  bool merge_statements = false;
};
GroupRewrites PermitGroupRewrites(bool grouped, bool leave_out_configured, bool merge_configured, bool replica_role);

// The relations the guard before the group's COMMIT must cover: every relation written where a
// rewrite changed the order of writes (a superseded span, a merged run's span), sorted, unique.
// `guard_merged` is false only under the negative control defect.apply_merge_unguarded.
std::vector<std::string> GuardedRelations(const std::vector<std::string>& superseded_relations,
                                          const std::vector<std::string>& merged_relations, bool guard_merged = true);

// ---- merged statements in a grouped batch (docs/apply.md "Merged statements in a group") ----
//
// A grouped batch is one target transaction, so only the order of writes of the same relation is
// seen once it commits; the order between writes of different relations is seen only by what fires
// inside the transaction — triggers and rules for replicated changes (the guard below refuses the
// group for them; foreign keys do not fire under session_replication_role = replica) and a
// relation that shares a table with another one on the target (a partition or inheritance child
// of it: the guard refuses that too). MergeGroupStatements therefore sends the plans the group
// sends (not NotApplied, not superseded) as statements in this order:
//   - a run is a relation's consecutive writes (no other write of that relation between them;
//     writes of other relations may be) that are all INSERTs of one statement_key with values, or
//     all key-preserving UPDATEs (UpdateBatchable) of one statement_key in `update_shapes` (the
//     shapes the target accepted for one statement: trellara.batch_column_types) matching no row
//     twice, of at most limits.rows_max rows and limits.bytes_max bytes of values (PlanParamBytes;
//     a plan larger than that alone is never merged) — an INSERT run: at most limits.params_max
//     values;
//   - a run of at least limits.insert_rows_min INSERTs or limits.update_rows_min UPDATEs is one
//     merged statement, sent where the run ends: just before the relation's next write that does
//     not join it, after its last member when it is full, at a barrier, or at the end of the
//     group, so the relation's writes keep their order;
//   - a barrier ends every run before it: a TRUNCATE, a plan without a target relation, or a plan
//     of a relation in `refused` (its trigger may read any table, so everything before it is sent
//     before it, in order); a refused relation's plans never merge;
//   - every other plan (and the members of a run too short to merge) is one statement at its own
//     position.
// `relations` lists every relation written from a merged run's first member to where it is sent
// (the run's own included), for the guard before COMMIT, as SupersededUpdates::relations does.
struct PlanRef {
  size_t tx = 0;    // the transaction's index in the group
  size_t plan = 0;  // the plan's index in that transaction's plans
  bool operator==(const PlanRef& other) const { return tx == other.tx && plan == other.plan; }
};
enum class GroupStatementKind : uint8_t { Single, InsertRows, UpdateRows };
struct GroupStatement {
  GroupStatementKind kind = GroupStatementKind::Single;
  std::vector<PlanRef> plans;  // Single: one; merged: the run's members in log order
};
struct MergeLimits {
  size_t rows_max = 1000;         // rows in one merged statement
  size_t params_max = 65535;      // values bound to one merged INSERT (the protocol's limit)
  size_t bytes_max = kUpdateBatchBytesMax;  // bytes of values in one merged statement (PlanParamBytes)
  size_t insert_rows_min = 2;     // shorter INSERT runs are sent plan by plan
  size_t update_rows_min = 8;     // shorter UPDATE runs are sent plan by plan
};
struct GroupStatements {
  std::vector<GroupStatement> statements;  // in the order they are sent
  size_t merged = 0;                       // plans sent inside merged statements
  std::vector<std::string> relations;      // written inside a merged run's span, sorted, unique
};
// `superseded` is FindSupersededUpdates' result for the same group (or empty: nothing left out).
GroupStatements MergeGroupStatements(const std::vector<const std::vector<ChangePlan>*>& group,
                                     const std::vector<std::vector<bool>>& superseded,
                                     const std::set<std::string>& refused,
                                     const std::set<std::string>& update_shapes, const MergeLimits& limits = {});
// The UPDATE shapes of a group worth asking the target about for MergeGroupStatements'
// update_shapes: each statement_key with at least limits.update_rows_min key-preserving UPDATEs
// (UpdateBatchable) that are sent (not superseded) and not of a `refused` relation, with its first
// such plan (the one to describe the shape by), in statement_key order.
std::vector<std::pair<std::string, const ChangePlan*>> MergeUpdateCandidates(
    const std::vector<const std::vector<ChangePlan>*>& group, const std::vector<std::vector<bool>>& superseded,
    const std::set<std::string>& refused, const MergeLimits& limits = {});
// Whether a plan can be a member of an INSERT run: an INSERT with values, each bound to a column.
bool InsertMergeable(const ChangePlan& plan);
// The merged INSERT of `rows` (InsertMergeable, one statement_key, rows.size() >= 1):
//   WITH trellara_rows AS (INSERT INTO "s"."t" ("a", ..) OVERRIDING SYSTEM VALUE
//        VALUES ($1, ..), ($m+1, ..) .. RETURNING 1)
//   SELECT CASE WHEN count(*) = N THEN NULL ELSE trellara.require_rows(count(*), N) END FROM trellara_rows
// with every row's values bound in order (`params`): each row is inserted exactly once or the target
// raises (TR002), as the one-row check does for one INSERT.
struct MergedInsert {
  std::string sql;
  std::vector<std::optional<std::string>> params;
};
Result<MergedInsert> MergedInsertSql(const std::vector<const ChangePlan*>& rows);

// The guard's refusal (SQLSTATE TR011) names, in DETAIL, the 1-based positions in `guarded` (the
// relations it was called with) of those whose target fires triggers or rules for replicated
// changes: "2" or "1,3". Adds them to `refused` and returns how many were new. A DETAIL naming none
// of them (a guard function from another version) refuses every guarded relation, so the same
// group is never refused again and again.
size_t LearnRefusedRelations(const std::string& detail, const std::vector<std::string>& guarded,
                             std::set<std::string>& refused);

}  // namespace trellara
