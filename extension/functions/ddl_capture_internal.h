// functions/ddl_capture_internal.h — what the files of DDL capture share (internal to
// extension/functions/ddl_*.cpp): ddl_capture.cpp runs the event triggers and writes the records,
// ddl_steps.cpp maps parse trees to DdlSteps, ddl_definition.cpp reads the catalog. Nothing outside
// DDL capture includes it; it must never declare an SQL-callable function (ddl_capture.cpp has them).
#pragma once

extern "C" {
#include "postgres.h"

#include "catalog/objectaddress.h"
#include "executor/spi.h"
#include "nodes/parsenodes.h"
}

#include <string>
#include <vector>

#include "pg/guard.h"
#include "trellara/record/envelope.h"

#define PGCALL(expr) ::trellara::pg::CallPostgres([&]() -> decltype(auto) { return (expr); })

namespace trellara::extension::ddl {

inline std::string Str(const char* s) { return s != nullptr ? s : ""; }

// --- small Postgres reads, each one guarded (ddl_definition.cpp) ----------------------------------
std::string NamespaceName(Oid nsp);
std::string RelationName(Oid relid);
// Whether DDL on `relid` is captured: an ordinary or partitioned table, not temporary, not in a
// system schema or Trellara's own.
bool IsCapturedTable(Oid relid);
// The table an ALTER TABLE subcommand's object belongs to, or InvalidOid.
Oid TableOfAddress(const ObjectAddress& address);

// --- definition after the command (ddl_definition.cpp) --------------------------------------------
// The table's definition as it is now (relcache).
RelationDefinition DescribeDefinition(Oid relid);
// Names the column types of ADD COLUMN / ALTER COLUMN TYPE steps as format_type prints them.
void NameTypesInDetails(Ddl& d);

// --- catalog queries through SPI (ddl_definition.cpp); SPI must be connected ----------------------
// Runs `query` (read only) and returns SPI_tuptable.
SPITupleTable* RunQuery(const char* query, int nargs = 0, Oid* argtypes = nullptr, Datum* values = nullptr);
std::string TextColumn(SPITupleTable* table, uint64 row, int col);
// A text[] column (NULL elements are not expected and refused).
std::vector<std::string> TextArrayColumn(SPITupleTable* table, uint64 row, int col);
// Every publication that contains the table now.
std::vector<std::string> PublicationsOf(Oid relid);
Oid TypeNamespace(Oid type);
// Tables and partitioned tables with a column of `type` or of its array type.
std::vector<Oid> TablesUsingType(Oid type);
// An enum's labels in their order.
std::vector<std::string> EnumLabels(Oid type);
// A partitioned table's key, a partition's parent and bound, as the source prints them.
void DescribePartitioning(RelationDefinition& def);

// --- steps from parse trees (ddl_steps.cpp) -------------------------------------------------------
DdlStep Step(DdlStepKind kind, std::string detail, std::string column = {}, std::string new_name = {});
DdlStep Unsupported(std::string detail);
DdlStep NoShapeChange(std::string detail);
// Whether an ALTER TABLE subcommand's definition (Constraint or IndexStmt) is a primary key.
bool IsPrimaryKeyDef(const Node* def);
// One ALTER TABLE subcommand. `table_has_pk` / `adds_pk` decide DROP CONSTRAINT.
DdlStep AlterTableStep(const AlterTableCmd* cmd, bool table_has_pk, bool adds_pk, Oid relid);
// A simple (non-ALTER TABLE) command's steps.
std::vector<DdlStep> SimpleSteps(const Node* tree, const std::string& tag, const std::string& identity);

}  // namespace trellara::extension::ddl
