// ddl_apply.cpp — what the applier does with a captured DDL change, and what that does to the
// relation's snapshot (ddl_apply.h).
//
// Must never return statements that leave the target half-way through a DDL record: every step is
// first played on a simulated copy of the target's definition, and the copy must accept the
// captured relation before any statement is handed out. Never emits an unquoted identifier, never
// creates a default whose value depends on where it runs, and never calls a relation known unless
// its fingerprint is equal. Talks to no database.
#include "trellara/apply/ddl_apply.h"

#include <algorithm>

#include "trellara/apply/apply_plan.h"
#include "trellara/base/fault.h"

namespace trellara {

const char* DdlPolicyName(DdlPolicy policy) {
  switch (policy) {
    case DdlPolicy::Apply: return "apply";
    case DdlPolicy::Halt: return "halt";
  }
  return "?";
}

const char* DropTablePolicyName(DropTablePolicy policy) {
  switch (policy) {
    case DropTablePolicy::Keep: return "keep";
    case DropTablePolicy::Apply: return "apply";
  }
  return "?";
}

namespace {

// What an operator does about a DDL the applier will not reproduce.
constexpr char kUnsupportedRemedy[] =
    "re-snapshot the table, or change the target by hand and mark the transaction replay-ready "
    "(trellara repair-plan --config <flow.toml> prints the steps)";

// The relation as the record names it before the command (CREATE TABLE: the new table).
std::string RelationDisplay(const Ddl& ddl) {
  if (!ddl.relation_name.empty()) return ddl.relation_schema + "." + ddl.relation_name;
  if (ddl.definition) return ddl.definition->schema + "." + ddl.definition->name;
  return ddl.object_identity;
}

// A string constant, whatever standard_conforming_strings says: E'...' with ' and \ doubled.
std::string SqlLiteral(const std::string& value) {
  std::string out = "E'";
  for (char c : value) {
    if (c == '\'' || c == '\\') out += c;
    out += c;
  }
  return out + "'";
}

std::string DescribeStep(const DdlStep& step) {
  std::string out = DdlStepKindName(step.kind);
  if (step.kind == DdlStepKind::Unsupported || step.kind == DdlStepKind::NoShapeChange) {
    if (!step.detail.empty()) out += " (" + step.detail + ")";
    return out;
  }
  if (!step.column.empty()) out += " " + step.column;
  if (!step.new_name.empty()) out += " -> " + step.new_name;
  if (step.using_expression) out += " using an expression";
  if (step.kind == DdlStepKind::EnumRenameValue) out += " (label " + step.label + ")";
  if (step.kind == DdlStepKind::EnumAddValue && !step.label.empty())
    out += std::string(step.before ? " before " : " after ") + step.label;
  return out;
}

std::string DescribeSteps(const std::vector<DdlStep>& steps) {
  if (steps.empty()) return "no steps";
  std::string out;
  for (const DdlStep& step : steps) {
    if (!out.empty()) out += ", ";
    out += DescribeStep(step);
  }
  return out;
}

// Whether two type names share a base type (they differ at most in typmod): TargetTypeAccepts'
// widenings go one way only, so mutual acceptance means the same base type.
bool SameBaseType(const std::string& a, const std::string& b) {
  return TargetTypeAccepts(a, b) && TargetTypeAccepts(b, a);
}

// Plays a Ddl's steps on a simulated copy of the target, collecting statements and notes. Every
// step returns an Error whose message says why the step cannot be reproduced exactly.
class DdlPlanner {
 public:
  // `captured` is non-null unless the Ddl drops the table (PlanDdl refuses it before).
  DdlPlanner(const Ddl& ddl, const RelationInfo* captured, const TargetRelation& target, DropTablePolicy drop_table,
             DdlPlan& plan, bool replay_ready)
      : ddl_(ddl), captured_(captured), sim_(target), drop_table_(drop_table), plan_(plan),
        schema_(ddl.relation_schema), name_(ddl.relation_name), replay_ready_(replay_ready) {}

  bool dropped() const { return dropped_; }
  const TargetRelation& simulated() const { return sim_; }
  std::string current_display() const { return schema_ + "." + name_; }

