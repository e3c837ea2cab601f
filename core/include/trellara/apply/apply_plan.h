// apply_plan.h — the planner: turns one captured Change into the SQL statement that applies it to
// the target, with $n placeholders and an ordered list of bound parameter values (DESIGN §6).
//
// The planner decides; the libpq adapter executes. Every identifier is double-quoted (quotes
// doubled, non-ASCII kept, names over 63 bytes or holding NUL refused); every value is a bound
// text parameter (or NULL), never spliced into SQL text. Statements that share a `statement_key`
// have byte-identical SQL text, so the applier prepares each shape once and reuses it.
//
// Rules:
//   INSERT   lists every column: INSERT INTO t (c1, ..) OVERRIDING SYSTEM VALUE VALUES ($1, ..).
//   UPDATE   SET lists every column of the new tuple except unchanged-TOAST values (an absent TOAST
//            value must never overwrite target data) and except the key columns when the key did
//            not change (they already equal the matched row's key). The row is matched by the key
//            from the old image when the change carries one, else by the new tuple's key columns;
//            a key-changing UPDATE therefore matches the old key and sets the new one. An
//            unchanged-TOAST key value is an error.
//   DELETE   matches by the key from the old image (key or full).
//   FULL     a relation without key columns whose change carries the full old image (REPLICA
//            IDENTITY FULL) matches one row on every column, each compared exactly as
//            value_types.h FullRowMatchPredicate decides (by text for json, xml, point, numeric,
//            interval, ...); a relation with no key and no full image (REPLICA IDENTITY NOTHING,
//            or DEFAULT without a primary key) is a plan error.
//   TRUNCATE of the listed relations in source order, with RESTART IDENTITY as captured; CASCADE
//            is not propagated (the captured list already names every published table the source
//            cascade reached; CASCADE on the target could empty tables the flow does not own).
//   MESSAGE / DDL produce no statement: messages are recorded in the log but not applied; DDL
//            apply is outside this planner's scope.
// Parameters of one-row statements carry no type casts: Postgres infers each parameter's type from
// the target column it is assigned or compared to, so the text is parsed by the target column's
// own input function, as native logical replication does (see docs/apply-core.md for why casts
// are less safe). The casts other paths need are decided in value_types.h.
//
// The planner never talks to a database, never looks at target state, and never guesses: any
// change it cannot express exactly is an Error naming the relation, the column and the remedy.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <functional>
#include <vector>

#include "trellara/record/envelope.h"
#include "trellara/base/result.h"

namespace trellara {

// Postgres truncates identifiers longer than NAMEDATALEN - 1 bytes: a longer name could address
// another object, so it is refused.
inline constexpr size_t kMaxIdentifierBytes = 63;

// "name" with embedded quotes doubled. Fails on an empty name, a NUL byte, or more than 63 bytes.
Result<std::string> QuoteIdentifier(const std::string& name);
// "schema"."name"
Result<std::string> QualifiedName(const RelationInfo& relation);
// schema.name as a person reads it in a message (not for SQL).
std::string DisplayName(const RelationInfo& relation);

enum class PlanKind : uint8_t { Insert, Update, Delete, Truncate, NotApplied };

// How an UPDATE/DELETE finds its row.
enum class MatchMode : uint8_t {
  None,     // INSERT, TRUNCATE
  Key,      // key columns with =  (at most one row by construction)
  FullRow,  // every column IS NOT DISTINCT FROM, limited to one row (REPLICA IDENTITY FULL)
};

// How many rows the statement must affect for the apply to be correct.
enum class RowExpectation : uint8_t { ExactlyOne, Any };

struct ChangePlan {
  PlanKind kind = PlanKind::NotApplied;
  // Equal keys <=> equal SQL text: relation fingerprint(s), op, column sets, match mode, flags.
  std::string statement_key;
  std::string sql;
  std::vector<std::optional<std::string>> params;  // $1.. in order; nullopt is SQL NULL
  std::vector<std::string> param_columns;          // the column each parameter is bound to
  RowExpectation expect = RowExpectation::Any;
  MatchMode match = MatchMode::None;

  // For messages: what the row match was, as a person reads it: "(id)=(42)", "(a, b)=(1, NULL)".
  std::string match_description;
  std::string relation_display;  // public.orders (or the list for TRUNCATE)
  std::string not_applied_reason;  // PlanKind::NotApplied: why nothing is executed

