// ddl_plan_column.cpp — the DDL steps on one column (DdlPlanner, ddl_apply_internal.h): ADD,
// DROP and RENAME COLUMN, ALTER COLUMN TYPE, SET / DROP NOT NULL, SET / DROP DEFAULT.
//
// A step the target already reflects is a note, never a statement, so a transaction replayed after
// the operator changed the target by hand plans no-ops. Never adds a column whose existing rows got
// per-row values on the source (an identity, a mutable default), and never alters a type in a way
// the target cannot reproduce exactly (a USING expression, a narrowing or converting type).
// Talks to no database.
#include <algorithm>
#include <string>
#include <utility>

#include "ddl_apply_internal.h"

namespace trellara::ddl_detail {
namespace {

// Whether two type names share a base type (they differ at most in typmod): TargetTypeAccepts'
// widenings go one way only, so mutual acceptance means the same base type.
bool SameBaseType(const std::string& a, const std::string& b) {
  return TargetTypeAccepts(a, b) && TargetTypeAccepts(b, a);
}

}  // namespace

Status DdlPlanner::AddColumn(const DdlStep& step) {
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

Status DdlPlanner::DropColumn(const DdlStep& step) {
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

Status DdlPlanner::RenameColumn(const DdlStep& step) {
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

Status DdlPlanner::AlterColumnType(const DdlStep& step) {
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

Status DdlPlanner::SetNotNull(const DdlStep& step, bool not_null) {
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

Status DdlPlanner::SetDefault(const DdlStep& step) {
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

Status DdlPlanner::DropDefault(const DdlStep& step) {
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

}  // namespace trellara::ddl_detail