  Status Step(const DdlStep& step) {
    if (dropped_)
      return MakeError("the record holds step " + DescribeStep(step) + " after DROP TABLE; the record is malformed");
    switch (step.kind) {
      case DdlStepKind::CreateTable: return CreateTable();
      case DdlStepKind::DropTable: return DropTable();
      case DdlStepKind::NoShapeChange:
        plan_.notes.push_back((step.detail.empty() ? std::string("the command") : step.detail) + " on " +
                              current_display() + " does not change the replicated columns; not carried to the target");
        return Status::Ok();
      case DdlStepKind::Unsupported:
        return MakeError("the command does " + (step.detail.empty() ? std::string("something") : step.detail) +
                         " to " + current_display() + ", which the applier does not reproduce");
      default: break;
    }
    if (!sim_.exists) return MakeError("the target has no table " + current_display());
    switch (step.kind) {
      case DdlStepKind::AddColumn: return AddColumn(step);
      case DdlStepKind::DropColumn: return DropColumn(step);
      case DdlStepKind::RenameColumn: return RenameColumn(step);
      case DdlStepKind::RenameTable: return RenameTable(step);
      case DdlStepKind::AlterColumnType: return AlterColumnType(step);
      case DdlStepKind::SetNotNull: return SetNotNull(step, true);
      case DdlStepKind::DropNotNull: return SetNotNull(step, false);
      case DdlStepKind::SetDefault: return SetDefault(step);
      case DdlStepKind::DropDefault: return DropDefault(step);
      case DdlStepKind::AddPrimaryKey: return AddPrimaryKey();
      case DdlStepKind::DropPrimaryKey: return DropPrimaryKey(step);
      case DdlStepKind::AttachPartition: return AttachPartition();
      case DdlStepKind::DetachPartition: return DetachPartition(step);
      case DdlStepKind::RenameType: return RenameType(step);
      case DdlStepKind::EnumAddValue: return EnumAddValue(step);
      case DdlStepKind::EnumRenameValue: return EnumRenameValue(step);
      case DdlStepKind::ReplicaIdentity:
        plan_.notes.push_back("replica identity of " + current_display() +
                              " is not carried to the target: the applier matches rows by the captured key, so the "
                              "target's own replica identity does not matter for applying");
        return Status::Ok();
      default: break;
    }
    return MakeError("step " + DescribeStep(step) + " has an unknown kind");
  }

 private:
  Result<std::string> Quote(const std::string& name, const char* what) const {
    auto q = QuoteIdentifier(name);
    if (!q.ok()) return MakeError(std::string(what) + " \"" + name + "\": " + q.error().message);
    return q;
  }

  Result<std::string> Table() const {
    auto schema = Quote(schema_, "schema");
    if (!schema.ok()) return schema.error();
    auto name = Quote(name_, "table name");
    if (!name.ok()) return name.error();
    return *schema + "." + *name;
  }

  TargetColumn* TargetCol(const std::string& name) {
    for (auto& c : sim_.columns)
      if (c.name == name) return &c;
    return nullptr;
  }

  Result<const DdlColumn*> DefinedCol(const DdlStep& step) const {
    if (ddl_.definition)
      for (const auto& c : ddl_.definition->columns)
        if (c.name == step.column) return &c;
    return MakeError("the record's definition of " + RelationDisplay(ddl_) + " has no column " + step.column +
                     ", though step " + DescribeStep(step) + " names it; the record is malformed");
  }

  static TargetColumn SimulatedColumn(const DdlColumn& c) {
    TargetColumn t;
    t.name = c.name;
    t.type_name = c.type_name;
    t.identity = !c.identity.empty();
    t.generated = !c.generated.empty();
    t.not_null = c.not_null || t.identity;
    t.has_default = c.default_kind == DefaultKind::Immutable;
    return t;
  }

  std::string MutableDefaultNote(const DdlColumn& c) const {
    return "default " + c.default_expr + " of " + c.name + " is evaluated on the source; replicated rows carry its "
           "values (not created on the target's " + current_display() + ")";
  }

  // "name" type [COLLATE "c"] [GENERATED ...] [NOT NULL] [DEFAULT expr]; a mutable default is left
  // out (the caller notes it).
  Result<std::string> ColumnSql(const DdlColumn& c) const {
    auto name = Quote(c.name, "column");
    if (!name.ok()) return name.error();
    if (c.type_name.empty()) return MakeError("column " + c.name + " has no type in the record; the record is malformed");
    std::string sql = *name + " " + c.type_name;
    if (!c.collation.empty()) {
      auto collation = Quote(c.collation, "collation");
      if (!collation.ok()) return collation.error();
      sql += " COLLATE " + *collation;
    }
    if (c.generated == "s") {
      if (c.generation_expr.empty())
        return MakeError("generated column " + c.name + " has no expression in the record; the record is malformed");
      sql += " GENERATED ALWAYS AS (" + c.generation_expr + ") STORED";
    } else if (!c.generated.empty()) {
      return MakeError("column " + c.name + " is generated of unknown kind '" + c.generated + "'");
    }
    if (c.identity == "a") {
      sql += " GENERATED ALWAYS AS IDENTITY";
    } else if (c.identity == "d") {
      sql += " GENERATED BY DEFAULT AS IDENTITY";
    } else if (!c.identity.empty()) {
      return MakeError("column " + c.name + " is an identity of unknown kind '" + c.identity + "'");
    }
    if (c.not_null) sql += " NOT NULL";
    if (c.default_kind == DefaultKind::Immutable) {
      if (c.default_expr.empty())
        return MakeError("column " + c.name + " has a constant default without an expression in the record; the "
                         "record is malformed");
      sql += " DEFAULT " + c.default_expr;
    }
    return sql;
  }