  // For finding superseded updates in a grouped batch (apply_pipeline.h FindSupersededUpdates):
  std::string target_relation;  // "schema"."name" an INSERT/UPDATE/DELETE writes; empty otherwise
  std::string rows_target;      // how an UPDATE/DELETE names it (RowsTarget: ONLY for a plain table)
  // An UPDATE matched by its key that leaves the key unchanged: the relation and the key's values,
  // encoded unambiguously (equal row_key <=> same relation and same key text). Empty otherwise.
  std::string row_key;
  // UPDATE/DELETE: how many of the last params are the row match's values (PlanMatch); 0 otherwise.
  size_t match_params = 0;
};

// Whether a relation is partitioned on the target (the applier reads it from the target's catalog
// when it first meets the relation; docs/apply.md "Inheritance and partitions"). Statements that
// find existing rows — UPDATE, DELETE, TRUNCATE, a full-row match — name a plain table with ONLY:
// the rows of its inheritance children belong to other relations, whose changes the source names
// on their own (a TRUNCATE ONLY of a parent must leave its children's rows). A table partitioned
// on the target is named without ONLY, so they reach its partitions. Unset, or false for a
// relation the applier has not read: ONLY — on a partitioned table it finds no row, and the row
// check (for TRUNCATE the server) fails closed instead of touching rows of other relations.
using PartitionedOnTarget = std::function<bool(const RelationInfo&)>;
// Whether a column is GENERATED ALWAYS AS IDENTITY on the target (read from its catalog with the
// relation). An UPDATE cannot write such a column (the server allows only SET ... = DEFAULT), and the
// source changes its value only by SET ... = DEFAULT: so an UPDATE leaves it out of SET and instead
// requires the target row to hold the new value already (in its row match: an UPDATE that changed
// it on the source matches no row and is quarantined, never applied without it). Such an UPDATE is
// never merged with others (no row_key). INSERTs write it with OVERRIDING SYSTEM VALUE. Unset: none.
using AlwaysIdentityOnTarget = std::function<bool(const RelationInfo&, const std::string& column)>;
// "ONLY <qualified>" for a plain table, "<qualified>" for a partitioned one (the rule above).
std::string RowsTarget(const std::string& qualified, bool partitioned);

// Plans `change`, whose relations (and truncated relations) are described by `relations` (the
// record's RelationInfo list). The SQL text is always filled, so the applier can prepare on a cache
// miss; when its cache already holds `statement_key` it only binds `params`.
Result<ChangePlan> PlanChange(const Change& change, const std::vector<RelationInfo>& relations,
                              const PartitionedOnTarget& partitioned = {},
                              const AlwaysIdentityOnTarget& always_identity = {});

// What the planner derives from a relation alone: its quoted names and fingerprint in hex.
struct RelationText {
  std::string qualified;                // "schema"."name"
  std::vector<std::string> quoted;      // each column's quoted name, in column order
  std::string display;                  // schema.name, for messages
  std::string fingerprint_hex;
  std::optional<std::string> qualified_error;  // the relation's name cannot be quoted
  std::optional<std::string> column_error;     // a column's name cannot be quoted
};
// Keeps RelationText across PlanChange calls (the applier plans every change of every transaction
// of relations it has seen before): found by fingerprint and used only for a RelationInfo equal to
// the one it was made from, field for field. A relation whose names cannot be quoted is never
// kept. Bounded: forgets everything past kMaxRelations and starts again.
class PlanCache {
 public:
  static constexpr size_t kMaxRelations = 4096;
  const RelationText& Text(const RelationInfo& relation);

