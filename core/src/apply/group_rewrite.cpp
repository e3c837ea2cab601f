// group_rewrite.cpp — the rewrites of a grouped batch and its guard (group_rewrite.h).
#include "trellara/apply/group_rewrite.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <string>

namespace trellara {

GroupRewrites PermitGroupRewrites(bool grouped, bool leave_out_configured, bool merge_configured, bool replica_role) {
  return GroupRewrites{grouped && leave_out_configured && replica_role, grouped && merge_configured && replica_role};
}

std::vector<std::string> GuardedRelations(const std::vector<std::string>& superseded_relations,
                                          const std::vector<std::string>& merged_relations, bool guard_merged) {
  std::set<std::string> guarded(superseded_relations.begin(), superseded_relations.end());
  if (guard_merged) guarded.insert(merged_relations.begin(), merged_relations.end());
  return {guarded.begin(), guarded.end()};
}

SupersededUpdates FindSupersededUpdates(const std::vector<const std::vector<ChangePlan>*>& group,
                                        const std::set<std::string>& refused) {
  SupersededUpdates out;
  out.superseded.resize(group.size());
  for (size_t t = 0; t < group.size(); t++) out.superseded[t].assign(group[t]->size(), false);
  // The last key-preserving UPDATE of each row since its relation was last written otherwise.
  struct Last {
    size_t tx, plan;
    uint64_t generation;
    size_t position;  // in the group's plans, in order
  };
  std::map<std::string, Last> last;              // row_key -> its last UPDATE
  std::map<std::string, uint64_t> generation;    // target_relation -> bumped by every other write
  uint64_t everything = 0;                       // bumped by a TRUNCATE or a plan without a relation
  // Every plan in order (its relation, null for none), and the spans from a superseded UPDATE to
  // the UPDATE that supersedes it (positions, both included).
  std::vector<const std::string*> relation_at;
  std::vector<std::pair<size_t, size_t>> spans;
  const auto current = [&](const std::string& relation) {
    auto it = generation.find(relation);
    return everything + (it == generation.end() ? 0 : it->second);
  };
  for (size_t t = 0; t < group.size(); t++) {
    for (size_t k = 0; k < group[t]->size(); k++) {
      const ChangePlan& plan = (*group[t])[k];
      if (plan.kind == PlanKind::NotApplied) continue;
      const size_t position = relation_at.size();
      relation_at.push_back(plan.target_relation.empty() ? nullptr : &plan.target_relation);
      if (plan.target_relation.empty() || plan.kind == PlanKind::Truncate ||
          refused.count(plan.target_relation) > 0) {
        // Generations only grow, so bumping the shared part invalidates every remembered UPDATE:
        // a trigger of a refused relation may read any row, and must see each as in-order apply
        // leaves it.
        everything++;
        continue;
      }
      if (plan.kind != PlanKind::Update || plan.row_key.empty()) {
        generation[plan.target_relation]++;
        continue;
      }
      const uint64_t now = current(plan.target_relation);
      auto it = last.find(plan.row_key);
      if (it != last.end() && it->second.generation == now) {
        const ChangePlan& earlier = (*group[it->second.tx])[it->second.plan];
        if (earlier.statement_key == plan.statement_key) {
          out.superseded[it->second.tx][it->second.plan] = true;
          out.count++;
          spans.emplace_back(it->second.position, position);
        }
      }
      last[plan.row_key] = Last{t, k, now, position};
    }
  }
  // The guard covers every relation written inside a span: the superseded UPDATE's own relation
  // (an UPDATE trigger would miss it) and any other relation written between it and the UPDATE
  // that supersedes it (a trigger there could read the row without it). Nothing written outside
  // every span can observe a left-out UPDATE, and a refused relation never lies inside one.
  std::vector<int> opened(relation_at.size() + 1, 0);  // spans open at a position: prefix sums
  for (const auto& [first, last_position] : spans) {
    opened[first]++;
    opened[last_position + 1]--;
  }
  std::set<std::string> inside;
  int depth = 0;
  for (size_t i = 0; i < relation_at.size(); i++) {
    depth += opened[i];
    if (depth > 0 && relation_at[i] != nullptr) inside.insert(*relation_at[i]);
  }
  out.relations.assign(inside.begin(), inside.end());
  return out;
}

size_t LearnRefusedRelations(const std::string& detail, const std::vector<std::string>& guarded,
                             std::set<std::string>& refused) {
  size_t named = 0, learned = 0;
  size_t start = 0;
  while (start <= detail.size()) {
    const size_t end = std::min(detail.find(',', start), detail.size());
    const std::string item = detail.substr(start, end - start);
    char* rest = nullptr;
    const unsigned long position = std::strtoul(item.c_str(), &rest, 10);
    if (!item.empty() && std::isdigit(static_cast<unsigned char>(item[0])) && rest != nullptr && *rest == '\0' &&
        position >= 1 && position <= guarded.size()) {
      named++;
      if (refused.insert(guarded[position - 1]).second) learned++;
    }
    start = end + 1;
  }
  if (named == 0)
    for (const std::string& relation : guarded) learned += refused.insert(relation).second ? 1 : 0;
  return learned;
}

bool InsertMergeable(const ChangePlan& plan) {
  return plan.kind == PlanKind::Insert && plan.expect == RowExpectation::ExactlyOne && plan.match == MatchMode::None &&
         !plan.params.empty() && plan.param_columns.size() == plan.params.size() && !plan.target_relation.empty();
}

std::vector<std::pair<std::string, const ChangePlan*>> MergeUpdateCandidates(
    const std::vector<const std::vector<ChangePlan>*>& group, const std::vector<std::vector<bool>>& superseded,
    const std::set<std::string>& refused, const MergeLimits& limits) {
  std::map<std::string, std::pair<size_t, const ChangePlan*>> counted;
  for (size_t t = 0; t < group.size(); t++)
    for (size_t k = 0; k < group[t]->size(); k++) {
      const ChangePlan& plan = (*group[t])[k];
      if (t < superseded.size() && k < superseded[t].size() && superseded[t][k]) continue;
      if (!UpdateBatchable(plan) || refused.count(plan.target_relation) > 0) continue;
      if (PlanParamBytes(plan) > limits.bytes_max) continue;
      auto& [n, first] = counted[plan.statement_key];
      if (n++ == 0) first = &plan;
    }
  std::vector<std::pair<std::string, const ChangePlan*>> out;
  for (const auto& [key, entry] : counted)
    if (entry.first >= std::max<size_t>(limits.update_rows_min, 2)) out.emplace_back(key, entry.second);
  return out;
}

GroupStatements MergeGroupStatements(const std::vector<const std::vector<ChangePlan>*>& group,
                                     const std::vector<std::vector<bool>>& superseded,
                                     const std::set<std::string>& refused,
                                     const std::set<std::string>& update_shapes, const MergeLimits& limits) {
  GroupStatements out;
  // The plans sent, in log order.
  std::vector<PlanRef> sent;
  std::vector<const ChangePlan*> plan_at;
  for (size_t t = 0; t < group.size(); t++)
    for (size_t k = 0; k < group[t]->size(); k++) {
      const ChangePlan& plan = (*group[t])[k];
      if (plan.kind == PlanKind::NotApplied) continue;
      if (t < superseded.size() && k < superseded[t].size() && superseded[t][k]) continue;
      sent.push_back({t, k});
      plan_at.push_back(&plan);
    }
  struct Run {
    GroupStatementKind kind = GroupStatementKind::Single;
    const std::string* statement_key = nullptr;
    std::vector<size_t> members;  // positions in `sent`
    std::set<std::string> row_keys;
    size_t params = 0;
    size_t bytes = 0;
    size_t sent_at = 0;  // the position it is sent before (sent.size(): at the end)
  };
  std::vector<Run> closed;
  std::map<std::string, Run> open;  // target_relation -> its run
  const auto close = [&](std::map<std::string, Run>::iterator it, size_t at) {
    it->second.sent_at = at;
    closed.push_back(std::move(it->second));
    open.erase(it);
  };
  const auto close_all = [&](size_t at) {
    // In the order of their first members, so the output does not depend on relation names.
    std::vector<Run> ending;
    for (auto& [relation, run] : open) ending.push_back(std::move(run));
    open.clear();
    std::sort(ending.begin(), ending.end(), [](const Run& a, const Run& b) { return a.members[0] < b.members[0]; });
    for (Run& run : ending) {
      run.sent_at = at;
      closed.push_back(std::move(run));
    }
  };
  for (size_t i = 0; i < sent.size(); i++) {
    const ChangePlan& plan = *plan_at[i];
    if (plan.target_relation.empty() || plan.kind == PlanKind::Truncate || refused.count(plan.target_relation) > 0) {
      close_all(i);
      continue;
    }
    GroupStatementKind kind = GroupStatementKind::Single;
    if (InsertMergeable(plan))
      kind = GroupStatementKind::InsertRows;
    else if (UpdateBatchable(plan) && update_shapes.count(plan.statement_key) > 0)
      kind = GroupStatementKind::UpdateRows;
    const size_t bytes = PlanParamBytes(plan);
    if (bytes > limits.bytes_max) kind = GroupStatementKind::Single;
    auto it = open.find(plan.target_relation);
    if (it != open.end()) {
      Run& run = it->second;
      const bool joins = kind == run.kind && plan.statement_key == *run.statement_key &&
                         run.members.size() < limits.rows_max && run.bytes + bytes <= limits.bytes_max &&
                         (kind != GroupStatementKind::InsertRows || run.params + plan.params.size() <= limits.params_max) &&
                         (kind != GroupStatementKind::UpdateRows || run.row_keys.count(plan.row_key) == 0);
      if (joins) {
        run.members.push_back(i);
        run.params += plan.params.size();
        run.bytes += bytes;
        if (kind == GroupStatementKind::UpdateRows) run.row_keys.insert(plan.row_key);
        if (run.members.size() >= limits.rows_max) close(it, i + 1);
        continue;
      }
      close(it, i);  // another write of the relation: the run is sent before it
    }
    if (kind == GroupStatementKind::Single) continue;
    Run run;
    run.kind = kind;
    run.statement_key = &plan.statement_key;
    run.members.push_back(i);
    run.params = plan.params.size();
    run.bytes = bytes;
    if (kind == GroupStatementKind::UpdateRows) run.row_keys.insert(plan.row_key);
    open.emplace(plan.target_relation, std::move(run));
  }
  close_all(sent.size());

  // Which runs merge, and where each is sent.
  std::vector<bool> member(sent.size(), false);
  std::vector<std::vector<size_t>> sent_before(sent.size() + 1);  // position -> runs sent just before it
  std::vector<int> opened(sent.size() + 1, 0);                    // spans: prefix sums
  for (size_t r = 0; r < closed.size(); r++) {
    const Run& run = closed[r];
    const size_t min = run.kind == GroupStatementKind::InsertRows ? limits.insert_rows_min : limits.update_rows_min;
    if (run.members.size() < std::max<size_t>(min, 2)) continue;
    for (size_t position : run.members) member[position] = true;
    sent_before[run.sent_at].push_back(r);
    opened[run.members.front()]++;
    opened[run.sent_at]--;
  }
  const auto emit_runs = [&](size_t at) {
    std::vector<size_t>& runs = sent_before[at];
    std::sort(runs.begin(), runs.end(),
              [&](size_t a, size_t b) { return closed[a].members[0] < closed[b].members[0]; });
    for (size_t r : runs) {
      GroupStatement statement;
      statement.kind = closed[r].kind;
      for (size_t position : closed[r].members) statement.plans.push_back(sent[position]);
      out.merged += statement.plans.size();
      out.statements.push_back(std::move(statement));
    }
  };
  std::set<std::string> inside;
  int depth = 0;
  for (size_t i = 0; i < sent.size(); i++) {
    emit_runs(i);
    depth += opened[i];
    if (depth > 0) inside.insert(plan_at[i]->target_relation);
    if (!member[i]) out.statements.push_back(GroupStatement{GroupStatementKind::Single, {sent[i]}});
  }
  emit_runs(sent.size());
  out.relations.assign(inside.begin(), inside.end());
  return out;
}

Result<MergedInsert> MergedInsertSql(const std::vector<const ChangePlan*>& rows) {
  if (rows.empty()) return MakeError("internal: a merged INSERT of no rows");
  const ChangePlan& first = *rows.front();
  for (const ChangePlan* row : rows)
    if (!InsertMergeable(*row) || row->statement_key != first.statement_key)
      return MakeError("internal: a merged INSERT of " + first.relation_display +
                       " was asked for a plan that is not an INSERT of the same shape");
  std::string columns;
  for (size_t i = 0; i < first.param_columns.size(); i++) {
    auto quoted = QuoteIdentifier(first.param_columns[i]);
    if (!quoted)
      return MakeError("column " + first.param_columns[i] + " of " + first.relation_display + ": " + quoted.error().message);
    if (i > 0) columns += ", ";
    columns += *quoted;
  }
  MergedInsert out;
  const size_t width = first.params.size();
  out.params.reserve(width * rows.size());
  std::string values;
  values.reserve(rows.size() * width * 6);
  size_t n = 1;
  for (const ChangePlan* row : rows) {
    values += values.empty() ? "(" : ", (";
    for (size_t i = 0; i < width; i++) {
      if (i > 0) values += ", ";
      values += "$" + std::to_string(n++);
      out.params.push_back(row->params[i]);
    }
    values += ")";
  }
  const std::string count = std::to_string(rows.size());
  out.sql = "WITH trellara_rows AS (INSERT INTO " + first.target_relation + " (" + columns +
            ") OVERRIDING SYSTEM VALUE VALUES " + values + " RETURNING 1) SELECT CASE WHEN count(*) = " + count +
            " THEN NULL ELSE trellara.require_rows(count(*), " + count + ") END FROM trellara_rows";
  return out;
}

}  // namespace trellara
