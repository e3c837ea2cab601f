// epoch.cpp — fleet fan-in's epoch decisions (epoch.h, docs/lake.md "Epochs").
#include "trellara/lake/epoch.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "trellara/record/envelope.h"
#include "trellara/report/pilot_package.h"  // Sha256Hex

namespace trellara::lake {

Result<uint64_t> ParseDurationMicros(std::string_view text) {
  auto bad = [&] {
    return MakeError("duration \"" + std::string(text) +
                     "\" is not a positive whole number followed by one unit: s, m, h or d (for example \"1h\")");
  };
  if (text.size() < 2) return bad();
  uint64_t unit = 0;
  switch (text.back()) {
    case 's': unit = 1; break;
    case 'm': unit = 60; break;
    case 'h': unit = 3600; break;
    case 'd': unit = 86400; break;
    default: return bad();
  }
  uint64_t value = 0;
  for (char c : text.substr(0, text.size() - 1)) {
    if (c < '0' || c > '9') return bad();
    value = value * 10 + static_cast<uint64_t>(c - '0');
    if (value > 100000000) return MakeError("duration \"" + std::string(text) + "\" is longer than 100000000 units");
  }
  if (value == 0) return bad();
  return value * unit * kMicrosPerSecond;
}

uint64_t EpochIndexOf(uint64_t commit_time_us, uint64_t epoch_length_us) { return commit_time_us / epoch_length_us; }

std::string EpochName(uint64_t index) {
  char name[32];
  std::snprintf(name, sizeof name, "epoch-%016" PRIx64, index);
  return name;
}

std::string DescribeConflict(const Conflict& conflict, const std::string& epoch_name) {
  return "store " + conflict.store + " transaction " + std::to_string(conflict.xid) + " at commit LSN " +
         FormatLsn(conflict.commit_lsn) + " arrived again with checksum " + conflict.arrived_checksum + "; " +
         epoch_name + " holds it with checksum " + conflict.held_checksum;
}

Admission EpochLedger::Admit(const StoreTransaction& tx, std::optional<Conflict>* conflict) {
  auto [it, added] = held_.try_emplace(std::make_tuple(tx.store, tx.commit_lsn, tx.xid), tx);
  if (added) return Admission::Added;
  if (it->second.checksum == tx.checksum && it->second.changes == tx.changes) return Admission::Duplicate;
  if (conflict) *conflict = Conflict{tx.store, tx.commit_lsn, tx.xid, it->second.checksum, tx.checksum};
  return Admission::Conflict;
}

Counts EpochLedger::CountsOf(const std::string& store) const { return CountsOf(std::set<std::string>{store}); }

Counts EpochLedger::CountsOf(const std::set<std::string>& stores) const {
  Counts counts;
  for (const auto& [key, tx] : held_) {
    if (!stores.count(tx.store)) continue;
    counts.transactions++;
    counts.changes += tx.changes;
  }
  return counts;
}

std::set<std::string> EpochLedger::Stores() const {
  std::set<std::string> stores;
  for (const auto& [key, tx] : held_) stores.insert(tx.store);
  return stores;
}

std::string_view EpochStateName(EpochState state) {
  switch (state) {
    case EpochState::Open: return "open";
    case EpochState::Waiting: return "waiting";
    case EpochState::CompleteWithGaps: return "complete_with_gaps";
    case EpochState::Complete: return "complete";
    case EpochState::PendingCatalogCommit: return "pending_catalog_commit";
    case EpochState::Quarantined: return "quarantined";
  }
  return "unknown";
}

Result<GapPolicy> ParseGapPolicy(std::string_view text) {
  if (text == "wait") return GapPolicy::Wait;
  if (text == "publish_with_gaps") return GapPolicy::PublishWithGaps;
  return MakeError("gap policy \"" + std::string(text) + "\" is not one of: wait, publish_with_gaps");
}

EpochDecision DecideEpoch(const EpochFacts& facts, const FaninPolicy& policy) {
  EpochDecision d;
  const uint64_t end_us = (facts.index + 1) * policy.epoch_length_us;
  for (const StoreFacts& store : facts.stores) {
    if (store.conflict)
      d.quarantined.push_back(store.store);
    else if (!store.hole && store.contiguous_through_us >= end_us)
      d.complete.push_back(store.store);
    else
      d.missing.push_back(store.store);
  }
  const std::string name = EpochName(facts.index);
  if (facts.quarantined || !d.quarantined.empty()) {
    d.action = EpochAction::Quarantine;
    d.state = EpochState::Quarantined;
    std::string stores;
    for (const auto& s : d.quarantined) stores += (stores.empty() ? "" : ", ") + s;
    d.reason = name + " holds a conflicting duplicate" + (stores.empty() ? "" : " of store(s) " + stores) +
               ": nothing of it is published; compare the stores' logs (trellara lake fanin verify) and resolve it";
    return d;
  }
  if (facts.commit_pending) {
    d.action = EpochAction::SettleCommit;
    d.state = EpochState::PendingCatalogCommit;
    d.reason = "a catalog commit of " + name + " has an unknown outcome: the catalog is read for its receipt first";
    return d;
  }
  const std::set<std::string> complete(d.complete.begin(), d.complete.end());
  const bool all = d.missing.empty();
  if (facts.published.state == EpochState::Complete) {
    d.action = EpochAction::None;
    d.state = EpochState::Complete;
    return d;
  }
  if (facts.published.state == EpochState::CompleteWithGaps) {
    // Published with gaps: stores that completed since are appended to the same epoch.
    d.state = all ? EpochState::Complete : EpochState::CompleteWithGaps;
    if (complete != facts.published.stores &&
        std::includes(complete.begin(), complete.end(), facts.published.stores.begin(), facts.published.stores.end())) {
      d.action = EpochAction::Publish;
      d.include = complete;
      d.reason = "late store(s) completed " + name;
    } else {
      d.action = EpochAction::Wait;
      d.state = EpochState::CompleteWithGaps;
      d.reason = name + " is published without " + std::to_string(d.missing.size()) + " store(s); waiting for them";
    }
    return d;
  }
  if (facts.now_us < end_us && !all) {
    d.action = EpochAction::Wait;
    d.state = EpochState::Open;
    d.reason = name + " has not ended";
    return d;
  }
  if (all) {
    d.action = EpochAction::Publish;
    d.state = EpochState::Complete;
    d.include = complete;
    return d;
  }
  std::string missing;
  for (const auto& s : d.missing) missing += (missing.empty() ? "" : ", ") + s;
  if (policy.gaps == GapPolicy::PublishWithGaps && facts.now_us >= end_us + policy.gap_deadline_us) {
    d.action = EpochAction::Publish;
    d.state = EpochState::CompleteWithGaps;
    d.include = complete;
    d.reason = "the gap deadline passed: published without " + missing;
    return d;
  }
  d.action = EpochAction::Wait;
  d.state = EpochState::Waiting;
  d.reason = name + " waits for store(s) " + missing +
             (policy.gaps == GapPolicy::PublishWithGaps ? " until the gap deadline" : " (gap policy wait)");
  return d;
}

CommitSettlement SettlePendingCommit(bool catalog_holds_receipt) {
  return catalog_holds_receipt ? CommitSettlement::Committed : CommitSettlement::CommitAgain;
}

bool MayDeleteDataFile(bool referenced_by_catalog, bool commit_pending) {
  return !referenced_by_catalog && !commit_pending;
}

std::string PublicationReceipt(uint64_t epoch_index, const std::set<std::string>& stores,
                               const std::vector<std::string>& file_addresses) {
  std::vector<std::string> files = file_addresses;
  std::sort(files.begin(), files.end());
  std::string text = "trellara-lake-receipt v1\n" + EpochName(epoch_index) + "\n";
  for (const auto& s : stores) text += "store " + s + "\n";
  for (const auto& f : files) text += "file " + f + "\n";
  return pilot::Sha256Hex(text);
}

uint64_t CompleteHorizon(const std::vector<EpochState>& states) {
  uint64_t horizon = 0;
  while (horizon < states.size() && states[horizon] == EpochState::Complete) horizon++;
  return horizon;
}

std::string DescribeCompleteness(const EpochDecision& decision, size_t fleet_size) {
  return std::to_string(decision.complete.size()) + "/" + std::to_string(fleet_size) + " complete, " +
         std::to_string(decision.missing.size()) + " missing, " + std::to_string(decision.quarantined.size()) +
         " quarantined";
}

}  // namespace trellara::lake