  Result<std::string> KeyList(const std::vector<std::string>& columns) const {
    std::string out;
    for (const auto& c : columns) {
      auto q = Quote(c, "key column");
      if (!q.ok()) return q.error();
      if (!out.empty()) out += ", ";
      out += *q;
    }
    return out;
  }

  Status CreateTable() {
    if (!ddl_.definition) return MakeError("CREATE TABLE carries no definition; the record is malformed");
    const RelationDefinition& def = *ddl_.definition;
    schema_ = def.schema;
    name_ = def.name;
    if (def.relkind != "r" && def.relkind != "p")
      return MakeError(current_display() + " has relkind '" + def.relkind + "', which the applier does not create");
    if (def.relkind == "p" && def.partition_key.empty())
      return MakeError(current_display() + " is a partitioned table but the record carries no partition key (captured "
                       "by a release that did not record it)");
    if (def.is_partition && (def.partition_parent_name.empty() || def.partition_bound.empty()))
      return MakeError(current_display() + " is a partition but the record carries no parent or bound (captured by a "
                       "release that did not record them)");
    if (sim_.exists) {
      if (captured_ == nullptr)
        return MakeError("CREATE TABLE " + current_display() + " carries no relation description; the record is malformed");
      auto refusal = CheckTargetRelation(*captured_, sim_);
      if (refusal)
        return MakeError("table " + current_display() + " already exists on the target but cannot take the captured "
                         "definition: " + refusal->detail);
      // A table the source has just created holds nothing the stream has not yet to deliver: rows
      // already in the target's table of that name (a copy kept by ddl_drop_table = "keep" after an
      // earlier DROP TABLE, or rows written on the target) would stay there beside the new table's.
      if (sim_.has_rows)
        return MakeError("table " + current_display() + " already exists on the target and holds rows, but the source "
                         "has just created it empty (a copy kept by ddl_drop_table = \"keep\" after an earlier DROP "
                         "TABLE?); rename, empty or drop the target's table, then mark the boundary replay-ready");
      plan_.notes.push_back("table " + current_display() +
                            " already exists on the target and accepts the captured definition; not created");
      return Status::Ok();
    }
    auto table = Table();
    if (!table.ok()) return table.error();
    const std::string partition_by = def.relkind == "p" ? " PARTITION BY " + def.partition_key : "";
    if (def.is_partition) {
      // CREATE TABLE ... PARTITION OF: its columns (and a primary key the parent has) are the
      // parent's; the bound is the source's, as pg_get_expr printed it.
      auto parent = ParentTable(def);
      if (!parent.ok()) return parent.error();
      plan_.statements.push_back("CREATE TABLE " + *table + " PARTITION OF " + *parent + " " + def.partition_bound +
                                 partition_by);
      TargetRelation created;
      created.exists = true;
      for (const DdlColumn& c : def.columns) created.columns.push_back(SimulatedColumn(c));
      created.primary_key = def.primary_key;
      created.primary_key_name = def.primary_key_name;
      created.partitioned = def.relkind == "p";
      sim_ = std::move(created);
      return Status::Ok();
    }
    std::string body;
    TargetRelation created;
    created.exists = true;
    created.partitioned = def.relkind == "p";
    for (const DdlColumn& c : def.columns) {
      auto column = ColumnSql(c);
      if (!column.ok()) return column.error();
      if (c.default_kind == DefaultKind::Mutable) plan_.notes.push_back(MutableDefaultNote(c));
      if (!body.empty()) body += ", ";
      body += *column;
      created.columns.push_back(SimulatedColumn(c));
    }
    if (!def.primary_key.empty()) {
      auto keys = KeyList(def.primary_key);
      if (!keys.ok()) return keys.error();
      std::string constraint;
      if (!def.primary_key_name.empty()) {
        auto pk = Quote(def.primary_key_name, "primary key constraint");
        if (!pk.ok()) return pk.error();
        constraint = "CONSTRAINT " + *pk + " ";
      }
      if (!body.empty()) body += ", ";
      body += constraint + "PRIMARY KEY (" + *keys + ")";
      created.primary_key = def.primary_key;
      created.primary_key_name = def.primary_key_name;
    }
    plan_.statements.push_back("CREATE TABLE " + *table + " (" + body + ")" + partition_by);
    sim_ = std::move(created);
    return Status::Ok();
  }

  Result<std::string> ParentTable(const RelationDefinition& def) const {
    auto schema = Quote(def.partition_parent_schema, "schema");
    if (!schema.ok()) return schema.error();
    auto name = Quote(def.partition_parent_name, "parent table name");
    if (!name.ok()) return name.error();
    return *schema + "." + *name;
  }