 private:
  std::map<Sha256, std::pair<RelationInfo, RelationText>> relations_;
  RelationText scratch_;  // the text of a relation that is not kept
};
// The same plan as PlanChange(change, relations), with each relation's text from `cache`.
Result<ChangePlan> PlanChange(const Change& change, const std::vector<RelationInfo>& relations, PlanCache& cache,
                              const PartitionedOnTarget& partitioned = {},
                              const AlwaysIdentityOnTarget& always_identity = {});

// The statement the applier executes for `plan`: for RowExpectation::ExactlyOne the planned DML is
// wrapped so that the target itself raises when it touched anything but exactly one row —
//   WITH trellara_rows AS (<dml> RETURNING 1)
//   SELECT CASE WHEN count(*) = 1 THEN NULL ELSE trellara.require_one_row(count(*)) END FROM trellara_rows
// — SQLSTATE TR001 for none, TR002 with the count as DETAIL for several (trellara.require_one_row
// is defined in sql/trellara_target.sql). The check must be on the server, not in the client: in a
// pipeline the COMMIT is already queued when the affected-row count comes back. Other plans are
// returned unchanged.
std::string RowCheckedSql(const ChangePlan& plan);

// ---- runs of INSERTs of a chunked transaction (docs/apply.md "Chunked transactions") ----
//
// A chunked transaction's consecutive INSERTs into one relation (equal statement_key) are applied
// with one COPY ... FROM STDIN per run instead of one statement per row; its other row changes are
// pipelined. The rows are the planned INSERTs' own bound values, so a COPY row carries exactly what
// the INSERT would have bound (NULL as \N; the text parsed by the target column's input function).
// COPY is used only for runs of at least kCopyRunRowsMin rows (a shorter run costs a round trip
// more as a COPY than as pipelined INSERTs), and a COPY ends after kCopyRowsMax rows so a failure
// is reported within a bounded batch. The row check is the affected count: a COPY that inserted
// anything but its row count (a BEFORE trigger that skipped a row) fails the transaction.
inline constexpr size_t kCopyRunRowsMin = 16;
inline constexpr size_t kCopyRowsMax = 100000;
// Bounds of one pipelined segment of a chunked transaction's other changes: statements, and bytes
// of bound parameter values (what libpq buffers until the segment is sent).
inline constexpr size_t kChunkedPipelineStatementsMax = 1024;
inline constexpr size_t kChunkedPipelineParamBytesMax = 8u << 20;

// COPY "schema"."name" ("c1", ..) FROM STDIN for the INSERTs of `relation`. Fails for a relation
// without columns (an INSERT ... DEFAULT VALUES has no COPY form) or an unquotable name.
Result<std::string> CopyInsertSql(const RelationInfo& relation);

// Appends the row of INSERT plan `insert` (PlanKind::Insert of a relation with columns) to `out` in
// COPY text format, ending with a newline: values tab-separated, NULL as \N, backslash, newline,
// carriage return and tab escaped. Fails for a plan that is not such an INSERT.
Status AppendCopyRow(const ChangePlan& insert, std::string& out);

// The same row straight from the captured INSERT `change` of `relation`, without planning it (the
// hot path of a long run): appends exactly what AppendCopyRow would for PlanChange(change)'s plan.
// Fails, appending nothing, for anything the planner would refuse or that is not such an INSERT
// (unchanged-TOAST, binary or NUL-holding values, a tuple of another width); the caller then plans
// the change, which names the error.
Status AppendCopyRowOf(const Change& change, const RelationInfo& relation, std::string& out);

// The 1-based row of a COPY FROM STDIN that the server's error CONTEXT names ("COPY orders, line
// 42: ..." or "COPY orders, line 42, column id: ..."), if it names one.
std::optional<uint64_t> CopyLineOf(const std::string& context);

// ---- runs of UPDATEs of a chunked transaction (docs/apply.md "Chunked transactions") ----
//
// A chunked transaction's consecutive UPDATEs with one statement_key, each matched by a key it
// leaves unchanged (row_key set) and no two with the same key, go as one statement of at most
// kUpdateBatchRowsMax rows instead of one statement each:
//   WITH trellara_rows AS (UPDATE "s"."t" AS trellara_row SET "a" = trellara_batch.v1::T1, ..
//        FROM unnest($1::text[], .., $m::text[]) WITH ORDINALITY AS trellara_batch(v1, .., vm, ord)
//        WHERE trellara_row."k" = trellara_batch.vm::Tm AND .. RETURNING trellara_batch.ord)
//   SELECT CASE WHEN count(*) = $m+1 AND count(DISTINCT ord) = $m+1 THEN NULL
//               ELSE trellara.require_each_row_once(array_agg(ord), $m+1) END FROM trellara_rows
// Parameter i is a text array literal of the plans' values of param_columns[i] (AppendArrayElement);
// each element is cast to the target's type of that column without its modifier (value_types.h
// BatchCastType) — as text, so a type whose array delimiter is not a comma (box), an array, or a
// composite travels like any other; $m+1 is the row count. Each row must be changed exactly
// once, as the one-row check requires of one change; the target raises TR001/TR002 naming the
// batch row in HINT otherwise. Whether a relation may be batched at all (triggers, other unique
// indexes) is the target's answer (trellara.batch_column_types); shorter runs than
// kUpdateBatchRowsMin stay single statements.
inline constexpr size_t kUpdateBatchRowsMin = 16;
inline constexpr size_t kUpdateBatchRowsMax = 1000;
inline constexpr size_t kUpdateBatchBytesMax = 4u << 20;

// An UPDATE that can be part of such a run: matched by its key, which it leaves unchanged.
bool UpdateBatchable(const ChangePlan& plan);

// The bytes of a plan's bound values (NULLs count 0): what a batch of plans holds in memory and
// sends, for the byte bounds above and MergeLimits::bytes_max.
size_t PlanParamBytes(const ChangePlan& plan);
// The statement above for runs shaped like `first` (UpdateBatchable), `cast_types[i]` the type
// first.param_columns[i]'s values are cast to (BatchCastType). Fails for a plan that is not batchable, a type count that
// does not match, or a column name that cannot be quoted.
Result<std::string> UpdateBatchSql(const ChangePlan& first, const std::vector<std::string>& cast_types);
// Appends `value` to a PostgreSQL array literal being built ("{" opened by the caller, elements
// comma-separated, "}" closed by the caller): double-quoted with \ and " escaped, NULL unquoted.
void AppendArrayElement(const std::optional<std::string>& value, std::string& literal);

// "UPDATE", "DELETE", ... for messages.
const char* PlanKindName(PlanKind kind);

}  // namespace trellara
