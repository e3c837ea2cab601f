// ddl_apply.cpp — what the applier does with a captured DDL change (ddl_apply.h): the policies'
// names, how a DDL record is described, and PlanDdl, which plays the record's steps on a simulated
// copy of the target (DdlPlanner: ddl_planner.cpp and the steps of each kind in ddl_plan_table.cpp,
// ddl_plan_column.cpp, ddl_plan_type.cpp) and turns the outcome into statements or a quarantine.
// What a DDL change does to the relation's snapshot is ddl_snapshot.cpp.
//
// Must never return statements that leave the target half-way through a DDL record: every step is
// first played on a simulated copy of the target's definition, and the copy must accept the
// captured relation before any statement is handed out. Never emits an unquoted identifier and
// never creates a default whose value depends on where it runs. Talks to no database.
#include "trellara/apply/ddl_apply.h"

#include <algorithm>

#include "ddl_apply_internal.h"

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

namespace ddl_detail {

std::string RelationDisplay(const Ddl& ddl) {
  if (!ddl.relation_name.empty()) return ddl.relation_schema + "." + ddl.relation_name;
  if (ddl.definition) return ddl.definition->schema + "." + ddl.definition->name;
  return ddl.object_identity;
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

}  // namespace ddl_detail

namespace {

using ddl_detail::DdlPlanner;
using ddl_detail::DescribeSteps;
using ddl_detail::RelationDisplay;

// What an operator does about a DDL the applier will not reproduce.
constexpr char kUnsupportedRemedy[] =
    "re-snapshot the table, or change the target by hand and mark the transaction replay-ready "
    "(trellara repair-plan --config <flow.toml> prints the steps)";

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

}  // namespace trellara