  // ALTER TABLE parent ATTACH PARTITION: the record is the partition's; its definition after the
  // command names the parent and the bound.
  Status AttachPartition() {
    const RelationDefinition& def = *ddl_.definition;
    if (!def.is_partition || def.partition_parent_name.empty() || def.partition_bound.empty())
      return MakeError("ATTACH PARTITION of " + current_display() + " carries no parent or bound in the definition "
                       "after it; the record is malformed");
    auto parent = ParentTable(def);
    if (!parent.ok()) return parent.error();
    auto table = Table();
    if (!table.ok()) return table.error();
    plan_.statements.push_back("ALTER TABLE " + *parent + " ATTACH PARTITION " + *table + " " + def.partition_bound);
    return Status::Ok();
  }

  // ALTER TYPE / ALTER DOMAIN ... RENAME TO, recorded for each captured table with a column of the
  // type (or an array of it). The target's type is renamed once: the first table's record renames
  // it, the next ones find their columns already of the new name. The new name must be the old
  // one's schema and a new last part (RENAME TO never moves a type).
  Status RenameType(const DdlStep& step) {
    if (step.column.empty() || step.new_name.empty())
      return MakeError("rename of a type used by " + current_display() + " does not name the old and new type; the "
                       "record is malformed");
    const size_t old_dot = step.column.rfind('.');
    const size_t new_dot = step.new_name.rfind('.');
    const std::string old_schema = old_dot == std::string::npos ? "" : step.column.substr(0, old_dot);
    const std::string new_schema = new_dot == std::string::npos ? "" : step.new_name.substr(0, new_dot);
    if (old_schema != new_schema)
      return MakeError("rename of type " + step.column + " to " + step.new_name + " changes its schema; the record is "
                       "malformed");
    bool renamed_here = false;
    for (TargetColumn& c : sim_.columns) {
      if (c.type_name == step.column) {
        c.type_name = step.new_name;
        renamed_here = true;
      } else if (c.type_name == step.column + "[]") {
        c.type_name = step.new_name + "[]";
        renamed_here = true;
      }
    }
    if (!renamed_here) {
      plan_.notes.push_back("type " + step.column + " is already " + step.new_name + " on the target's " +
                            current_display());
      return Status::Ok();
    }
    const bool domain = step.detail.rfind("ALTER DOMAIN", 0) == 0;
    // The last part as format_type printed it: already quoted when it needs quotes.
    const std::string new_last = new_dot == std::string::npos ? step.new_name : step.new_name.substr(new_dot + 1);
    plan_.statements.push_back(std::string(domain ? "ALTER DOMAIN " : "ALTER TYPE ") + step.column + " RENAME TO " +
                               new_last);
    return Status::Ok();
  }

  // ALTER TYPE ... ADD VALUE, recorded on each captured table with a column of the enum (or an array
  // of it): IF NOT EXISTS, so the first table's record adds the label and the next ones (or a replay
  // after the operator added it) find it. Placed by its neighbour, as on the source.
  Status EnumAddValue(const DdlStep& step) {
    if (step.column.empty() || step.new_name.empty())
      return MakeError("a label added to an enum used by " + current_display() +
                       " does not name the type and the label; the record is malformed");
    std::string sql = "ALTER TYPE " + step.column + " ADD VALUE IF NOT EXISTS " + SqlLiteral(step.new_name);
    if (!step.label.empty()) sql += std::string(step.before ? " BEFORE " : " AFTER ") + SqlLiteral(step.label);
    plan_.statements.push_back(std::move(sql));
    return Status::Ok();
  }

  // ALTER TYPE ... RENAME VALUE, on each table using the enum: trellara.rename_enum_value renames
  // the label when the target's enum still has the old one, does nothing when it already has the
  // new one (an earlier table's record, or the operator), and fails naming both otherwise.
  Status EnumRenameValue(const DdlStep& step) {
    if (step.column.empty() || step.new_name.empty() || step.label.empty())
      return MakeError("a label renamed in an enum used by " + current_display() +
                       " does not name the type, the old and the new label; the record is malformed");
    plan_.statements.push_back("SELECT trellara.rename_enum_value(" + SqlLiteral(step.column) + "::pg_catalog.regtype, " +
                               SqlLiteral(step.label) + ", " + SqlLiteral(step.new_name) + ")");
    return Status::Ok();
  }

  // ALTER TABLE parent DETACH PARTITION: the record is the partition's; the step names the parent.
  Status DetachPartition(const DdlStep& step) {
    if (step.new_name.empty())
      return MakeError("DETACH PARTITION of " + current_display() + " does not name the parent; the record is malformed");
    auto schema = Quote(step.column, "schema");
    if (!schema.ok()) return schema.error();
    auto parent = Quote(step.new_name, "parent table name");
    if (!parent.ok()) return parent.error();
    auto table = Table();
    if (!table.ok()) return table.error();
    plan_.statements.push_back("ALTER TABLE " + *schema + "." + *parent + " DETACH PARTITION " + *table);
    return Status::Ok();
  }

