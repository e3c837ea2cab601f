// functions/ddl_capture.cpp — the event triggers that put DDL on tables into the WAL.
//
// trellara.ddl_command_end() (event trigger trellara_ddl_command_end) reads the commands of the
// statement that just ran (pg_event_trigger_ddl_commands(), whose `command` column points at
// Postgres' CollectedCommand), groups them by the table they affect, and writes one trellara::Ddl
// per table as a transactional logical message with prefix "trellara.ddl": structured steps from
// the parse trees, and the table's definition as it is now (after the command) from the relcache.
// trellara.sql_drop() (event trigger trellara_sql_drop) does the same for each table dropped.
// The output plugin decodes the message in order with the transaction's DML (plugin/messages.cpp).
// Parse trees -> steps: ddl_steps.cpp; catalog reads and the table's definition: ddl_definition.cpp;
// what they share: ddl_capture_internal.h.
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
#include "catalog/namespace.h"
#include "commands/event_trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "nodes/parsenodes.h"
#include "nodes/pg_list.h"
#include "replication/message.h"
#include "tcop/cmdtag.h"
#include "tcop/deparse_utility.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/relcache.h"
}

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "functions/ddl_capture_internal.h"
#include "pg/guard.h"
#include "trellara/record/codec.h"
#include "trellara/record/envelope.h"

// Declared PGDLLEXPORT before PG_FUNCTION_INFO_V1 (PG15's macro exports only the info function).
extern "C" {
PGDLLEXPORT Datum trellara_ddl_command_end(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(trellara_ddl_command_end);
PGDLLEXPORT Datum trellara_sql_drop(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(trellara_sql_drop);
}

namespace trellara::extension::ddl {
namespace {

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
}  // namespace trellara::extension::ddl

Datum trellara_ddl_command_end(PG_FUNCTION_ARGS) {
  return trellara::pg::GuardEntry("trellara.ddl_command_end()", [fcinfo] {
    trellara::extension::ddl::CaptureDdlCommands(fcinfo);
    return (Datum)0;
  });
}

Datum trellara_sql_drop(PG_FUNCTION_ARGS) {
  return trellara::pg::GuardEntry("trellara.sql_drop()", [fcinfo] {
    trellara::extension::ddl::CaptureDroppedTables(fcinfo);
    return (Datum)0;
  });
}
