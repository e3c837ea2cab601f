// apply_snapshot.cpp — the applier's side of the snapshot handoff and of holds (docs/snapshot.md
// "The applier's rule", "Verify and filtered reseed: holds"): the registry cache, the rule applied
// to each change of a table under snapshot (core DecideSnapshotChange decides; this file finds the
// chunk, reads what core needs, and turns the decision into statements and skip records), and the
// stop at a requested hold.
//
// It never applies a change of a chunk whose state it has not read in the same target transaction
// (or cached as copied under the control version that transaction checked), never leaves a change
// out without either the copy holding it or a skip row committed with the transaction, and never
// marks a hold reached while anything before it is uncommitted.
#include <algorithm>
#include <iostream>
#include <thread>

#include "trellara/base/cadence.h"
#include "engine/applier.h"
#include "trellara/base/fault.h"
#include "trellara/apply/snapshot_apply.h"

namespace trellara::cli::apply {
namespace {

constexpr auto kHoldLockPollInterval = cadence::kHoldLockPoll;

const RelationInfo* FindRelation(const std::vector<RelationInfo>& relations, uint32_t oid) {
  for (const auto& r : relations)
    if (r.oid == oid) return &r;
  return nullptr;
}

}  // namespace

// ---- the registry cache ----------------------------------------------------------------

SnapshotTable* SnapshotRegistry::Find(const std::string& schema, const std::string& name) {
  auto it = tables_.find(Key(schema, name));
  return it == tables_.end() ? nullptr : &it->second;
}

std::vector<SnapshotTable*> SnapshotRegistry::CopyingPartitionsOf(const RelationInfo& relation, uint64_t commit_lsn) {
  std::vector<SnapshotTable*> out;
  const std::string name = relation.schema + "." + relation.name;
  for (auto& [key, table] : tables_)
    if (table.CopyingFor(commit_lsn) &&
        std::find(table.partition_ancestors.begin(), table.partition_ancestors.end(), name) !=
            table.partition_ancestors.end())
      out.push_back(&table);
  std::sort(out.begin(), out.end(), [](const SnapshotTable* a, const SnapshotTable* b) { return a->Display() < b->Display(); });
  return out;
}

void SnapshotRegistry::ForgetHold(const std::string& hold_id) {
  holds_.erase(std::remove_if(holds_.begin(), holds_.end(), [&](const RequestedHold& h) { return h.hold_id == hold_id; }),
               holds_.end());
}

void SnapshotRegistry::Reset(uint64_t version) {
  version_ = version;
  loaded_ = false;
  tables_.clear();
  holds_.clear();
}

SnapshotTable& SnapshotRegistry::AddTable(std::string schema, std::string name, std::optional<std::string> key_column) {
  SnapshotTable& t = tables_[Key(schema, name)];
  t.schema = std::move(schema);
  t.name = std::move(name);
  t.key_column = std::move(key_column);
  return t;
}

void SnapshotTable::Learnt() {
  std::vector<ChunkView> chunks;
  chunks.reserve(ranges.size());
  for (const ChunkRange& range : ranges) {
    auto it = views.find(range.chunk_no);
    chunks.push_back(it == views.end() ? ChunkView{} : it->second);
  }
  retired_from = handed_off ? RetiredFrom(chunks) : std::nullopt;
}

void SnapshotRegistry::AddHold(RequestedHold hold) {
  holds_.push_back(std::move(hold));
  std::sort(holds_.begin(), holds_.end(), [](const RequestedHold& a, const RequestedHold& b) { return a.lsn < b.lsn; });
}

// (Re)reads the registry: at session start, on TR010, and when the idle poll sees a new version.
void Applier::LoadRegistry() {
  const uint64_t before = registry_.version();
  const uint64_t progress = session_.LoadSnapshotRegistry(registry_);
  applied_lsn_ = std::max(applied_lsn_, progress);
  pending_locked_.clear();
  if (registry_.version() != before || !registry_.no_tables() || !registry_.holds().empty())
    std::cerr << "apply flow=" << config_.flow_name << " event=registry_loaded version=" << registry_.version()
              << " tables=" << registry_.table_count() << " holds=" << registry_.holds().size() << std::endl;
}

// The idle applier learns of registrations and holds by polling the control version.
void Applier::PollRegistry() {
  if (session_.ReadControlVersion() != registry_.version()) LoadRegistry();
}

// ---- the rule --------------------------------------------------------------------------

bool Applier::UnderSnapshot(const Change& change, const std::vector<RelationInfo>& relations, uint64_t commit_lsn) {
  if (registry_.no_tables()) return false;
  auto registered = [&](uint32_t oid) {
    const RelationInfo* rel = FindRelation(relations, oid);
    if (rel == nullptr) return false;
    const SnapshotTable* table = registry_.Find(*rel);
    // A table registered without chunks yet is not being copied: what is applied to it now is
    // replaced by the copy of each chunk (its step 4 deletes the chunk's range first). A retired
    // table's copy is over for this transaction.
    return table != nullptr && table->CopyingFor(commit_lsn);
  };
  switch (change.op) {
    case Op::Insert:
    case Op::Update:
    case Op::Delete: return registered(change.relation_oid);
    case Op::Truncate:
      // A partitioned table whose partitions are copied counts too: the target truncates them with it.
      return std::any_of(change.truncate.relation_oids.begin(), change.truncate.relation_oids.end(),
                         [&](uint32_t oid) {
                           if (registered(oid)) return true;
                           const RelationInfo* rel = FindRelation(relations, oid);
                           return rel != nullptr && !registry_.CopyingPartitionsOf(*rel, commit_lsn).empty();
                         });
    case Op::Message:
    case Op::Ddl: return false;
  }
  return false;
}

// What the applier knows of a chunk without reading it: copied (cached), pending (read FOR SHARE
// earlier in this same target transaction, so still pending: the copy waits for the lock), or
// unknown.
ChunkView Applier::ViewOf(SnapshotTable& table, int32_t chunk_no) {
  auto it = table.views.find(chunk_no);
  if (it != table.views.end() && it->second.kind == ChunkView::Kind::Copied) return it->second;
  ChunkView view;
  if (pending_locked_.contains({&table, chunk_no})) view.kind = ChunkView::Kind::Pending;
  return view;
}

// Reads the chunk's state FOR SHARE inside the open transaction; a copied chunk is cached (its
// state never changes until the control version moves).
void Applier::ReadChunkState(SnapshotTable& table, int32_t chunk_no) {
  ChunkView view = session_.ReadChunkForShare(table, chunk_no, registry_.version());
  if (view.kind == ChunkView::Kind::Copied) {
    table.views[chunk_no] = std::move(view);
    table.Learnt();
  } else
    pending_locked_.insert({&table, chunk_no});
}

// The decision for one side, with the negative controls (tests only, behind
// --enable-test-defects): defect.snapshot_apply_in_copy applies a change whose transaction the
// chunk's copy already holds; defect.snapshot_skip_after_copy leaves out one the copy does not
// hold. The handoff tests must catch both.
RowAction Applier::WithSnapshotDefects(RowAction action, const std::optional<ChunkView>& old_view,
                                       const std::optional<ChunkView>& new_view, const TxIdentity& tx) {
  auto half = [&](const std::optional<ChunkView>& v) -> std::optional<HalfDecision> {
    if (!v || v->kind != ChunkView::Kind::Copied) return std::nullopt;
    return DecideHalf(*v, tx.xid, tx.commit_lsn);
  };
  const auto old_half = half(old_view);
  const auto new_half = half(new_view);
  const bool in_copy = old_half == HalfDecision::InCopy || new_half == HalfDecision::InCopy;
  const bool after_copy = old_half == HalfDecision::Apply || new_half == HalfDecision::Apply;
  if (in_copy && action != RowAction::Apply && fault::Hit("defect.snapshot_apply_in_copy") == fault::Action::Defect)
    return RowAction::Apply;
  if (after_copy && action != RowAction::Drop && fault::Hit("defect.snapshot_skip_after_copy") == fault::Action::Defect)
    return RowAction::Drop;
  return action;
}

// The snapshot rule for one change of a table under snapshot. `in_transaction`: the one-at-a-time
// path, inside the open target transaction, may read chunk states FOR SHARE; the batch path may
// not and gets `needs_alone` whenever a chunk is not cached as copied or a skip must be recorded.
SnapshotRewrite Applier::RewriteForSnapshot(const Change& change, const std::vector<RelationInfo>& relations,
                                            const TxIdentity& tx, bool in_transaction) {
  SnapshotRewrite out;
  auto failed = [&](QuarantineReason reason, const std::string& relation, const std::string& detail) {
    QuarantineCause cause;
    cause.reason = reason;
    cause.operation = OpName(change.op);
    cause.relation = relation;
    cause.detail = detail;
    out.cause = cause;
    out.plans.clear();
    return out;
  };
  auto plan_of = [&](const Change& c, const std::string& relation) -> bool {
    auto plan = PlanChange(c, relations, session_.Partitioned(), session_.AlwaysIdentity());
    if (!plan) {
      failed(QuarantineReason::PlanError, relation, plan.error().message);
      return false;
    }
    out.plans.push_back(std::move(plan.value()));
    return true;
  };
  // Reads, inside the transaction, every chunk core asked for; false on the batch path.
  auto resolve = [&](SnapshotTable& table, std::initializer_list<std::optional<int32_t>> chunks) {
    if (!in_transaction) {
      out.needs_alone = true;
      return false;
    }
    for (const auto& chunk : chunks)
      if (chunk) ReadChunkState(table, *chunk);
    return true;
  };
  // A read must settle what core asked for; a second NeedState is a bug, not a loop.
  constexpr int kDecideRoundsMax = 3;

  if (change.op == Op::Truncate) {
    // Each truncated table under snapshot: its chunks' key ranges, deleted where the TRUNCATE
    // applies (not in the chunk's copy), skipped where the chunk is pending. The others are
    // truncated as captured.
    Change rest = change;
    rest.truncate.relation_oids.clear();
    std::vector<ChangePlan> range_deletes;
    for (uint32_t oid : change.truncate.relation_oids) {
      const RelationInfo* rel = FindRelation(relations, oid);
      SnapshotTable* table = rel ? registry_.Find(*rel) : nullptr;
      if ((table == nullptr || !table->CopyingFor(tx.commit_lsn)) && rel != nullptr) {
        // A partitioned table with partitions under snapshot (seen: the divergence fuzzer's seed
        // 29, a TRUNCATE of the root before the copy emptied the copied partitions on the target).
        const std::vector<SnapshotTable*> copied = registry_.CopyingPartitionsOf(*rel, tx.commit_lsn);
        if (!copied.empty()) {
          std::vector<HalfDecision> halves;
          std::vector<std::pair<SnapshotTable*, int32_t>> skips;
          std::vector<std::string> names;
          for (SnapshotTable* part : copied) {
            names.push_back(part->Display());
            for (const ChunkRange& range : part->ranges) {
              HalfDecision half = HalfDecision::NeedState;
              for (int round = 0; round < kDecideRoundsMax; round++) {
                half = DecideHalf(ViewOf(*part, range.chunk_no), tx.xid, tx.commit_lsn);
                if (half != HalfDecision::NeedState) break;
                if (!resolve(*part, {range.chunk_no})) return out;
              }
              if (half == HalfDecision::NeedState)
                Fail("internal: the snapshot rule still needs the state of chunk " + std::to_string(range.chunk_no) +
                     " of " + part->Display() + " after reading it (flow " + config_.flow_name + ")");
              if (half == HalfDecision::Skip) skips.push_back({part, range.chunk_no});
              halves.push_back(half);
            }
          }
          switch (DecideRootTruncate(halves)) {
            case RootTruncate::TruncateWhole: rest.truncate.relation_oids.push_back(oid); break;
            case RootTruncate::DeleteOutsideCopied: {
              if (!skips.empty() && !in_transaction) {
                out.needs_alone = true;
                return out;
              }
              for (const auto& skip : skips) out.skips.push_back(skip);
              out.left_out += halves.size() - skips.size();
              auto plan = PlanDeleteOutsidePartitions(*rel, names);
              if (!plan) return failed(QuarantineReason::PlanError, DisplayName(*rel), plan.error().message);
              range_deletes.push_back(std::move(plan.value()));
              break;
            }
            case RootTruncate::Mixed: {
              std::string list;
              for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
              return failed(QuarantineReason::PlanError, DisplayName(*rel),
                            "TRUNCATE of partitioned " + DisplayName(*rel) + " reaches partitions under snapshot (" +
                                list + ") whose chunk copies hold it in part: copy them again after this transaction "
                                "(trellara snapshot --table <partition> --force) and mark it replay-ready");
            }
          }
          continue;
        }
      }
      if (table == nullptr || !table->CopyingFor(tx.commit_lsn)) {
        rest.truncate.relation_oids.push_back(oid);
        continue;
      }
      for (const ChunkRange& range : table->ranges) {
        HalfDecision half = HalfDecision::NeedState;
        ChunkView view;
        for (int round = 0; round < kDecideRoundsMax; round++) {
          view = ViewOf(*table, range.chunk_no);
          half = DecideHalf(view, tx.xid, tx.commit_lsn);
          if (half != HalfDecision::NeedState) break;
          if (!resolve(*table, {range.chunk_no})) return out;
        }
        if (half == HalfDecision::NeedState)
          Fail("internal: the snapshot rule still needs the state of chunk " + std::to_string(range.chunk_no) + " of " +
               table->Display() + " after reading it (flow " + config_.flow_name + ")");
        RowAction action = half == HalfDecision::Apply ? RowAction::Apply : RowAction::Drop;
        if (half != HalfDecision::Skip) action = WithSnapshotDefects(action, view, std::nullopt, tx);
        if (half == HalfDecision::Skip) {
          if (!in_transaction) {
            out.needs_alone = true;
            return out;
          }
          out.skips.push_back({table, range.chunk_no});
          continue;
        }
        if (action == RowAction::Drop) {
          out.left_out++;
          continue;
        }
        auto plan = PlanRangeDelete(*rel, table->key_column.value_or(""), range, session_.PartitionedOnTarget(*rel));
        if (!plan) return failed(QuarantineReason::PlanError, table->Display(), plan.error().message);
        range_deletes.push_back(std::move(plan.value()));
      }
    }
    if (!rest.truncate.relation_oids.empty() && !plan_of(rest, "")) return out;
    for (auto& plan : range_deletes) out.plans.push_back(std::move(plan));
    return out;
  }

  const RelationInfo* rel = FindRelation(relations, change.relation_oid);
  SnapshotTable* table = rel ? registry_.Find(*rel) : nullptr;
  if (table == nullptr || !table->CopyingFor(tx.commit_lsn)) {  // UnderSnapshot said otherwise: plan as usual
    plan_of(change, "");
    return out;
  }
  const std::string display = DisplayName(*rel);
  // The chunk of one side of the change: from the leading key column's value, or the only chunk.
  auto chunk_of = [&](RowSide side) -> Result<int32_t> {
    if (!table->key_column) {
      if (table->ranges.size() != 1)
        return MakeError(table->Display() + " has no chunk key column but " + std::to_string(table->ranges.size()) +
                         " chunks in trellara.snapshot_chunks; rerun trellara snapshot --table " + table->Display() +
                         " --force");
      return table->ranges.front().chunk_no;
    }
    auto index = KeyColumnIndex(*rel, *table->key_column);
    if (!index) return index.error();
    auto key = ChunkKeyOf(change, *rel, *index, side);
    if (!key) return key.error();
    auto chunk = ChunkOf(table->ranges, *key);
    if (!chunk)
      return MakeError("key " + *table->key_column + " = " + std::to_string(*key) + " of " + table->Display() +
                       " falls in no chunk of trellara.snapshot_chunks (the ranges do not cover every key); rerun "
                       "trellara snapshot --table " + table->Display() + " --force");
    return *chunk;
  };
  std::optional<int32_t> old_no, new_no;
  if (change.op == Op::Delete || change.op == Op::Update) {
    auto chunk = chunk_of(RowSide::Old);
    if (!chunk) return failed(QuarantineReason::PlanError, display, chunk.error().message);
    old_no = *chunk;
  }
  if (change.op == Op::Insert || change.op == Op::Update) {
    auto chunk = chunk_of(RowSide::New);
    if (!chunk) return failed(QuarantineReason::PlanError, display, chunk.error().message);
    new_no = *chunk;
  }

  std::optional<ChunkView> old_view, new_view;
  RowDecision decision;
  decision.action = RowAction::NeedState;
  for (int round = 0; round < kDecideRoundsMax; round++) {
    old_view = old_no ? std::optional<ChunkView>(ViewOf(*table, *old_no)) : std::nullopt;
    new_view = new_no ? std::optional<ChunkView>(ViewOf(*table, *new_no)) : std::nullopt;
    decision = DecideSnapshotChange(change.op, tx.xid, tx.commit_lsn, old_view, new_view);
    if (decision.action != RowAction::NeedState) break;
    std::optional<int32_t> need_old = decision.need_old ? old_no : std::nullopt;
    std::optional<int32_t> need_new = decision.need_new && new_no != need_old ? new_no : std::nullopt;
    if (!need_old && !need_new)
      Fail("internal: the snapshot rule needs a chunk state but names no side, for " + DescribeTransaction(tx) +
           " on " + display);
    if (!resolve(*table, {need_old, need_new})) return out;
  }
  if (decision.action == RowAction::NeedState)
    Fail("internal: the snapshot rule still needs a chunk state of " + display + " after reading it, for " +
         DescribeTransaction(tx));
  if (decision.skip_old) out.skips.push_back({table, *old_no});
  if (decision.skip_new && !(decision.skip_old && old_no == new_no)) out.skips.push_back({table, *new_no});
  if (!out.skips.empty() && !in_transaction) {
    out.needs_alone = true;
    out.skips.clear();
    return out;
  }
  const RowAction action = WithSnapshotDefects(decision.action, old_view, new_view, tx);
  switch (action) {
    case RowAction::Apply:
      plan_of(change, display);
      break;
    case RowAction::Drop:
      if (out.skips.empty()) out.left_out++;  // in the copy (a skip is counted as a skip)
      break;
    case RowAction::DeleteOldOnly: {
      auto del = OldRowDelete(change, *rel);
      if (!del) return failed(QuarantineReason::PlanError, display, del.error().message);
      plan_of(*del, display);
      break;
    }
    case RowAction::InsertNewOnly: {
      auto insert = NewRowInsert(change, *rel);
      if (!insert) {
        failed(QuarantineReason::SnapshotPartialUpdate, display, insert.error().message);
        out.cause->operation = "UPDATE";
        return out;
      }
      plan_of(*insert, display);
      break;
    }
    case RowAction::NeedState:
      break;  // settled above
  }
  return out;
}

// ---- holds -----------------------------------------------------------------------------

// Called only when everything read before `next_commit_lsn` (or, with nullopt, everything read)
// is committed and retired. Stops at each requested hold core says is reached: marks it reached
// (its own transaction), waits for the holder to release the hold lock, goes on. Returns false when
// a stop signal arrived while waiting.
bool Applier::StopAtHolds(std::optional<uint64_t> next_commit_lsn) {
  while (!registry_.holds().empty()) {
    const RequestedHold hold = registry_.holds().front();
    HoldFacts facts;
    facts.hold_lsn = hold.lsn;
    facts.applied_lsn = applied_lsn_;
    facts.drained = true;
    facts.next_commit_lsn = next_commit_lsn;
    facts.covered_lsn = covered_lsn_;
    const HoldStep step = DecideHold(facts);
    if (step == HoldStep::NotYet) return true;
    const char* state = step == HoldStep::Passed ? "passed" : "reached";
    if (!session_.MarkHold(hold.hold_id, state)) {
      // Removed or answered meanwhile: the registry moved (or will); read it again.
      registry_.ForgetHold(hold.hold_id);
      LoadRegistry();
      continue;
    }
    registry_.ForgetHold(hold.hold_id);
    if (step == HoldStep::Passed) {
      std::cerr << "apply flow=" << config_.flow_name << " event=hold_passed hold=" << hold.hold_id
                << " lsn=" << FormatLsn(hold.lsn) << " applied_lsn=" << FormatLsn(applied_lsn_) << std::endl;
      continue;
    }
    const std::string held = "held at hold " + hold.hold_id + " (lsn " + FormatLsn(hold.lsn) + ", applied " +
                             FormatLsn(applied_lsn_) + ") until its holder releases the hold lock";
    std::cerr << "apply flow=" << config_.flow_name << " event=held hold=" << hold.hold_id
              << " lsn=" << FormatLsn(hold.lsn) << " applied_lsn=" << FormatLsn(applied_lsn_) << std::endl;
    WriteStateFile("held", held, "");
    // The holder lets go of the hold lock, then deletes its row. The lock alone cannot say that
    // this hold is over: the next holder (a verify started right after a reseed) may take it
    // between two polls, and would then wait for its own hold while we wait for its lock. The row
    // gone says it too. (A holder that died leaves its row, and its lock goes with its session.)
    if (fault::Hit("apply.before_hold_lock_wait") == fault::Action::Error)
      Fail("injected fault apply.before_hold_lock_wait at hold " + hold.hold_id);
    for (;;) {
      if (session_.TryHoldLock()) {
        session_.ReleaseHoldLock();
        break;
      }
      if (!session_.HoldRowExists(hold.hold_id)) break;
      if (StopRequested()) return false;
      std::this_thread::sleep_for(kHoldLockPollInterval);
    }
    std::cerr << "apply flow=" << config_.flow_name << " event=hold_released hold=" << hold.hold_id << std::endl;
    WriteStateFile("running", "", "");
  }
  return true;
}

}  // namespace trellara::cli::apply