  Status DropTable() {
    dropped_ = true;
    plan_.forget_relation = true;
    if (drop_table_ == DropTablePolicy::Keep) {
      plan_.notes.push_back("DROP TABLE " + current_display() +
                            " is not applied: [apply] ddl_drop_table = \"keep\" keeps the target's copy, which no "
                            "longer receives changes");
      return Status::Ok();
    }
    if (!sim_.exists) {
      plan_.notes.push_back("table " + current_display() + " is already absent on the target; nothing to drop");
      return Status::Ok();
    }
    auto table = Table();
    if (!table.ok()) return table.error();
    plan_.statements.push_back("DROP TABLE " + *table);
    sim_ = TargetRelation{};
    return Status::Ok();
  }

  Status AddColumn(const DdlStep& step) {
    auto def = DefinedCol(step);
    if (!def.ok()) return def.error();
    const DdlColumn& c = **def;
    // A column the target already has with an accepted type is what the step would make: checked
    // first, so a transaction replayed after the operator added the column by hand goes through.
    if (const TargetColumn* t = TargetCol(c.name)) {
      if (!TargetTypeAccepts(c.type_name, t->type_name))
        return MakeError("column " + c.name + " already exists on the target's " + current_display() + " as " +
                         t->type_name + ", which cannot take the source's " + c.type_name + " exactly");
      plan_.notes.push_back("column " + c.name + " already exists on the target's " + current_display() + " as " +
                            t->type_name + ", which takes " + c.type_name + "; not added");
      return Status::Ok();
    }
    if (!c.identity.empty())
      return MakeError("ADD COLUMN " + c.name + " on " + current_display() +
                       " adds an identity column: the source's existing rows got per-row values the target cannot "
                       "reproduce");
    // The record's definition is the table after the whole command: when a later subcommand of
    // the same statement changed this column's default (ADD COLUMN s text DEFAULT 'legacy', ALTER
    // COLUMN s SET DEFAULT 'new'), the default it shows is not the one the existing rows got.
    const bool after_this = std::any_of(ddl_.steps.begin(), ddl_.steps.end(), [&](const DdlStep& other) {
      return &other > &step && other.column == c.name &&
             (other.kind == DdlStepKind::SetDefault || other.kind == DdlStepKind::DropDefault);
    });
    if (after_this)
      return MakeError("ADD COLUMN " + c.name + " on " + current_display() +
                       " is followed in the same statement by a change of its default: the record holds the default "
                       "after the statement, not the one the source's existing rows got");
    if (c.default_kind == DefaultKind::Mutable)
      return MakeError("ADD COLUMN " + c.name + " on " + current_display() + " has the default " + c.default_expr +
                       ", which gave the source's existing rows per-row values the target cannot reproduce");
    auto table = Table();
    if (!table.ok()) return table.error();
    auto column = ColumnSql(c);
    if (!column.ok()) return column.error();
    plan_.statements.push_back("ALTER TABLE " + *table + " ADD COLUMN " + *column);
    sim_.columns.push_back(SimulatedColumn(c));
    return Status::Ok();
  }

  Status DropColumn(const DdlStep& step) {
    auto it = std::find_if(sim_.columns.begin(), sim_.columns.end(),
                           [&](const TargetColumn& c) { return c.name == step.column; });
    if (it == sim_.columns.end()) {
      plan_.notes.push_back("column " + step.column + " does not exist on the target's " + current_display() +
                            "; nothing to drop");
      return Status::Ok();
    }
    auto table = Table();
    if (!table.ok()) return table.error();
    auto column = Quote(step.column, "column");
    if (!column.ok()) return column.error();
    plan_.statements.push_back("ALTER TABLE " + *table + " DROP COLUMN " + *column);
    sim_.columns.erase(it);
    // Postgres drops the constraints that involve the column, the primary key among them.
    if (std::find(sim_.primary_key.begin(), sim_.primary_key.end(), step.column) != sim_.primary_key.end()) {
      sim_.primary_key.clear();
      sim_.primary_key_name.clear();
    }
    return Status::Ok();
  }

  Status RenameColumn(const DdlStep& step) {
    TargetColumn* old_column = TargetCol(step.column);
    const bool has_new = TargetCol(step.new_name) != nullptr;
    if (old_column == nullptr && has_new) {
      plan_.notes.push_back("column " + step.new_name + " already exists on the target's " + current_display() +
                            "; not renamed");
      return Status::Ok();
    }
    if (old_column == nullptr)
      return MakeError("RENAME COLUMN " + step.column + " TO " + step.new_name + ": the target's " +
                       current_display() + " has neither column");
    if (has_new)
      return MakeError("RENAME COLUMN " + step.column + " TO " + step.new_name + ": the target's " +
                       current_display() + " has both columns");
    auto table = Table();
    if (!table.ok()) return table.error();
    auto from = Quote(step.column, "column");
    if (!from.ok()) return from.error();
    auto to = Quote(step.new_name, "new column name");
    if (!to.ok()) return to.error();
    plan_.statements.push_back("ALTER TABLE " + *table + " RENAME COLUMN " + *from + " TO " + *to);
    old_column->name = step.new_name;
    for (auto& key : sim_.primary_key)
      if (key == step.column) key = step.new_name;
    return Status::Ok();
  }

