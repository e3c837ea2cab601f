// ddl_apply_internal.h — what the parts of DDL planning share: the names a DDL record is shown
// by, and DdlPlanner, which plays a record's steps on a simulated copy of the target. ddl_apply.cpp
// decides a record (PlanDdl), ddl_planner.cpp dispatches its steps and builds their SQL text,
// ddl_plan_table.cpp, ddl_plan_column.cpp and ddl_plan_type.cpp play the steps of each kind.
// Internal to core/src/apply: never included from outside it, and it adds no rule of its own
// (ddl_apply.h states them).
#pragma once

#include <string>
#include <vector>

#include "trellara/apply/ddl_apply.h"

namespace trellara::ddl_detail {

// The relation as the record names it before the command (CREATE TABLE: the new table).
std::string RelationDisplay(const Ddl& ddl);
// One step, and a record's steps, as logs and quarantine details name them.
std::string DescribeStep(const DdlStep& step);
std::string DescribeSteps(const std::vector<DdlStep>& steps);

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

  Status Step(const DdlStep& step);  // ddl_planner.cpp

 private:
  // ---- ddl_planner.cpp: quoted names, SQL text, the simulated target's columns ------------------
  Result<std::string> Quote(const std::string& name, const char* what) const;
  Result<std::string> Table() const;
  Result<std::string> ParentTable(const RelationDefinition& def) const;
  Result<std::string> KeyList(const std::vector<std::string>& columns) const;
  Result<std::string> ColumnSql(const DdlColumn& c) const;
  TargetColumn* TargetCol(const std::string& name);
  Result<const DdlColumn*> DefinedCol(const DdlStep& step) const;
  static TargetColumn SimulatedColumn(const DdlColumn& c);
  std::string MutableDefaultNote(const DdlColumn& c) const;

  // ---- ddl_plan_table.cpp: the table, its partitions, its primary key ---------------------------
  Status CreateTable();
  Status DropTable();
  Status RenameTable(const DdlStep& step);
  Status AttachPartition();
  Status DetachPartition(const DdlStep& step);
  Status AddPrimaryKey();
  Status DropPrimaryKey(const DdlStep& step);

  // ---- ddl_plan_column.cpp: one column ----------------------------------------------------------
  Status AddColumn(const DdlStep& step);
  Status DropColumn(const DdlStep& step);
  Status RenameColumn(const DdlStep& step);
  Status AlterColumnType(const DdlStep& step);
  Status SetNotNull(const DdlStep& step, bool not_null);
  Status SetDefault(const DdlStep& step);
  Status DropDefault(const DdlStep& step);

  // ---- ddl_plan_type.cpp: a type or an enum the table's columns use -----------------------------
  Status RenameType(const DdlStep& step);
  Status EnumAddValue(const DdlStep& step);
  Status EnumRenameValue(const DdlStep& step);

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

}  // namespace trellara::ddl_detail
