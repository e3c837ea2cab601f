// apply_schema.h — whether the target's definition of a table can take a captured relation's
// changes exactly, checked before the relation is first used in an apply session (DESIGN §2
// "fail closed": a schema the target cannot accept is a quarantine, never a guess).
//
// The applier reads the target's catalog for the relation (the libpq half), and this function
// decides. Rules, checked in this order, the first failure wins:
//   - the table must exist                                    -> missing_table
//   - every source column must exist on the target, by name   -> missing_column
//   - every source column's type must be accepted by the target column (TargetTypeAccepts)
//                                                             -> schema_mismatch
//   - a target column the source sends values for must not be GENERATED -> schema_mismatch
//   - a target column the source does not have must be nullable, or have a default, or be an
//     identity / generated column (otherwise every INSERT fails)      -> schema_mismatch
// Extra nullable target columns are accepted (they stay NULL / default), as native logical
// replication accepts them. A type accepted here can still refuse a value (a longer string into
// varchar(n)): that fails the statement, which is quarantined as an SQL error — never truncated.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "trellara/apply/apply_decision.h"
#include "trellara/record/envelope.h"

namespace trellara {

struct TargetColumn {
  std::string name;
  std::string type_name;  // format_type(atttypid, atttypmod) with an empty search_path
  bool not_null = false;
  bool has_default = false;
  bool identity = false;
  bool identity_always = false;  // GENERATED ALWAYS AS IDENTITY (an UPDATE cannot write it)
  bool generated = false;
};

struct TargetRelation {
  bool exists = false;
  std::vector<TargetColumn> columns;
  std::vector<std::string> primary_key;  // column names in key order; empty when none
  std::string primary_key_name;          // the primary key constraint's name
  bool partitioned = false;              // relkind 'p': statements reach its partitions (apply_plan.h)
  bool has_rows = false;                 // read only for a DDL's table (PlanDdl: CREATE TABLE of a name the
                                         // target already holds); CheckTargetRelation ignores it
};

// Source type as the plugin recorded it (format_type_with_typemod) against the target column's
// type. Accepted: the same type; the same type with a modifier at least as wide (varchar(20) into
// varchar(50) or varchar, numeric(10,2) into numeric(12,4) or numeric, timestamp(3) into
// timestamp(6) — never a narrower one: numeric(12,4) into numeric(10,2) or timestamp(6) into
// timestamp(0) would round values silently, varchar(50) into varchar(20) would refuse them); and widenings that keep every value and its text form exact —
// smallint into integer/bigint/numeric, integer into bigint/numeric, bigint into numeric, real
// into double precision, character varying/character into text. Anything else (json into jsonb,
// text into integer, timestamp into timestamptz, ...) is refused: its input function might accept
// the text and store something else.
bool TargetTypeAccepts(const std::string& source_type, const std::string& target_type);

// nullopt when the target can take the relation's changes; otherwise the quarantine cause, naming
// the relation, the column and what to change.
std::optional<QuarantineCause> CheckTargetRelation(const RelationInfo& source, const TargetRelation& target);

}  // namespace trellara