  Status RenameTable(const DdlStep& step) {
    if (!step.column.empty() && step.column != name_)
      return MakeError("RENAME TO " + step.new_name + " names the old table " + step.column + " but the record's "
                       "relation is " + current_display() + "; the record is malformed");
    auto table = Table();
    if (!table.ok()) return table.error();
    auto to = Quote(step.new_name, "new table name");
    if (!to.ok()) return to.error();
    plan_.statements.push_back("ALTER TABLE " + *table + " RENAME TO " + *to);
    name_ = step.new_name;
    return Status::Ok();
  }

  Status AlterColumnType(const DdlStep& step) {
    TargetColumn* t = TargetCol(step.column);
    if (t == nullptr) return MakeError("column " + step.column + " does not exist on the target's " + current_display());
    auto def = DefinedCol(step);
    if (!def.ok()) return def.error();
    const DdlColumn& c = **def;
    const std::string& from = t->type_name;
    const std::string& to = c.type_name;
    // A USING expression rewrites every existing value, whatever the types: the same type
    // (USING lower(email)) or a target already of the new type is not "no change". Only a
    // transaction the operator marked replay-ready after doing it by hand goes on (below).
    if (step.using_expression && !replay_ready_)
      return MakeError("ALTER COLUMN " + c.name + " TYPE " + to + " on " + current_display() +
                       " rewrites the existing rows with a USING expression the applier cannot reproduce exactly" +
                       (from == to ? " (the target's column is already " + to + ", but its values are the old ones)"
                                   : std::string()));
    if (from == to) {
      plan_.notes.push_back("column " + c.name + " of the target's " + current_display() + " is already " + to);
      return Status::Ok();
    }
    // Another typmod of the same base type: the same cast runs on both sides, so the target
    // reproduces it exactly (and a scale or precision the target kept would round values).
    const bool same_base = SameBaseType(from, to);
    if (!same_base && TargetTypeAccepts(to, from)) {
      plan_.notes.push_back("column " + c.name + " of the target's " + current_display() + " is " + from +
                            ", which already takes every value of " + to + "; not altered");
      return Status::Ok();
    }
    if (step.using_expression)
      return MakeError("ALTER COLUMN " + c.name + " TYPE " + to + " on " + current_display() +
                       " converts existing rows with a USING expression the applier cannot reproduce exactly");
    if (!same_base && !TargetTypeAccepts(from, to))
      return MakeError("ALTER COLUMN " + c.name + " TYPE " + to + " on " + current_display() + " narrows or converts " +
                       from + ", which cannot be reproduced exactly on the target");
    auto table = Table();
    if (!table.ok()) return table.error();
    auto column = Quote(c.name, "column");
    if (!column.ok()) return column.error();
    std::string sql = "ALTER TABLE " + *table + " ALTER COLUMN " + *column + " TYPE " + to;
    if (!c.collation.empty()) {
      auto collation = Quote(c.collation, "collation");
      if (!collation.ok()) return collation.error();
      sql += " COLLATE " + *collation;
    }
    plan_.statements.push_back(std::move(sql));
    t->type_name = to;
    return Status::Ok();
  }

  Status SetNotNull(const DdlStep& step, bool not_null) {
    TargetColumn* t = TargetCol(step.column);
    if (t == nullptr) return MakeError("column " + step.column + " does not exist on the target's " + current_display());
    if (t->not_null == not_null) {
      plan_.notes.push_back("column " + step.column + " of the target's " + current_display() + " already is " +
                            (not_null ? "NOT NULL" : "nullable"));
      return Status::Ok();
    }
    auto table = Table();
    if (!table.ok()) return table.error();
    auto column = Quote(step.column, "column");
    if (!column.ok()) return column.error();
    plan_.statements.push_back("ALTER TABLE " + *table + " ALTER COLUMN " + *column +
                               (not_null ? " SET NOT NULL" : " DROP NOT NULL"));
    t->not_null = not_null;
    return Status::Ok();
  }

  Status SetDefault(const DdlStep& step) {
    TargetColumn* t = TargetCol(step.column);
    if (t == nullptr) return MakeError("column " + step.column + " does not exist on the target's " + current_display());
    auto def = DefinedCol(step);
    if (!def.ok()) return def.error();
    const DdlColumn& c = **def;
    if (c.default_kind == DefaultKind::Mutable) {
      plan_.notes.push_back(MutableDefaultNote(c));
      return Status::Ok();
    }
    if (c.default_kind != DefaultKind::Immutable || c.default_expr.empty())
      return MakeError("SET DEFAULT on column " + c.name + " of " + current_display() +
                       ", but the record's definition has no default for it; the record is malformed");
    auto table = Table();
    if (!table.ok()) return table.error();
    auto column = Quote(c.name, "column");
    if (!column.ok()) return column.error();
    plan_.statements.push_back("ALTER TABLE " + *table + " ALTER COLUMN " + *column + " SET DEFAULT " + c.default_expr);
    t->has_default = true;
    return Status::Ok();
  }

