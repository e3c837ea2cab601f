// functions/ddl_capture.cpp — the event triggers that put DDL on tables into the WAL.
//
// trellara.ddl_command_end() (event trigger trellara_ddl_command_end) reads the commands of the
// statement that just ran (pg_event_trigger_ddl_commands(), whose `command` column points at
// Postgres' CollectedCommand), groups them by the table they affect, and writes one trellara::Ddl
// per table as a transactional logical message with prefix "trellara.ddl": structured steps from
// the parse trees, and the table's definition as it is now (after the command) from the relcache.
// trellara.sql_drop() (event trigger trellara_sql_drop) does the same for each table dropped.
// The output plugin decodes the message in order with the transaction's DML (plugin.cpp).
//
// Decides: which commands are captured (tables — relkind r/p — and their indexes, columns,
// constraints, triggers, rules, policies and statistics; never temporary relations, Trellara's own
// schema, system schemas, or commands run by an extension script) and how each parse tree maps to
// a DdlStep. Fail closed: anything it does not know is an Unsupported step naming it, never
// dropped. It writes nothing when wal_level is below logical (nothing could decode it) and nothing
// for a table that no publication contains (no decoding session could publish it).
// Must never let a C++ exception or a Postgres longjmp cross a C++ frame unguarded (pg/guard.h).
extern "C" {
#include "postgres.h"

#include "access/relation.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/catalog.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_type.h"
#include "commands/event_trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "nodes/parsenodes.h"
#include "nodes/pg_list.h"
#include "optimizer/optimizer.h"
#include "parser/parse_type.h"
#include "replication/message.h"
#include "tcop/cmdtag.h"
#include "tcop/deparse_utility.h"
#include "tcop/tcopprot.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/ruleutils.h"
#include "utils/syscache.h"
}

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "pg/guard.h"
#include "trellara/record/codec.h"
#include "trellara/record/envelope.h"

#define PGCALL(expr) ::trellara::pg::CallPostgres([&]() -> decltype(auto) { return (expr); })

