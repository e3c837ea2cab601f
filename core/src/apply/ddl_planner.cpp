// ddl_planner.cpp — DdlPlanner's dispatch of a DDL record's steps (ddl_apply_internal.h), and
// what every step builds with: quoted identifiers, a column's or a key's SQL text, the simulated
// target's columns and the record's definition of them.
//
// Never emits an unquoted identifier (every name goes through QuoteIdentifier) and never puts a
// mutable default into a column's SQL text (the caller notes it instead). Talks to no database.
#include <string>
#include <vector>

#include "ddl_apply_internal.h"
#include "trellara/apply/apply_plan.h"

namespace trellara::ddl_detail {

Status DdlPlanner::Step(const DdlStep& step) {
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

Result<std::string> DdlPlanner::Quote(const std::string& name, const char* what) const {
  auto q = QuoteIdentifier(name);
  if (!q.ok()) return MakeError(std::string(what) + " \"" + name + "\": " + q.error().message);
  return q;
}

Result<std::string> DdlPlanner::Table() const {
  auto schema = Quote(schema_, "schema");
  if (!schema.ok()) return schema.error();
  auto name = Quote(name_, "table name");
  if (!name.ok()) return name.error();
  return *schema + "." + *name;
}

Result<std::string> DdlPlanner::ParentTable(const RelationDefinition& def) const {
  auto schema = Quote(def.partition_parent_schema, "schema");
  if (!schema.ok()) return schema.error();
  auto name = Quote(def.partition_parent_name, "parent table name");
  if (!name.ok()) return name.error();
  return *schema + "." + *name;
}

TargetColumn* DdlPlanner::TargetCol(const std::string& name) {
  for (auto& c : sim_.columns)
    if (c.name == name) return &c;
  return nullptr;
}

Result<const DdlColumn*> DdlPlanner::DefinedCol(const DdlStep& step) const {
  if (ddl_.definition)
    for (const auto& c : ddl_.definition->columns)
      if (c.name == step.column) return &c;
  return MakeError("the record's definition of " + RelationDisplay(ddl_) + " has no column " + step.column +
                   ", though step " + DescribeStep(step) + " names it; the record is malformed");
}

TargetColumn DdlPlanner::SimulatedColumn(const DdlColumn& c) {
  TargetColumn t;
  t.name = c.name;
  t.type_name = c.type_name;
  t.identity = !c.identity.empty();
  t.generated = !c.generated.empty();
  t.not_null = c.not_null || t.identity;
  t.has_default = c.default_kind == DefaultKind::Immutable;
  return t;
}

std::string DdlPlanner::MutableDefaultNote(const DdlColumn& c) const {
  return "default " + c.default_expr + " of " + c.name + " is evaluated on the source; replicated rows carry its "
         "values (not created on the target's " + current_display() + ")";
}

// "name" type [COLLATE "c"] [GENERATED ...] [NOT NULL] [DEFAULT expr]; a mutable default is left
// out (the caller notes it).
Result<std::string> DdlPlanner::ColumnSql(const DdlColumn& c) const {
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

Result<std::string> DdlPlanner::KeyList(const std::vector<std::string>& columns) const {
  std::string out;
  for (const auto& c : columns) {
    auto q = Quote(c, "key column");
    if (!q.ok()) return q.error();
    if (!out.empty()) out += ", ";
    out += *q;
  }
  return out;
}

}  // namespace trellara::ddl_detail