  Status DropDefault(const DdlStep& step) {
    TargetColumn* t = TargetCol(step.column);
    if (t == nullptr) return MakeError("column " + step.column + " does not exist on the target's " + current_display());
    if (!t->has_default) {
      plan_.notes.push_back("column " + step.column + " of the target's " + current_display() +
                            " has no default; nothing to drop");
      return Status::Ok();
    }
    auto table = Table();
    if (!table.ok()) return table.error();
    auto column = Quote(step.column, "column");
    if (!column.ok()) return column.error();
    plan_.statements.push_back("ALTER TABLE " + *table + " ALTER COLUMN " + *column + " DROP DEFAULT");
    t->has_default = false;
    return Status::Ok();
  }

  Status AddPrimaryKey() {
    if (!ddl_.definition || ddl_.definition->primary_key.empty())
      return MakeError("ADD PRIMARY KEY on " + current_display() +
                       ", but the record's definition has no primary key; the record is malformed");
    const RelationDefinition& def = *ddl_.definition;
    if (sim_.primary_key == def.primary_key) {
      plan_.notes.push_back("the target's " + current_display() + " already has the primary key on the same columns");
      return Status::Ok();
    }
    for (const auto& key : def.primary_key)
      if (TargetCol(key) == nullptr)
        return MakeError("primary key column " + key + " does not exist on the target's " + current_display());
    auto table = Table();
    if (!table.ok()) return table.error();
    auto keys = KeyList(def.primary_key);
    if (!keys.ok()) return keys.error();
    if (!sim_.primary_key.empty()) {
      auto existing = Quote(sim_.primary_key_name, "the target's primary key constraint");
      if (!existing.ok()) return existing.error();
      plan_.statements.push_back("ALTER TABLE " + *table + " DROP CONSTRAINT " + *existing);
    }
    std::string constraint = " ADD ";
    if (!def.primary_key_name.empty()) {
      auto pk = Quote(def.primary_key_name, "primary key constraint");
      if (!pk.ok()) return pk.error();
      constraint = " ADD CONSTRAINT " + *pk + " ";
    }
    plan_.statements.push_back("ALTER TABLE " + *table + constraint + "PRIMARY KEY (" + *keys + ")");
    sim_.primary_key = def.primary_key;
    sim_.primary_key_name = def.primary_key_name;
    for (const auto& key : def.primary_key) TargetCol(key)->not_null = true;  // a key implies NOT NULL
    return Status::Ok();
  }

  Status DropPrimaryKey(const DdlStep& step) {
    if (sim_.primary_key.empty() || sim_.primary_key_name != step.column) {
      plan_.notes.push_back("the target's " + current_display() + " has no primary key constraint " + step.column +
                            "; nothing to drop");
      return Status::Ok();
    }
    auto table = Table();
    if (!table.ok()) return table.error();
    auto constraint = Quote(step.column, "primary key constraint");
    if (!constraint.ok()) return constraint.error();
    plan_.statements.push_back("ALTER TABLE " + *table + " DROP CONSTRAINT " + *constraint);
    sim_.primary_key.clear();
    sim_.primary_key_name.clear();
    return Status::Ok();
  }

