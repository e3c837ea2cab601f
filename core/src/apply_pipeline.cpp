// apply_pipeline.cpp — the applier's batch pipeline rules (apply_pipeline.h). A broken
// precondition is a bug in the adapter that drives this state machine: it stops the process
// loudly rather than risk retiring, reordering or acknowledging a transaction wrongly.
#include "trellara/apply_pipeline.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>

namespace trellara {
namespace {

void Require(bool condition, const char* rule) {
  if (condition) return;
  std::fprintf(stderr, "trellara: internal error: apply pipeline rule broken: %s\n", rule);
  std::abort();
}

}  // namespace

ApplyPipeline::ApplyPipeline(uint64_t start_offset, PipelineLimits limits)
    : limits_(limits), offsets_(start_offset) {
  Require(limits_.batch_transactions_max > 0, "a batch holds at least one transaction");
  Require(limits_.batch_statements_max > kBatchStatementsPerTransaction, "a batch holds at least one statement");
}

void ApplyPipeline::ReadWhole(ReadyTransaction ready, uint64_t offset_after) {
  // No order check on commit LSNs: after a relay crash the log may hold a transaction twice; the
  // second copy is a duplicate (its dedup row decides), not an error here.
  queue_.push_back(PipelineTx{std::move(ready), offset_after, {}, false});
  retain_after_queue_.reset();  // the new transaction's offset covers those records
}

void ApplyPipeline::ReadNothing(uint64_t retain_offset) {
  if (queue_.empty()) {
    offsets_.Done(retain_offset, 0);
    return;
  }
  retain_after_queue_ = retain_offset;
}

Status ApplyPipeline::AppliedAlone(uint64_t offset_after, uint64_t commit_lsn) {
  if (!queue_.empty())
    return MakeError("a chunked transaction (commit " + FormatLsn(commit_lsn) + ") was applied while " +
                     std::to_string(queue_.size()) + " earlier whole transactions were still queued; drain them first");
  offsets_.Done(offset_after, commit_lsn);
  return Status::Ok();
}

PipelineStep ApplyPipeline::Next() const {
  if (in_flight_ > 0) return PipelineStep::Collect;
  if (queue_.empty()) return PipelineStep::Idle;
  if (alone_) return PipelineStep::Alone;
  return PipelineStep::Form;
}

size_t ApplyPipeline::Candidates() const {
  Require(Next() == PipelineStep::Form, "candidates are asked for only while forming a batch");
  return CandidateCount();
}

size_t ApplyPipeline::CandidateCount() const { return std::min(queue_.size(), limits_.batch_transactions_max); }

bool ApplyPipeline::Admit(size_t index, Admission admission, size_t planned_statements) {
  // Forming: nothing in flight and the batch not closed (an Alone verdict closes it).
  Require(in_flight_ == 0 && !closed_, "admission only while a batch is open");
  Require(index == admitted_ && index < CandidateCount(), "candidates are admitted in log order");
  PipelineTx& tx = queue_[index];
  // The first candidate decides the batch's form: grouped unless the transactions of a failed
  // group are still being applied one target transaction each.
  if (index == 0) grouped_ = limits_.group_transactions && ungrouped_remaining_ == 0;
  switch (admission) {
    case Admission::Duplicate:
      tx.duplicate = true;
      admitted_++;
      break;
    case Admission::Alone:
      // It goes alone once everything admitted before it has retired.
      closed_ = true;
      alone_ = true;
      return false;
    case Admission::Apply: {
      // A transaction alone costs its changes and kBatchStatementsPerTransaction. In a grouped batch
      // BEGIN, the registry check, the statement inserting every member's dedup row and COMMIT are
      // sent once for the group, so each further transaction costs its changes only.
      const size_t alone_cost = planned_statements + kBatchStatementsPerTransaction;
      const size_t cost = grouped_ && admitted_statements_ > 0 ? planned_statements : alone_cost;
      if (alone_cost > limits_.batch_statements_max) {
        // Larger than a whole batch: alone, reading each answer as it comes.
        closed_ = true;
        if (admitted_ == 0) alone_ = true;
        return false;
      }
      if (admitted_statements_ + cost > limits_.batch_statements_max) {
        closed_ = true;  // the next batch starts with it
        return false;
      }
      tx.duplicate = false;
      admitted_statements_ += cost;
      admitted_++;
      break;
    }
  }
  if (admitted_ >= CandidateCount()) closed_ = true;
  return !closed_;
}

size_t ApplyPipeline::Seal() {
  Require(in_flight_ == 0 && !queue_.empty(), "a batch is sealed only while it is being formed");
  Require(admitted_ > 0 || alone_, "a sealed batch holds a transaction, or the front goes alone");
  in_flight_ = admitted_;
  if (in_flight_ == 0) grouped_ = false;  // the front goes alone
  admitted_ = 0;
  admitted_statements_ = 0;
  closed_ = false;
  return in_flight_;
}

bool ApplyPipeline::BatchSendsStatements() const {
  for (size_t k = 0; k < in_flight_; k++)
    if (!queue_[k].duplicate) return true;
  return false;
}

Result<CollectOutcome> ApplyPipeline::Collect(const std::vector<bool>& committed) {
  Require(Next() == PipelineStep::Collect, "answers are collected only for a batch in flight");
  Require(committed.size() == in_flight_, "one answer per transaction in flight");
  if (grouped_) return CollectGrouped(committed);
  std::optional<size_t> failed;
  for (size_t k = 0; k < in_flight_; k++) {
    if (queue_[k].duplicate) continue;
    if (!committed[k] && !failed) failed = k;
    if (committed[k] && failed)
      return MakeError(DescribeTransaction(queue_[k].ready.tx) + " is reported committed although " +
                       DescribeTransaction(queue_[*failed].ready.tx) +
                       " before it failed in the same pipeline segment (the server skips everything after a "
                       "failure up to the Sync); nothing of the batch is acknowledged: stop and inspect the target");
  }
  CollectOutcome outcome;
  const size_t retire = failed.value_or(in_flight_);
  for (size_t k = 0; k < retire; k++) outcome.retired.push_back(PopFront(queue_.front().ready.tx.commit_lsn));
  in_flight_ = 0;
  if (failed) {
    outcome.failed = *failed;
    alone_ = true;  // the failed transaction: retried alone; those after it stay queued
  }
  return outcome;
}

Result<CollectOutcome> ApplyPipeline::CollectGrouped(const std::vector<bool>& committed) {
  std::optional<size_t> first_committed, first_failed;
  for (size_t k = 0; k < in_flight_; k++) {
    if (queue_[k].duplicate) continue;
    if (committed[k] && !first_committed) first_committed = k;
    if (!committed[k] && !first_failed) first_failed = k;
  }
  if (first_committed && first_failed)
    return MakeError(DescribeTransaction(queue_[*first_committed].ready.tx) + " is reported committed and " +
                     DescribeTransaction(queue_[*first_failed].ready.tx) +
                     " failed although both were in one target transaction; nothing of the batch is "
                     "acknowledged: stop and inspect the target");
  CollectOutcome outcome;
  const size_t count = in_flight_;
  in_flight_ = 0;
  grouped_ = false;
  if (first_failed) {
    // Nothing of the group committed: the same transactions go again, one target transaction each.
    // A transaction that closed the group as Alone is decided again when its turn comes.
    outcome.failed = *first_failed;
    alone_ = false;
    ungrouped_remaining_ = count;
    return outcome;
  }
  for (size_t k = 0; k < count; k++) outcome.retired.push_back(PopFront(queue_.front().ready.tx.commit_lsn));
  return outcome;
}

PipelineTx ApplyPipeline::RetireAlone() {
  Require(Next() == PipelineStep::Alone, "only the front transaction, handled alone, retires alone");
  alone_ = false;
  return PopFront(queue_.front().ready.tx.commit_lsn);
}

PipelineTx ApplyPipeline::PopFront(uint64_t required_lsn) {
  PipelineTx tx = std::move(queue_.front());
  queue_.pop_front();
  if (ungrouped_remaining_ > 0) ungrouped_remaining_--;
  offsets_.Done(tx.offset_after, required_lsn);
  if (queue_.empty() && retain_after_queue_) {
    offsets_.Done(*retain_after_queue_, 0);
    retain_after_queue_.reset();
  }
  return tx;
}

void ApplyPipeline::DefectTreatEverythingReadAsDone() {
  for (const PipelineTx& tx : queue_) offsets_.Done(tx.offset_after, 0);
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

}  // namespace trellara

namespace trellara {

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
