// ddl_plan_table.cpp — the DDL steps on a table as a whole (DdlPlanner, ddl_apply_internal.h):
// CREATE TABLE (also PARTITION OF), DROP TABLE under ddl_drop_table, RENAME TO, ATTACH and
// DETACH PARTITION, and the primary key.
//
// Each step changes the simulated target exactly as its statement changes the real one. Never
// creates a table over one that cannot take the captured definition or that holds rows, and never
// drops a table under ddl_drop_table = "keep". Talks to no database.
#include <string>
#include <utility>

#include "ddl_apply_internal.h"

namespace trellara::ddl_detail {

Status DdlPlanner::CreateTable() {
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

Status DdlPlanner::DropTable() {
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

Status DdlPlanner::RenameTable(const DdlStep& step) {
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

// ALTER TABLE parent ATTACH PARTITION: the record is the partition's; its definition after the
// command names the parent and the bound.
Status DdlPlanner::AttachPartition() {
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

// ALTER TABLE parent DETACH PARTITION: the record is the partition's; the step names the parent.
Status DdlPlanner::DetachPartition(const DdlStep& step) {
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

Status DdlPlanner::AddPrimaryKey() {
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

Status DdlPlanner::DropPrimaryKey(const DdlStep& step) {
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

}  // namespace trellara::ddl_detail
