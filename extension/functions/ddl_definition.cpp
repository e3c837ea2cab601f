// functions/ddl_definition.cpp — DDL capture's reads of the catalog: whether a table is captured,
// its definition after the command (relcache) and, through SPI, its publications, its partitioning,
// the tables using a type and an enum's labels. Reads only: must never write to the WAL, decide a
// command's steps (ddl_steps.cpp), or call Postgres outside CallPostgres (pg/guard.h).
extern "C" {
#include "postgres.h"

#include "access/relation.h"
#include "catalog/catalog.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "optimizer/optimizer.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/ruleutils.h"
#include "utils/syscache.h"
}

#include <optional>
#include <string>
#include <vector>

#include "functions/ddl_capture_internal.h"
#include "pg/guard.h"
#include "trellara/record/envelope.h"

namespace trellara::extension::ddl {

// Schema holding every Trellara relation (trellara.control: schema = trellara): never captured.
constexpr char kOwnSchema[] = "trellara";

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

// --- definition after the command ----------------------------------------------------------------

namespace {

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

}  // namespace

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

// --- catalog queries through SPI ------------------------------------------------------------------

// Runs `query` (read only) and returns SPI_tuptable; SPI must be connected.
SPITupleTable* RunQuery(const char* query, int nargs, Oid* argtypes, Datum* values) {
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

}  // namespace trellara::extension::ddl