// Declared PGDLLEXPORT before PG_FUNCTION_INFO_V1 (PG15's macro exports only the info function).
extern "C" {
PGDLLEXPORT Datum trellara_ddl_command_end(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(trellara_ddl_command_end);
PGDLLEXPORT Datum trellara_sql_drop(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(trellara_sql_drop);
}

namespace trellara::extension {
namespace {

// Schema holding every Trellara relation (trellara.control: schema = trellara): never captured.
constexpr char kOwnSchema[] = "trellara";

// The commands of this statement, each with the table it affects (an index, constraint, trigger,
// rule, policy or statistics object mapped to its table; NULL when it is not about a table).
// Qualified names only: the trigger runs with the caller's search_path.
constexpr char kCommandsQuery[] =
    "SELECT c.command_tag, c.object_type, c.schema_name, c.object_identity, c.command, "
    "  CASE c.classid "
    "    WHEN 'pg_catalog.pg_class'::pg_catalog.regclass THEN "
    "      (SELECT CASE WHEN r.relkind IN ('i', 'I') "
    "                   THEN (SELECT x.indrelid FROM pg_catalog.pg_index x WHERE x.indexrelid = r.oid) "
    "                   ELSE r.oid END "
    "         FROM pg_catalog.pg_class r WHERE r.oid = c.objid) "
    "    WHEN 'pg_catalog.pg_constraint'::pg_catalog.regclass THEN "
    "      (SELECT k.conrelid FROM pg_catalog.pg_constraint k WHERE k.oid = c.objid) "
    "    WHEN 'pg_catalog.pg_trigger'::pg_catalog.regclass THEN "
    "      (SELECT t.tgrelid FROM pg_catalog.pg_trigger t WHERE t.oid = c.objid) "
    "    WHEN 'pg_catalog.pg_rewrite'::pg_catalog.regclass THEN "
    "      (SELECT w.ev_class FROM pg_catalog.pg_rewrite w WHERE w.oid = c.objid) "
    "    WHEN 'pg_catalog.pg_policy'::pg_catalog.regclass THEN "
    "      (SELECT p.polrelid FROM pg_catalog.pg_policy p WHERE p.oid = c.objid) "
    "    WHEN 'pg_catalog.pg_statistic_ext'::pg_catalog.regclass THEN "
    "      (SELECT s.stxrelid FROM pg_catalog.pg_statistic_ext s WHERE s.oid = c.objid) "
    "  END AS table_oid, "
    "  CASE WHEN c.classid = 'pg_catalog.pg_type'::pg_catalog.regclass THEN c.objid END AS type_oid "
    "FROM pg_catalog.pg_event_trigger_ddl_commands() WITH ORDINALITY AS c "
    "WHERE NOT c.in_extension "
    "ORDER BY c.ordinality";

// Every publication that contains the table $1 now: FOR ALL TABLES, FOR TABLE (the table or a
// partition ancestor), TABLES IN SCHEMA (of the table or an ancestor). pg_partition_ancestors()
// returns no rows for a table that is not a partition, hence the table itself is named as well.
constexpr char kPublicationsQuery[] =
    "SELECT p.pubname::pg_catalog.text FROM pg_catalog.pg_publication p "
    "WHERE p.puballtables "
    "   OR EXISTS (SELECT 1 FROM pg_catalog.pg_publication_rel r "
    "               WHERE r.prpubid = p.oid "
    "                 AND (r.prrelid = $1 "
    "                      OR r.prrelid IN (SELECT a.relid FROM pg_catalog.pg_partition_ancestors($1) a))) "
    "   OR EXISTS (SELECT 1 FROM pg_catalog.pg_publication_namespace n "
    "               JOIN pg_catalog.pg_class k ON k.relnamespace = n.pnnspid "
    "               WHERE n.pnpubid = p.oid "
    "                 AND (k.oid = $1 "
    "                      OR k.oid IN (SELECT a.relid FROM pg_catalog.pg_partition_ancestors($1) a))) "
    "ORDER BY 1";

// The tables this DROP removed — named by the statement (original) or reached by CASCADE through a
// normal dependency (DROP SCHEMA ... CASCADE, DROP OWNED, inheritance children), not partitions
// dropped with their parent (auto dependency: the parent's record covers them) — each with the
// publications it was in: its dropped publication
// memberships (FOR TABLE), TABLES IN SCHEMA publications of its schema (dropped with it or
// still there) and FOR ALL TABLES publications.
constexpr char kDroppedQuery[] =
    "WITH d AS (SELECT * FROM pg_catalog.pg_event_trigger_dropped_objects() WITH ORDINALITY AS o) "
    "SELECT t.objid, t.schema_name, t.object_name, t.object_identity, "
    "  ARRAY(SELECT DISTINCT u.pub FROM ("
    "      SELECT pr.address_args[1] AS pub FROM d pr "
    "       WHERE pr.object_type = 'publication relation' "
    "         AND pr.address_names = ARRAY[t.schema_name, t.object_name] "
    "      UNION SELECT pn.address_args[1] FROM d pn "
    "       WHERE pn.object_type = 'publication namespace' AND pn.address_names[1] = t.schema_name "
    "      UNION SELECT p.pubname::pg_catalog.text FROM pg_catalog.pg_publication p WHERE p.puballtables "
    "      UNION SELECT p.pubname::pg_catalog.text FROM pg_catalog.pg_publication p "
    "        JOIN pg_catalog.pg_publication_namespace n ON n.pnpubid = p.oid "
    "        JOIN pg_catalog.pg_namespace s ON s.oid = n.pnnspid WHERE s.nspname = t.schema_name"
    "    ) u ORDER BY 1) AS pubs "
    "FROM d t "
    "WHERE t.object_type = 'table' AND (t.original OR t.normal) AND NOT t.is_temporary "
    "  AND t.schema_name NOT IN ('trellara', 'pg_catalog', 'information_schema') "
    "  AND t.schema_name NOT LIKE 'pg\\_toast%' "
    "ORDER BY t.ordinality";

// --- small Postgres reads, each one guarded --------------------------------------------------------

std::string NamespaceName(Oid nsp) {
  const char* name = PGCALL(get_namespace_name(nsp));
  return name != nullptr ? name : "";
}

std::string RelationName(Oid relid) {
  const char* name = PGCALL(get_rel_name(relid));
  return name != nullptr ? name : "";
}

// Whether DDL on `relid` is captured: an ordinary or partitioned table, not temporary, not in a
// system schema or Trellara's own.
bool IsCapturedTable(Oid relid) {
  char relkind = 0, persistence = 0;
  Oid nsp = InvalidOid;
  bool found = pg::CallPostgres([&] {
    HeapTuple tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
    if (!HeapTupleIsValid(tup)) return false;
    Form_pg_class form = (Form_pg_class)GETSTRUCT(tup);
    relkind = form->relkind;
    persistence = form->relpersistence;
    nsp = form->relnamespace;
    ReleaseSysCache(tup);
    return true;
  });
  if (!found) return false;
  if (relkind != RELKIND_RELATION && relkind != RELKIND_PARTITIONED_TABLE) return false;
  if (persistence == RELPERSISTENCE_TEMP) return false;
  bool system = PGCALL(IsCatalogNamespace(nsp)) || PGCALL(IsToastNamespace(nsp)) || PGCALL(isAnyTempNamespace(nsp));
  if (system) return false;
  std::string schema = NamespaceName(nsp);
  return schema != kOwnSchema && schema != "information_schema";
}

// The table an ALTER TABLE subcommand's object belongs to (a column or index of a child table when
// the command recursed), or InvalidOid when the address names no relation.
Oid TableOfAddress(const ObjectAddress& address) {
  if (address.classId == RelationRelationId && OidIsValid(address.objectId)) {
    char relkind = PGCALL(get_rel_relkind(address.objectId));
    if (relkind == RELKIND_INDEX || relkind == RELKIND_PARTITIONED_INDEX)
      return PGCALL(IndexGetRelation(address.objectId, true));
    return address.objectId;
  }
  if (address.classId == ConstraintRelationId && OidIsValid(address.objectId)) {
    return pg::CallPostgres([&] {
      HeapTuple tup = SearchSysCache1(CONSTROID, ObjectIdGetDatum(address.objectId));
      if (!HeapTupleIsValid(tup)) return InvalidOid;
      Oid relid = ((Form_pg_constraint)GETSTRUCT(tup))->conrelid;
      ReleaseSysCache(tup);
      return relid;
    });
  }
  return InvalidOid;
}

std::string TypeNameText(const TypeName* type) {
  if (type == nullptr) return "";
  const char* text = PGCALL(TypeNameToString(type));
  return text != nullptr ? text : "";
}

// --- definition after the command ----------------------------------------------------------------

ReplicaIdentity IdentityOf(char relreplident) {
  switch (relreplident) {
    case REPLICA_IDENTITY_NOTHING: return ReplicaIdentity::Nothing;
    case REPLICA_IDENTITY_FULL: return ReplicaIdentity::Full;
    case REPLICA_IDENTITY_INDEX: return ReplicaIdentity::Index;
    default: return ReplicaIdentity::Default;
  }
}

// The stored expression `adbin` of a default or generated column as pg_get_expr prints it, and
// whether it calls a mutable function.
void DeparseDefault(const char* adbin, const char* relname, Oid relid, std::string& text, bool& is_mutable) {
  const char* out = nullptr;
  bool mut = false;
  pg::CallPostgres([&] {
    Node* expr = static_cast<Node*>(stringToNode(adbin));
    List* dpcontext = deparse_context_for(relname, relid);
    out = deparse_expression(expr, dpcontext, false, false);
    mut = contain_mutable_functions(expr);
  });
  text = out != nullptr ? out : "";
  is_mutable = mut;
}

// Reads the table's definition as it is now. The relation is opened and closed here, with the
// lock the command already holds; every path closes it (no Postgres call in a catch block).
RelationDefinition DescribeDefinition(Oid relid) {
  // The command holds a stronger lock already; AccessShareLock only makes that explicit.
  Relation rel = PGCALL(relation_open(relid, AccessShareLock));
  RelationDefinition def;
  std::optional<pg::SqlError> failure;
  try {
    def.oid = relid;
    def.schema = NamespaceName(RelationGetNamespace(rel));
    def.name = RelationGetRelationName(rel);
    def.relkind = std::string(1, rel->rd_rel->relkind);
    def.is_partition = rel->rd_rel->relispartition;
    def.replica_identity = IdentityOf(rel->rd_rel->relreplident);
    TupleDesc desc = RelationGetDescr(rel);
    TupleConstr* constr = desc->constr;
    for (int i = 0; i < desc->natts; i++) {
      Form_pg_attribute att = TupleDescAttr(desc, i);
      if (att->attisdropped) continue;
      DdlColumn c;
      c.name = NameStr(att->attname);
      c.type_oid = att->atttypid;
      c.type_name = PGCALL(format_type_with_typemod(att->atttypid, att->atttypmod));
      c.typmod = att->atttypmod;
      c.not_null = att->attnotnull;
      if (att->attidentity != '\0') c.identity = std::string(1, att->attidentity);
      if (att->atthasdef && constr != nullptr) {
        for (int d = 0; d < constr->num_defval; d++) {
          if (constr->defval[d].adnum != att->attnum) continue;
          std::string text;
          bool is_mutable = false;
          DeparseDefault(constr->defval[d].adbin, def.name.c_str(), relid, text, is_mutable);
          if (att->attgenerated != '\0') {
            c.generated = std::string(1, att->attgenerated);
            c.generation_expr = text;
          } else {
            c.default_expr = text;
            c.default_kind = is_mutable ? DefaultKind::Mutable : DefaultKind::Immutable;
          }
        }
      }
      Oid type_collation = PGCALL(get_typcollation(att->atttypid));
      if (OidIsValid(att->attcollation) && att->attcollation != type_collation)
        c.collation = PGCALL(generate_collation_name(att->attcollation));
      def.columns.push_back(std::move(c));
    }
    Oid pk = PGCALL(RelationGetPrimaryKeyIndex(rel));
    if (OidIsValid(pk)) {
      def.primary_key_name = RelationName(pk);
      std::vector<int> attnums;
      pg::CallPostgres([&] {
        HeapTuple tup = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(pk));
        if (!HeapTupleIsValid(tup)) return;
        Form_pg_index index = (Form_pg_index)GETSTRUCT(tup);
        for (int k = 0; k < index->indnkeyatts; k++) attnums.push_back(index->indkey.values[k]);
        ReleaseSysCache(tup);
      });
      for (int attnum : attnums) {
        if (attnum <= 0 || attnum > desc->natts) continue;
        def.primary_key.emplace_back(NameStr(TupleDescAttr(desc, attnum - 1)->attname));
      }
    }
    if (def.replica_identity == ReplicaIdentity::Index) {
      Oid ri = PGCALL(RelationGetReplicaIndex(rel));
      if (OidIsValid(ri)) def.identity_index = RelationName(ri);
    }
  } catch (const pg::SqlError& error) {
    failure = error;
  }
  pg::CallPostgres([rel] { relation_close(rel, NoLock); });
  if (failure) throw *failure;
  return def;
}

// The parse tree spells a type as written (pg_catalog.int4); once the definition is known, an
// ADD COLUMN / ALTER COLUMN TYPE step names the column's type as format_type prints it (integer).
void NameTypesInDetails(Ddl& d) {
  for (DdlStep& s : d.steps) {
    if (s.kind != DdlStepKind::AddColumn && s.kind != DdlStepKind::AlterColumnType) continue;
    for (const DdlColumn& c : d.definition->columns) {
      if (c.name != s.column) continue;
      s.detail = (s.kind == DdlStepKind::AddColumn ? "ADD COLUMN " : "ALTER COLUMN ") + c.name +
                 (s.kind == DdlStepKind::AddColumn ? " " : " TYPE ") + c.type_name +
                 (s.using_expression ? " USING ..." : "");
    }
  }
}

// --- steps from parse trees ----------------------------------------------------------------------

DdlStep Step(DdlStepKind kind, std::string detail, std::string column = {}, std::string new_name = {}) {
  DdlStep s;
  s.kind = kind;
  s.detail = std::move(detail);
  s.column = std::move(column);
  s.new_name = std::move(new_name);
  return s;
}

DdlStep Unsupported(std::string detail) { return Step(DdlStepKind::Unsupported, std::move(detail)); }
DdlStep NoShapeChange(std::string detail) { return Step(DdlStepKind::NoShapeChange, std::move(detail)); }

std::string Str(const char* s) { return s != nullptr ? s : ""; }

std::string ReplicaIdentityText(const ReplicaIdentityStmt* stmt) {
  switch (stmt->identity_type) {
    case REPLICA_IDENTITY_FULL: return "REPLICA IDENTITY FULL";
    case REPLICA_IDENTITY_NOTHING: return "REPLICA IDENTITY NOTHING";
    case REPLICA_IDENTITY_INDEX: return "REPLICA IDENTITY USING INDEX " + Str(stmt->name);
    default: return "REPLICA IDENTITY DEFAULT";
  }
}

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

// What one statement did to one table, built up over the statement's commands.
struct TableDdl {
  Ddl ddl;
  bool has_row = false;  // object_type etc. taken from the first command that reached the table
};

struct CommandRow {
  std::string command_tag, object_type, schema, identity;
  CollectedCommand* command = nullptr;
  Oid table = InvalidOid;
  Oid type = InvalidOid;  // a command on a type or domain
};

// Runs `query` (read only) and returns SPI_tuptable; SPI must be connected.
SPITupleTable* RunQuery(const char* query, int nargs = 0, Oid* argtypes = nullptr, Datum* values = nullptr) {
  int rc = pg::CallPostgres([&] {
    // Not read-only: SPI then takes a snapshot of its own (some utility commands run without one).
    return nargs == 0 ? SPI_execute(query, false, 0)
                      : SPI_execute_with_args(query, nargs, argtypes, values, nullptr, false, 0);
  });
  if (rc != SPI_OK_SELECT)
    throw pg::SqlError(ERRCODE_INTERNAL_ERROR, "trellara DDL capture could not read the catalog: SPI returned " +
                                                   std::to_string(rc) + " for " + std::string(query, 60) + "...");
  return SPI_tuptable;
}

std::string TextColumn(SPITupleTable* table, uint64 row, int col) {
  HeapTuple tuple = table->vals[row];
  TupleDesc desc = table->tupdesc;
  const char* value = PGCALL(SPI_getvalue(tuple, desc, col));
  return Str(value);
}

// A text[] column (NULL elements are not expected and refused).
std::vector<std::string> TextArrayColumn(SPITupleTable* table, uint64 row, int col) {
  Datum* elems = nullptr;
  bool* nulls = nullptr;
  int n = 0;
  pg::CallPostgres([&] {
    bool isnull = true;
    Datum d = SPI_getbinval(table->vals[row], table->tupdesc, col, &isnull);
    if (isnull) return;
    deconstruct_array(DatumGetArrayTypeP(d), TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
  });
  std::vector<std::string> out;
  for (int i = 0; i < n; i++) {
    if (nulls[i]) continue;
    const char* value = PGCALL(TextDatumGetCString(elems[i]));
    out.emplace_back(value);
  }
  return out;
}

std::vector<std::string> PublicationsOf(Oid relid) {
  Oid argtypes[1] = {REGCLASSOID};
  Datum values[1] = {ObjectIdGetDatum(relid)};
  SPITupleTable* table = RunQuery(kPublicationsQuery, 1, argtypes, values);
  std::vector<std::string> out;
  for (uint64 i = 0; i < SPI_processed; i++) out.push_back(TextColumn(table, i, 1));
  return out;
}

Oid TypeNamespace(Oid type) {
  return pg::CallPostgres([&] {
    HeapTuple tup = SearchSysCache1(TYPEOID, ObjectIdGetDatum(type));
    if (!HeapTupleIsValid(tup)) return InvalidOid;
    Oid nsp = ((Form_pg_type)GETSTRUCT(tup))->typnamespace;
    ReleaseSysCache(tup);
    return nsp;
  });
}

// Tables and partitioned tables with a column of type $1 or of its array type.
constexpr char kTablesUsingTypeQuery[] =
    "SELECT DISTINCT a.attrelid FROM pg_catalog.pg_attribute a "
    "JOIN pg_catalog.pg_class c ON c.oid = a.attrelid AND c.relkind IN ('r', 'p') "
    "WHERE a.attnum > 0 AND NOT a.attisdropped "
    "  AND a.atttypid IN ($1, (SELECT t.typarray FROM pg_catalog.pg_type t WHERE t.oid = $1)) "
    "ORDER BY 1";

std::vector<Oid> TablesUsingType(Oid type) {
  Oid argtypes[1] = {OIDOID};
  Datum values[1] = {ObjectIdGetDatum(type)};
  SPITupleTable* table = RunQuery(kTablesUsingTypeQuery, 1, argtypes, values);
  std::vector<Oid> out;
  for (uint64 i = 0; i < SPI_processed; i++) {
    bool isnull = true;
    Datum d = PGCALL(SPI_getbinval(table->vals[i], table->tupdesc, 1, &isnull));
    if (!isnull) out.push_back(DatumGetObjectId(d));
  }
  return out;
}

// An enum's labels in their order.
constexpr char kEnumLabelsQuery[] =
    "SELECT e.enumlabel::pg_catalog.text FROM pg_catalog.pg_enum e WHERE e.enumtypid = $1 ORDER BY e.enumsortorder";

std::vector<std::string> EnumLabels(Oid type) {
  Oid argtypes[1] = {OIDOID};
  Datum values[1] = {ObjectIdGetDatum(type)};
  SPITupleTable* table = RunQuery(kEnumLabelsQuery, 1, argtypes, values);
  std::vector<std::string> out;
  for (uint64 i = 0; i < SPI_processed; i++) out.push_back(TextColumn(table, i, 1));
  return out;
}

// A partitioned table's key, a partition's parent and bound, as the source prints them.
constexpr char kPartitioningQuery[] =
    "SELECT CASE WHEN c.relkind = 'p' THEN pg_catalog.pg_get_partkeydef(c.oid) END, pn.nspname::pg_catalog.text, "
    "       p.relname::pg_catalog.text, "
    "       CASE WHEN c.relispartition THEN pg_catalog.pg_get_expr(c.relpartbound, c.oid) END "
    "FROM pg_catalog.pg_class c "
    "LEFT JOIN pg_catalog.pg_inherits i ON c.relispartition AND i.inhrelid = c.oid "
    "LEFT JOIN pg_catalog.pg_class p ON p.oid = i.inhparent "
    "LEFT JOIN pg_catalog.pg_namespace pn ON pn.oid = p.relnamespace "
    "WHERE c.oid = $1";

void DescribePartitioning(RelationDefinition& def) {
  if (def.relkind != "p" && !def.is_partition) return;
  Oid argtypes[1] = {OIDOID};
  Datum values[1] = {ObjectIdGetDatum(def.oid)};
  SPITupleTable* table = RunQuery(kPartitioningQuery, 1, argtypes, values);
  if (SPI_processed != 1) return;
  def.partition_key = TextColumn(table, 0, 1);
  def.partition_parent_schema = TextColumn(table, 0, 2);
  def.partition_parent_name = TextColumn(table, 0, 3);
  def.partition_bound = TextColumn(table, 0, 4);
}

void WriteDdl(Ddl ddl) {
  // The (sub)transaction running the command (DDL always has an xid): a streamed transaction that
  // rolls this subtransaction back must discard the record with the subtransaction's rows.
  ddl.capture_xid = pg::CallPostgres([] { return static_cast<uint32_t>(GetCurrentTransactionId()); });
  Result<std::string> bytes = EncodeDdl(ddl);
  if (!bytes.ok())
    throw pg::SqlError(ERRCODE_INTERNAL_ERROR,
                       "trellara could not encode the DDL record of " + ddl.object_identity + ": " +
                           bytes.error().message,
                       {}, "This is a bug in Trellara; the statement was not run. Report it with the statement.");
  const std::string& b = *bytes;
  pg::CallPostgres([&] { (void)LogLogicalMessage(kDdlMessagePrefix, b.data(), b.size(), true); });
}

// Pins search_path for the catalog queries (the trigger runs with the caller's settings) and
// restores it on return.
class PinnedSearchPath {
 public:
  PinnedSearchPath() {
    level_ = pg::CallPostgres([] {
      int level = NewGUCNestLevel();
      (void)set_config_option("search_path", "pg_catalog", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0,
                              false);
      return level;
    });
  }
  void Restore() {
    int level = level_;
    pg::CallPostgres([level] { AtEOXact_GUC(true, level); });
  }

 private:
  int level_ = 0;
};

void CaptureDdlCommands(FunctionCallInfo fcinfo) {
  if (!CALLED_AS_EVENT_TRIGGER(fcinfo))
    throw pg::SqlError(ERRCODE_E_R_I_E_EVENT_TRIGGER_PROTOCOL_VIOLATED,
                       "trellara.ddl_command_end() must be called as an event trigger");
  if (!XLogLogicalInfoActive()) return;  // wal_level < logical: no decoding session could read it
  const EventTriggerData* trigger = reinterpret_cast<EventTriggerData*>(fcinfo->context);
  const std::string tag = GetCommandTagName(trigger->tag);
  const std::string sql = Str(debug_query_string);

  PGCALL(SPI_connect());
  PinnedSearchPath pinned;
  SPITupleTable* table = RunQuery(kCommandsQuery);
  std::vector<CommandRow> rows;
  for (uint64 i = 0; i < SPI_processed; i++) {
    CommandRow r;
    r.command_tag = TextColumn(table, i, 1);
    r.object_type = TextColumn(table, i, 2);
    r.schema = TextColumn(table, i, 3);
    r.identity = TextColumn(table, i, 4);
    bool null_command = true, null_table = true;
    Datum command = PGCALL(SPI_getbinval(table->vals[i], table->tupdesc, 5, &null_command));
    Datum relid = PGCALL(SPI_getbinval(table->vals[i], table->tupdesc, 6, &null_table));
    bool null_type = true;
    Datum type = PGCALL(SPI_getbinval(table->vals[i], table->tupdesc, 7, &null_type));
    r.command = null_command ? nullptr : reinterpret_cast<CollectedCommand*>(DatumGetPointer(command));
    r.table = null_table ? InvalidOid : DatumGetObjectId(relid);
    r.type = null_type ? InvalidOid : DatumGetObjectId(type);
    rows.push_back(std::move(r));
  }

  // Tables in first-seen order; each gets the steps of every command that touched it.
  std::vector<Oid> order;
  std::map<Oid, TableDdl> tables;
  std::map<Oid, bool> captured;
  auto is_captured = [&](Oid relid) {
    auto it = captured.find(relid);
    if (it != captured.end()) return it->second;
    bool yes = IsCapturedTable(relid);
    captured[relid] = yes;
    return yes;
  };
  auto entry = [&](Oid relid, const CommandRow& row) -> TableDdl& {
    auto it = tables.find(relid);
    if (it == tables.end()) {
      order.push_back(relid);
      it = tables.emplace(relid, TableDdl{}).first;
      Ddl& d = it->second.ddl;
      d.command_tag = tag;
      d.sql = sql;
      d.relation_oid = relid;
      d.relation_name = RelationName(relid);
      d.relation_schema = NamespaceName(PGCALL(get_rel_namespace(relid)));
    }
    TableDdl& t = it->second;
    // A table reached only through a subcommand that recursed to it (a partition or inheritance
    // child) keeps the identity of the command's object, its parent: the plugin recognises the
    // recursion of a statement on a partition root by it.
    if (!t.has_row) {
      t.has_row = true;
      t.ddl.object_type = row.object_type;
      t.ddl.schema = row.schema;
      t.ddl.object_identity = row.identity;
    }
    return t;
  };

  for (const CommandRow& row : rows) {
    // ALTER TYPE / ALTER DOMAIN ... RENAME TO: every captured table with a column of the type (or
    // an array of it) gets a rename_type step, so the applier renames the target's type before
    // those tables' changes name it by its new name.
    if (OidIsValid(row.type) && row.command != nullptr && row.command->type == SCT_Simple &&
        row.command->parsetree != nullptr && IsA(row.command->parsetree, RenameStmt)) {
      const RenameStmt* stmt = castNode(RenameStmt, row.command->parsetree);
      if ((stmt->renameType == OBJECT_TYPE || stmt->renameType == OBJECT_DOMAIN) && stmt->object != nullptr &&
          IsA(stmt->object, List) && list_length(castNode(List, stmt->object)) > 0) {
        const char* old_last = strVal(llast(castNode(List, stmt->object)));
        const std::string schema = NamespaceName(TypeNamespace(row.type));
        const std::string old_name = Str(PGCALL(quote_qualified_identifier(schema.c_str(), old_last)));
        const std::string new_name = Str(PGCALL(format_type_be(row.type)));
        const std::string keyword = stmt->renameType == OBJECT_DOMAIN ? "ALTER DOMAIN " : "ALTER TYPE ";
        for (Oid relid : TablesUsingType(row.type)) {
          if (!is_captured(relid)) continue;
          TableDdl& t = entry(relid, row);
          t.ddl.steps.push_back(Step(DdlStepKind::RenameType, keyword + old_name + " RENAME TO " + new_name, old_name,
                                     new_name));
        }
      }
      continue;
    }
    // ALTER TYPE ... ADD VALUE / RENAME VALUE of an enum: every captured table with a column of
    // the enum (or an array of it) gets the step, so the target's enum has the label before those
    // tables' rows carry it. An added label is placed by its neighbour in the enum's order after
    // the command (whatever BEFORE / AFTER the statement said, or none).
    if (OidIsValid(row.type) && row.command != nullptr && row.command->type == SCT_Simple &&
        row.command->parsetree != nullptr && IsA(row.command->parsetree, AlterEnumStmt)) {
      const AlterEnumStmt* stmt = castNode(AlterEnumStmt, row.command->parsetree);
      const std::string type_name = Str(PGCALL(format_type_be(row.type)));
      const std::string new_label = Str(stmt->newVal);
      DdlStep step;
      if (stmt->oldVal != nullptr) {
        step = Step(DdlStepKind::EnumRenameValue, "ALTER TYPE " + type_name + " RENAME VALUE", type_name, new_label);
        step.label = Str(stmt->oldVal);
      } else {
        step = Step(DdlStepKind::EnumAddValue, "ALTER TYPE " + type_name + " ADD VALUE", type_name, new_label);
        const std::vector<std::string> labels = EnumLabels(row.type);
        const auto at = std::find(labels.begin(), labels.end(), new_label);
        if (at != labels.end() && at + 1 != labels.end()) {
          step.label = *(at + 1);
          step.before = true;
        } else if (at != labels.end() && at != labels.begin()) {
          step.label = *(at - 1);
        }
      }
      for (Oid relid : TablesUsingType(row.type)) {
        if (!is_captured(relid)) continue;
        entry(relid, row).ddl.steps.push_back(step);
      }
      continue;
    }
    if (!OidIsValid(row.table) || row.command == nullptr) continue;
    const CollectedCommand* cmd = row.command;
    if (cmd->type == SCT_AlterTable) {
      const bool on_index = row.object_type == "index";
      bool adds_pk = false;
      ListCell* lc;
      foreach (lc, cmd->d.alterTable.subcmds) {
        const CollectedATSubcmd* sub = static_cast<CollectedATSubcmd*>(lfirst(lc));
        const AlterTableCmd* at = castNode(AlterTableCmd, sub->parsetree);
        if ((at->subtype == AT_AddConstraint || at->subtype == AT_AddConstraintRecurse || at->subtype == AT_AddIndex ||
             at->subtype == AT_AddIndexConstraint) &&
            IsPrimaryKeyDef(at->def))
          adds_pk = true;
      }
      foreach (lc, cmd->d.alterTable.subcmds) {
        const CollectedATSubcmd* sub = static_cast<CollectedATSubcmd*>(lfirst(lc));
        const AlterTableCmd* at = castNode(AlterTableCmd, sub->parsetree);
        // A subcommand that recursed to a child table names the child's column or index.
        Oid target = TableOfAddress(sub->address);
        if (!OidIsValid(target) || !is_captured(target)) target = row.table;
        // ATTACH / DETACH PARTITION change the partition: its record carries the step (its
        // definition after the command names the parent and bound; a DETACH names the parent).
        const bool partition_cmd = at->subtype == AT_AttachPartition || at->subtype == AT_DetachPartition;
        if (partition_cmd && at->def != nullptr && IsA(at->def, PartitionCmd)) {
          const PartitionCmd* pc = castNode(PartitionCmd, at->def);
          Oid partition = PGCALL(RangeVarGetRelid(pc->name, NoLock, true));
          if (OidIsValid(partition) && is_captured(partition)) {
            TableDdl& t = entry(partition, row);
            DdlStep step = AlterTableStep(at, false, false, partition);
            if (step.kind == DdlStepKind::DetachPartition) {
              step.column = NamespaceName(PGCALL(get_rel_namespace(row.table)));
              step.new_name = RelationName(row.table);
            }
            t.ddl.steps.push_back(std::move(step));
            continue;
          }
        }
        if (!is_captured(target)) continue;
        TableDdl& t = entry(target, row);
        if (on_index) {
          t.ddl.steps.push_back(NoShapeChange("ALTER INDEX " + row.identity));
          continue;
        }
        Relation rel = PGCALL(relation_open(target, AccessShareLock));
        bool has_pk = OidIsValid(PGCALL(RelationGetPrimaryKeyIndex(rel)));
        pg::CallPostgres([rel] { relation_close(rel, NoLock); });
        t.ddl.steps.push_back(AlterTableStep(at, has_pk, adds_pk, target));
      }
      continue;
    }
    if (!is_captured(row.table)) continue;
    TableDdl& t = entry(row.table, row);
    if (cmd->type != SCT_Simple || cmd->parsetree == nullptr) {
      t.ddl.steps.push_back(Unsupported(row.command_tag + " " + row.identity + " (command unknown to trellara)"));
      continue;
    }
    if (IsA(cmd->parsetree, RenameStmt) && castNode(RenameStmt, cmd->parsetree)->renameType == OBJECT_TABLE) {
      const RenameStmt* stmt = castNode(RenameStmt, cmd->parsetree);
      if (stmt->relation != nullptr) t.ddl.relation_name = Str(stmt->relation->relname);
    }
    if (IsA(cmd->parsetree, AlterObjectSchemaStmt) && OidIsValid(cmd->d.simple.secondaryObject.objectId))
      t.ddl.relation_schema = NamespaceName(cmd->d.simple.secondaryObject.objectId);
    for (DdlStep& s : SimpleSteps(cmd->parsetree, row.command_tag, row.identity)) t.ddl.steps.push_back(std::move(s));
  }

  std::vector<Ddl> out;
  for (Oid relid : order) {
    TableDdl& t = tables[relid];
    Ddl& d = t.ddl;
    d.publications = PublicationsOf(relid);
    if (d.publications.empty()) continue;  // no decoding session can publish it
    d.definition = DescribeDefinition(relid);
    DescribePartitioning(*d.definition);
    NameTypesInDetails(d);
    out.push_back(std::move(d));
  }
  pinned.Restore();
  PGCALL(SPI_finish());
  for (const Ddl& d : out) WriteDdl(d);
}

void CaptureDroppedTables(FunctionCallInfo fcinfo) {
  if (!CALLED_AS_EVENT_TRIGGER(fcinfo))
    throw pg::SqlError(ERRCODE_E_R_I_E_EVENT_TRIGGER_PROTOCOL_VIOLATED,
                       "trellara.sql_drop() must be called as an event trigger");
  if (!XLogLogicalInfoActive()) return;
  const EventTriggerData* trigger = reinterpret_cast<EventTriggerData*>(fcinfo->context);
  const std::string tag = GetCommandTagName(trigger->tag);
  const std::string sql = Str(debug_query_string);

  PGCALL(SPI_connect());
  PinnedSearchPath pinned;
  SPITupleTable* table = RunQuery(kDroppedQuery);
  std::vector<Ddl> out;
  for (uint64 i = 0; i < SPI_processed; i++) {
    Ddl d;
    d.command_tag = tag;
    d.object_type = "table";
    d.sql = sql;
    bool null_oid = true;
    Datum objid = PGCALL(SPI_getbinval(table->vals[i], table->tupdesc, 1, &null_oid));
    d.relation_oid = null_oid ? InvalidOid : DatumGetObjectId(objid);
    d.relation_schema = TextColumn(table, i, 2);
    d.relation_name = TextColumn(table, i, 3);
    d.schema = d.relation_schema;
    d.object_identity = TextColumn(table, i, 4);
    d.steps.push_back(Step(DdlStepKind::DropTable, "DROP TABLE " + d.object_identity));
    d.publications = TextArrayColumn(table, i, 5);
    if (d.publications.empty()) continue;  // no decoding session can publish it
    out.push_back(std::move(d));
  }
  pinned.Restore();
  PGCALL(SPI_finish());
  for (const Ddl& d : out) WriteDdl(d);
}

}  // namespace
}  // namespace trellara::extension

Datum trellara_ddl_command_end(PG_FUNCTION_ARGS) {
  return trellara::pg::GuardEntry("trellara.ddl_command_end()", [fcinfo] {
    trellara::extension::CaptureDdlCommands(fcinfo);
    return (Datum)0;
  });
}

Datum trellara_sql_drop(PG_FUNCTION_ARGS) {
  return trellara::pg::GuardEntry("trellara.sql_drop()", [fcinfo] {
    trellara::extension::CaptureDroppedTables(fcinfo);
    return (Datum)0;
  });
}