  const Ddl& ddl_;
  const RelationInfo* captured_;
  TargetRelation sim_;
  DropTablePolicy drop_table_;
  DdlPlan& plan_;
  std::string schema_;
  std::string name_;
  const bool replay_ready_;
  bool dropped_ = false;
};

DdlPlan Refuse(DdlPlan plan, QuarantineReason reason, const std::string& relation, std::string detail) {
  plan.action = DdlAction::Quarantine;
  plan.statements.clear();  // never half a DDL
  plan.forget_relation = false;
  plan.cause = QuarantineCause{};
  plan.cause.reason = reason;
  plan.cause.relation = relation;
  plan.cause.detail = std::move(detail);
  return plan;
}

}  // namespace

std::string DescribeDdl(const Ddl& ddl) {
  std::string tag = ddl.command_tag.empty() ? std::string("DDL") : ddl.command_tag;
  return tag + " " + RelationDisplay(ddl) + (ddl.steps.empty() ? std::string() : ": " + DescribeSteps(ddl.steps));
}

DdlPlan PlanDdl(const Ddl& ddl, const RelationInfo* captured, const TargetRelation& target, DdlPolicy policy,
                DropTablePolicy drop_table, bool replay_ready) {
  DdlPlan plan;
  const std::string relation = RelationDisplay(ddl);
  const std::string statement = " — statement: " + ddl.sql;
  if (policy == DdlPolicy::Halt)
    return Refuse(std::move(plan), QuarantineReason::DdlPolicyHalt, relation, DescribeDdl(ddl) + statement);

  auto unsupported = [&](const std::string& why) {
    return Refuse(std::move(plan), QuarantineReason::DdlUnsupported, relation,
                  why + "; " + kUnsupportedRemedy + " — " + DescribeDdl(ddl) + statement);
  };
  const bool drops = std::any_of(ddl.steps.begin(), ddl.steps.end(),
                                 [](const DdlStep& s) { return s.kind == DdlStepKind::DropTable; });
  if (!drops && captured == nullptr)
    return unsupported("the record carries no relation description for " + relation + " after the command; the "
                       "record is malformed");
  if (!drops && !ddl.definition)
    return unsupported("the record carries no definition of " + relation + " after the command; the record is "
                       "malformed");
  const bool creates = std::any_of(ddl.steps.begin(), ddl.steps.end(),
                                   [](const DdlStep& s) { return s.kind == DdlStepKind::CreateTable; });
  if (!creates && ddl.relation_name.empty())
    return unsupported("the record does not name the relation the command changed; the record is malformed");

  DdlPlanner planner(ddl, captured, target, drop_table, plan, replay_ready);
  for (const DdlStep& step : ddl.steps) {
    Status s = planner.Step(step);
    if (!s.ok()) return unsupported(s.error().message);
  }
  if (!planner.dropped()) {
    // The simulated target after every step must take the relation's DML from now on; a record
    // whose steps do not explain its own definition is never applied half-way.
    auto refusal = CheckTargetRelation(*captured, planner.simulated());
    if (refusal)
      return unsupported("after " + DescribeSteps(ddl.steps) + " the target's " + planner.current_display() +
                         " would still not accept the captured definition: " + refusal->detail);
  }
  plan.action = plan.statements.empty() ? DdlAction::NoTargetChange : DdlAction::Execute;
  return plan;
}

bool CreatesRelation(const Change& change, uint32_t relation_oid) {
  // Only the commands that write rows before their record: rows of a table ahead of a plain
  // CREATE TABLE are out of order, never repaired here.
  const std::string& tag = change.ddl.command_tag;
  return change.op == Op::Ddl && relation_oid != 0 && change.relation_oid == relation_oid && !change.ddl.steps.empty() &&
         change.ddl.steps.front().kind == DdlStepKind::CreateTable && (tag == "CREATE TABLE AS" || tag == "SELECT INTO");
}

std::optional<size_t> CreatedLaterAt(const std::vector<Change>& changes, size_t after, uint32_t relation_oid) {
  for (size_t i = after + 1; i < changes.size(); i++)
    if (CreatesRelation(changes[i], relation_oid)) return i;
  return std::nullopt;
}

// ---- a DDL change and the relation's snapshot -------------------------------------------------

DdlPolicy PolicyOnReplay(DdlPolicy configured, bool replay_ready) {
  return replay_ready ? DdlPolicy::Apply : configured;
}

bool DdlChangesShape(const DdlPlan& plan, const RelationInfo* captured, const std::optional<KnownRelation>& known) {
  return plan.action == DdlAction::Execute || plan.forget_relation || captured == nullptr || !known ||
         known->fingerprint != captured->fingerprint;
}

DdlSnapshotStep DecideDdlBesideSnapshot(const DdlSnapshotFacts& facts) {
  if (!facts.shape_changed || !facts.has_snapshot || facts.retired_at_commit) return DdlSnapshotStep::None;
  return DdlSnapshotStep::WithholdOrCheck;
}

bool CheckFinishedChunksAfterWithhold(bool withheld, bool replay_ready) { return !withheld && !replay_ready; }

std::optional<QuarantineCause> FinishedCopySawDdl(const std::vector<std::pair<int32_t, ChunkView>>& chunks,
                                                  uint32_t xid, uint64_t commit_lsn, const std::string& table,
                                                  const std::string& ddl_description, const std::string& config_path) {
  for (const auto& [chunk_no, view] : chunks) {
    if (view.kind != ChunkView::Kind::Copied || DecideHalf(view, xid, commit_lsn) != HalfDecision::InCopy) continue;
    QuarantineCause cause;
    cause.reason = QuarantineReason::DdlUnsupported;
    cause.operation = "DDL";
    cause.relation = table;
    cause.detail = ddl_description + ": chunk " + std::to_string(chunk_no) + " of the finished snapshot of " + table +
                   " was copied in a source snapshot that already saw this DDL, with the definition before it, "
                   "so the copy may lack what the stream leaves to it; mark this transaction replay-ready (it "
                   "is then applied), then copy the table again: trellara snapshot --config " + config_path +
                   " --table " + table + " --force";
    return cause;
  }
  return std::nullopt;
}

}  // namespace trellara
