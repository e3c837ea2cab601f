// functions/ddl_steps.cpp — DDL capture: the DdlSteps of one command, from its parse tree (each
// ALTER TABLE subcommand, each simple command). Fail closed: a parse tree it does not know is an
// Unsupported step naming it, never dropped. Must never read the table's definition or write
// anything (ddl_definition.cpp, ddl_capture.cpp); a catalog name it prints is read through PGCALL.
extern "C" {
#include "postgres.h"

#include "catalog/pg_class.h"
#include "nodes/parsenodes.h"
#include "nodes/pg_list.h"
#include "parser/parse_type.h"
#include "utils/lsyscache.h"
}

#include <string>
#include <vector>

#include "functions/ddl_capture_internal.h"
#include "pg/guard.h"
#include "trellara/record/envelope.h"

namespace trellara::extension::ddl {

// --- steps from parse trees ----------------------------------------------------------------------

DdlStep Step(DdlStepKind kind, std::string detail, std::string column, std::string new_name) {
  DdlStep s;
  s.kind = kind;
  s.detail = std::move(detail);
  s.column = std::move(column);
  s.new_name = std::move(new_name);
  return s;
}

DdlStep Unsupported(std::string detail) { return Step(DdlStepKind::Unsupported, std::move(detail)); }
DdlStep NoShapeChange(std::string detail) { return Step(DdlStepKind::NoShapeChange, std::move(detail)); }

namespace {

std::string TypeNameText(const TypeName* type) {
  if (type == nullptr) return "";
  const char* text = PGCALL(TypeNameToString(type));
  return text != nullptr ? text : "";
}

std::string ReplicaIdentityText(const ReplicaIdentityStmt* stmt) {
  switch (stmt->identity_type) {
    case REPLICA_IDENTITY_FULL: return "REPLICA IDENTITY FULL";
    case REPLICA_IDENTITY_NOTHING: return "REPLICA IDENTITY NOTHING";
    case REPLICA_IDENTITY_INDEX: return "REPLICA IDENTITY USING INDEX " + Str(stmt->name);
    default: return "REPLICA IDENTITY DEFAULT";
  }
}

}  // namespace

// Whether an ALTER TABLE subcommand's definition (Constraint or IndexStmt) is a primary key.
bool IsPrimaryKeyDef(const Node* def) {
  if (def == nullptr) return false;
  if (IsA(def, Constraint)) return castNode(Constraint, def)->contype == CONSTR_PRIMARY;
  if (IsA(def, IndexStmt)) return castNode(IndexStmt, def)->primary;
  return false;
}

// One ALTER TABLE subcommand. `table_has_pk` / `adds_pk` decide DROP CONSTRAINT (see below).
DdlStep AlterTableStep(const AlterTableCmd* cmd, bool table_has_pk, bool adds_pk, Oid relid) {
  const std::string name = Str(cmd->name);
  switch (cmd->subtype) {
    case AT_AddColumn:
    case AT_AddColumnRecurse: {
      if (cmd->def == nullptr || !IsA(cmd->def, ColumnDef)) return Unsupported("ADD COLUMN of an unknown form");
      const ColumnDef* col = castNode(ColumnDef, cmd->def);
      return Step(DdlStepKind::AddColumn, "ADD COLUMN " + Str(col->colname) + " " + TypeNameText(col->typeName),
                  Str(col->colname));
    }
    case AT_DropColumn:
    case AT_DropColumnRecurse:
      return Step(DdlStepKind::DropColumn, "DROP COLUMN " + name, name);
    case AT_AlterColumnType: {
      if (cmd->def == nullptr || !IsA(cmd->def, ColumnDef)) return Unsupported("ALTER COLUMN " + name + " TYPE of an unknown form");
      const ColumnDef* col = castNode(ColumnDef, cmd->def);
      DdlStep s = Step(DdlStepKind::AlterColumnType, "ALTER COLUMN " + name + " TYPE " + TypeNameText(col->typeName),
                       name);
      if (col->raw_default != nullptr || col->cooked_default != nullptr) {
        s.using_expression = true;
        s.detail += " USING ...";
      }
      return s;
    }
    case AT_SetNotNull: return Step(DdlStepKind::SetNotNull, "ALTER COLUMN " + name + " SET NOT NULL", name);
    case AT_DropNotNull: return Step(DdlStepKind::DropNotNull, "ALTER COLUMN " + name + " DROP NOT NULL", name);
    case AT_ColumnDefault:
      if (cmd->def == nullptr) return Step(DdlStepKind::DropDefault, "ALTER COLUMN " + name + " DROP DEFAULT", name);
      return Step(DdlStepKind::SetDefault, "ALTER COLUMN " + name + " SET DEFAULT", name);
    case AT_CookedColumnDefault: {
      std::string column = name;
      if (column.empty()) {
        const char* att = PGCALL(get_attname(relid, cmd->num, true));
        column = Str(att);
      }
      return Step(DdlStepKind::SetDefault, "ALTER COLUMN " + column + " SET DEFAULT", column);
    }
    case AT_AddConstraint:
    case AT_AddConstraintRecurse:
    case AT_AddIndex:
    case AT_AddIndexConstraint:
      if (IsPrimaryKeyDef(cmd->def)) return Step(DdlStepKind::AddPrimaryKey, "ADD PRIMARY KEY");
      if (cmd->def != nullptr && IsA(cmd->def, Constraint))
        return NoShapeChange("ADD CONSTRAINT " + Str(castNode(Constraint, cmd->def)->conname));
      if (cmd->def != nullptr && IsA(cmd->def, IndexStmt)) {
        const IndexStmt* index = castNode(IndexStmt, cmd->def);
        return NoShapeChange((index->isconstraint ? "ADD CONSTRAINT " : "ADD INDEX ") + Str(index->idxname));
      }
      return Unsupported("ALTER TABLE ADD constraint or index of an unknown form");
    case AT_DropConstraint:
    case AT_DropConstraintRecurse:
      // The constraint is gone, so whether it was the primary key cannot be read any more. It may
      // have been when the table has no primary key now, or when the same statement adds one;
      // otherwise the table's primary key is another constraint and this one was not it. The
      // applier treats a name that is not the target's primary key as a no-op.
      if (!table_has_pk || adds_pk) return Step(DdlStepKind::DropPrimaryKey, "DROP CONSTRAINT " + name, name);
      return NoShapeChange("DROP CONSTRAINT " + name);
    case AT_ReplicaIdentity:
      if (cmd->def == nullptr || !IsA(cmd->def, ReplicaIdentityStmt)) return Step(DdlStepKind::ReplicaIdentity, "REPLICA IDENTITY");
      return Step(DdlStepKind::ReplicaIdentity, ReplicaIdentityText(castNode(ReplicaIdentityStmt, cmd->def)));
    case AT_SetStatistics: return NoShapeChange("ALTER COLUMN " + name + " SET STATISTICS");
    case AT_SetOptions: return NoShapeChange("ALTER COLUMN " + name + " SET (...)");
    case AT_ResetOptions: return NoShapeChange("ALTER COLUMN " + name + " RESET (...)");
    case AT_SetStorage: return NoShapeChange("ALTER COLUMN " + name + " SET STORAGE");
    case AT_SetCompression: return NoShapeChange("ALTER COLUMN " + name + " SET COMPRESSION");
    case AT_CheckNotNull: return NoShapeChange("check NOT NULL of " + name + " (internal)");
    case AT_ReAddIndex: return NoShapeChange("re-add index (internal)");
    case AT_ReAddConstraint: return NoShapeChange("re-add constraint (internal)");
    case AT_ReAddDomainConstraint: return NoShapeChange("re-add domain constraint (internal)");
    case AT_ReAddComment: return NoShapeChange("re-add comment (internal)");
    case AT_ReAddStatistics: return NoShapeChange("re-add statistics (internal)");
    case AT_AlterConstraint: return NoShapeChange("ALTER CONSTRAINT");
    case AT_ValidateConstraint:
    case AT_ValidateConstraintRecurse: return NoShapeChange("VALIDATE CONSTRAINT " + name);
    case AT_AlterColumnGenericOptions: return NoShapeChange("ALTER COLUMN " + name + " OPTIONS (...)");
    case AT_GenericOptions: return NoShapeChange("OPTIONS (...)");
    case AT_ChangeOwner: return NoShapeChange("OWNER TO");
    case AT_ClusterOn: return NoShapeChange("CLUSTER ON " + name);
    case AT_DropCluster: return NoShapeChange("SET WITHOUT CLUSTER");
    case AT_DropOids: return NoShapeChange("SET WITHOUT OIDS");
    case AT_SetAccessMethod: return NoShapeChange("SET ACCESS METHOD");
    case AT_SetTableSpace: return NoShapeChange("SET TABLESPACE");
    case AT_SetRelOptions: return NoShapeChange("SET (...)");
    case AT_ResetRelOptions: return NoShapeChange("RESET (...)");
    case AT_ReplaceRelOptions: return NoShapeChange("replace options (internal)");
    case AT_EnableTrig:
    case AT_EnableAlwaysTrig:
    case AT_EnableReplicaTrig:
    case AT_EnableTrigAll:
    case AT_EnableTrigUser: return NoShapeChange("ENABLE TRIGGER " + (name.empty() ? std::string("ALL/USER") : name));
    case AT_DisableTrig:
    case AT_DisableTrigAll:
    case AT_DisableTrigUser: return NoShapeChange("DISABLE TRIGGER " + (name.empty() ? std::string("ALL/USER") : name));
    case AT_EnableRule:
    case AT_EnableAlwaysRule:
    case AT_EnableReplicaRule: return NoShapeChange("ENABLE RULE " + name);
    case AT_DisableRule: return NoShapeChange("DISABLE RULE " + name);
    case AT_EnableRowSecurity: return NoShapeChange("ENABLE ROW LEVEL SECURITY");
    case AT_DisableRowSecurity: return NoShapeChange("DISABLE ROW LEVEL SECURITY");
    case AT_ForceRowSecurity: return NoShapeChange("FORCE ROW LEVEL SECURITY");
    case AT_NoForceRowSecurity: return NoShapeChange("NO FORCE ROW LEVEL SECURITY");
    case AT_AddIdentity: return Unsupported("ALTER COLUMN " + name + " ADD GENERATED ... AS IDENTITY");
    case AT_SetIdentity: return Unsupported("ALTER COLUMN " + name + " SET identity options");
    case AT_DropIdentity: return Unsupported("ALTER COLUMN " + name + " DROP IDENTITY");
    case AT_DropExpression: return Unsupported("ALTER COLUMN " + name + " DROP EXPRESSION");
    case AT_SetLogged: return Unsupported("SET LOGGED");
    case AT_SetUnLogged: return Unsupported("SET UNLOGGED");
    case AT_AddInherit: return Unsupported("INHERIT");
    case AT_DropInherit: return Unsupported("NO INHERIT");
    case AT_AddOf: return Unsupported("OF type");
    case AT_DropOf: return Unsupported("NOT OF");
    // ATTACH / DETACH reach the partition's record (the capture loop below); FINALIZE completes a
    // DETACH CONCURRENTLY whose DETACH was already captured.
    case AT_AttachPartition: return Step(DdlStepKind::AttachPartition, "ATTACH PARTITION");
    case AT_DetachPartition: return Step(DdlStepKind::DetachPartition, "DETACH PARTITION");
    case AT_DetachPartitionFinalize: return NoShapeChange("DETACH PARTITION ... FINALIZE");
    case AT_AddColumnToView: return Unsupported("add column to view (internal)");
  }
  return Unsupported("ALTER TABLE subcommand " + std::to_string(static_cast<int>(cmd->subtype)) +
                     " unknown to trellara");
}

// A simple (non-ALTER TABLE) command's steps. `object_type` is the row's (table, index, ...).
std::vector<DdlStep> SimpleSteps(const Node* tree, const std::string& tag, const std::string& identity) {
  switch (nodeTag(tree)) {
    case T_CreateStmt: {
      const CreateStmt* stmt = castNode(CreateStmt, tree);
      // PARTITION OF names its parent in inhRelations too: created with the source's bound.
      if (stmt->inhRelations != NIL && stmt->partbound == nullptr)
        return {Unsupported("CREATE TABLE " + identity + " INHERITS")};
      if (stmt->ofTypename != nullptr) return {Unsupported("CREATE TABLE " + identity + " OF type")};
      return {Step(DdlStepKind::CreateTable, "CREATE TABLE " + identity)};
    }
    case T_CreateTableAsStmt:
      // CREATE TABLE AS / SELECT INTO: its rows are in the WAL before this record, so the applier
      // meets them before the table; it runs this CREATE first (core CreatesRelation,
      // docs/schema-changes.md "CREATE TABLE AS").
      return {Step(DdlStepKind::CreateTable, tag + " " + identity)};
    case T_RenameStmt: {
      const RenameStmt* stmt = castNode(RenameStmt, tree);
      switch (stmt->renameType) {
        case OBJECT_TABLE:
          return {Step(DdlStepKind::RenameTable, "RENAME TO " + Str(stmt->newname),
                       stmt->relation != nullptr ? Str(stmt->relation->relname) : "", Str(stmt->newname))};
        case OBJECT_COLUMN:
          return {Step(DdlStepKind::RenameColumn, "RENAME COLUMN " + Str(stmt->subname) + " TO " + Str(stmt->newname),
                       Str(stmt->subname), Str(stmt->newname))};
        case OBJECT_TABCONSTRAINT:
          return {NoShapeChange("RENAME CONSTRAINT " + Str(stmt->subname) + " TO " + Str(stmt->newname))};
        case OBJECT_INDEX: return {NoShapeChange("ALTER INDEX " + identity + " RENAME")};
        case OBJECT_TRIGGER: return {NoShapeChange("ALTER TRIGGER " + Str(stmt->subname) + " RENAME")};
        case OBJECT_RULE: return {NoShapeChange("ALTER RULE " + Str(stmt->subname) + " RENAME")};
        case OBJECT_POLICY: return {NoShapeChange("ALTER POLICY " + Str(stmt->subname) + " RENAME")};
        default: return {Unsupported(tag + " " + identity)};
      }
    }
    case T_IndexStmt: {
      const IndexStmt* stmt = castNode(IndexStmt, tree);
      if (stmt->primary) return {Step(DdlStepKind::AddPrimaryKey, "ADD PRIMARY KEY")};
      return {NoShapeChange(tag + " " + identity)};
    }
    case T_AlterObjectSchemaStmt: return {Unsupported("ALTER TABLE ... SET SCHEMA")};
    case T_CommentStmt:
    case T_CreateTrigStmt:
    case T_RuleStmt:
    case T_CreatePolicyStmt:
    case T_AlterPolicyStmt:
    case T_CreateStatsStmt:
    case T_AlterStatsStmt:
    case T_SecLabelStmt:
    case T_AlterTableMoveAllStmt:
    case T_AlterExtensionContentsStmt:
    case T_AlterObjectDependsStmt:
    case T_AlterOwnerStmt:
      return {NoShapeChange(tag + " " + identity)};
    default: return {Unsupported(tag + " " + identity + " (command unknown to trellara)")};
  }
}

}  // namespace trellara::extension::ddl
