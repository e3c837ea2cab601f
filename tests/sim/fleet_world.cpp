// fleet_world.cpp — fleet fan-in in the deterministic simulator (docs/lake.md "Epochs",
// docs/simulator.md "The fleet world"): N store databases whose flows' logs the fan-in reads into
// one lake in epochs of source commit time, around the REAL core decisions — the epoch's dedup set
// and its recomputed counts (EpochLedger), what an epoch is and what to do with it (DecideEpoch),
// how a catalog commit whose reply was lost is settled (SettlePendingCommit), the publication's
// receipt (PublicationReceipt) and how far the
// current-state views reach (CompleteHorizon). Simulated: the stores (each a log of transactions
// and progress records, some unreachable for a while), the object store (content-addressed files
// that survive everything), the catalog database (the fan-in's durable state and the lake's
// snapshots, committed atomically), the reply of a commit, and process crashes.
//
// Invariants checked after every step: every file the catalog references exists with the content
// its address names; every published epoch holds exactly the transactions of the stores it names
// (none missing, none twice) and counts them so; `complete` names every store, `complete_with_gaps`
// names the missing ones; nothing of an epoch is committed to the catalog after a conflicting
// duplicate of it arrived; the views never reach past an epoch that is not `complete`. At the end:
// every epoch the run could complete is complete (or quarantined, when a conflict was injected).
#include "world.h"

#include <algorithm>
#include <set>

#include "trellara/lake/epoch.h"
#include "trellara/record/envelope.h"
#include "trellara/report/pilot_package.h"

namespace trellara::sim {
namespace {

using lake::Admission;
using lake::EpochAction;
using lake::EpochState;

constexpr uint64_t kMinute = 60 * lake::kMicrosPerSecond;
constexpr uint64_t kEpoch = 60 * kMinute;
constexpr uint64_t kStep = 5 * kMinute;       // the clock moves this much per step
constexpr uint64_t kProgressEvery = 10 * kMinute;

struct StoreRecord {
  uint64_t offset = 0;
  bool transaction = false;  // else a progress record
  lake::StoreTransaction tx;  // transaction: what it is; progress: only commit_time_us
};

struct Store {
  std::string name;
  std::vector<StoreRecord> log;         // written as the clock passes each record's time
  std::pair<uint64_t, uint64_t> down{0, 0};  // unreachable for clock in [first, second)
  uint64_t first_tx_offset = 0;         // its first transaction's offset
  bool replay = false;                  // its log is read again from the start once
  bool alter_on_replay = false;         // ... with one transaction's content changed
  bool replayed = false;
};

// The catalog database: the fan-in's durable state and the lake's snapshots, committed together.
struct Snapshot {
  uint64_t epoch = 0;
  EpochState state = EpochState::Open;
  std::set<std::string> stores;
  std::vector<std::string> files;
  std::string receipt;
  lake::Counts counts;
  int step = 0;  // when it was committed
};
struct Pending {
  std::set<std::string> stores;
  std::vector<std::string> files;
  std::string receipt;
  EpochState state = EpochState::Open;
  lake::Counts counts;
};
struct Catalog {
  std::map<std::string, uint64_t> position;       // store -> next offset read (committed with the ledger)
  std::map<std::string, uint64_t> through_us;     // store -> commit time read through, contiguously
  std::map<uint64_t, lake::EpochLedger> ledger;   // epoch -> dedup set
  std::map<uint64_t, lake::Counts> counter;       // defect lake_count_by_increment only
  std::map<uint64_t, std::string> quarantine;     // epoch -> diagnostics
  std::map<uint64_t, std::set<std::string>> conflicted;  // epoch -> stores with a conflicting duplicate
  std::map<uint64_t, Pending> pending;            // recorded before a catalog commit
  std::vector<Snapshot> snapshots;                // the lake's history (the last per epoch is current)
  uint64_t view_horizon = 0;                      // current-state views reach epochs below it
};

class FleetWorld {
 public:
  explicit FleetWorld(const SimConfig& config) : config_(config), random_(config.seed) {
    std::mt19937_64 shape(config.seed * 31 + 7);
    const int epochs = std::max(1, config.fleet_epochs);
    for (int s = 0; s < config.fleet_stores; ++s) {
      Store store;
      store.name = std::string(s < 9 ? "store-0" : "store-") + std::to_string(s + 1);
      uint64_t offset = 0, lsn = 0x1000000 + static_cast<uint64_t>(s) * 0x100000;
      // Progress records every 10 minutes and one transaction (1 change) per epoch, at a time of
      // its own; the log runs one epoch past the last so every store can pass every end.
      std::vector<uint64_t> tx_times;
      for (int e = 0; e < epochs; ++e)
        tx_times.push_back(static_cast<uint64_t>(e) * kEpoch + 5 * kMinute + (shape() % 40) * kMinute);
      size_t next_tx = 0;
      for (uint64_t t = kProgressEvery; t <= static_cast<uint64_t>(epochs + 1) * kEpoch; t += kProgressEvery) {
        while (next_tx < tx_times.size() && tx_times[next_tx] <= t) {
          if (next_tx == 0) store.first_tx_offset = offset;
          lsn += 0x100 + shape() % 0x400;
          const uint32_t xid = 500 + static_cast<uint32_t>(next_tx) * 10 + static_cast<uint32_t>(s);
          StoreRecord r{offset++, true, {store.name, lsn, xid, tx_times[next_tx], Checksum(store.name, lsn, "v1"), 1}};
          store.log.push_back(r);
          next_tx++;
        }
        lsn += 0x10;
        store.log.push_back({offset++, false, {store.name, lsn, 0, t, "", 0}});
      }
      stores_.push_back(std::move(store));
    }
    // Which stores are down, replayed, altered: the named simulations' shape, or drawn.
    const int n = config.fleet_stores;
    for (int i = 0; i < config.fleet_offline && i < n; ++i) {
      Store& s = stores_[static_cast<size_t>(n - 1 - i)];
      // Down from before the first epoch's transaction until after its gap deadline (+ more);
      // a late store returns after the first publication, else never within the run.
      s.down = {0, config.fleet_late ? kEpoch + 40 * kMinute : UINT64_MAX};
    }
    for (int i = 0; i < config.fleet_replays && i < n; ++i) stores_[static_cast<size_t>(i)].replay = true;
    if (config.fleet_conflict) {
      stores_[0].replay = true;
      stores_[0].alter_on_replay = true;
    }
  }

  SimOutcome Run() {
    for (step_ = 1; step_ <= config_.max_steps; ++step_) {
      const uint64_t pick = random_() % 10;
      if (pick < 6) ReadStep(static_cast<size_t>(random_() % stores_.size()));
      else if (pick < 9) PublishStep();
      else {
        now_us_ += kStep;
        Trace("clock " + Clock(now_us_));
      }
      if (!out_.harness_error.empty()) break;
      CheckInvariants();
      if (Done()) break;
    }
    out_.steps = step_;
    CheckFinal();
    return out_;
  }

 private:
  static std::string Checksum(const std::string& store, uint64_t lsn, const std::string& version) {
    return pilot::Sha256Hex(store + "/" + std::to_string(lsn) + "/" + version);
  }
  static std::string Clock(uint64_t us) { return std::to_string(us / kMinute) + " min"; }
  bool Fire(const std::string& point) {
    return faults_.Fire(point, [this](const std::string& line) { Trace(line); });
  }
  void Trace(const std::string& line) { out_.Trace(step_, line); }
  void Violate(const std::string& invariant, const std::string& message) {
    out_.Violate(step_, config_.seed, invariant, message);
  }
  bool Defect(const std::string& name) { return out_.Defect(config_.defect, name); }
  uint64_t Epochs() const { return static_cast<uint64_t>(std::max(1, config_.fleet_epochs)); }
  bool Down(const Store& s) const { return now_us_ >= s.down.first && now_us_ < s.down.second; }

  void Crash(const std::string& why) {
    Trace("fan-in process crash (" + why + ")");
    unknown_.clear();  // what the process knew only in memory
  }

  // ---- intake: one store's log, contiguously, committed with the dedup sets --------------
  void ReadStep(size_t index) {
    Store& store = stores_[index];
    if (Down(store)) return;
    // A replay: the store's flow delivers its log again from the start (identical, or with one
    // transaction's content altered).
    if (store.replay && !store.replayed && catalog_.position[store.name] > store.first_tx_offset) {
      store.replayed = true;
      replay_from_[store.name] = 0;
      Trace(store.name + " delivers its log again from offset 0" + (store.alter_on_replay ? " (one transaction altered)" : ""));
    }
    uint64_t& next = replay_from_.count(store.name) ? replay_from_[store.name] : catalog_.position[store.name];
    const bool replaying = replay_from_.count(store.name) > 0;
    std::map<uint64_t, lake::StoreTransaction> batch;  // what this intake commit admits
    uint64_t through = catalog_.through_us[store.name];
    uint64_t read_to = next;
    for (int k = 0; k < 3 && read_to < store.log.size(); ++k) {
      const StoreRecord& r = store.log[read_to];
      if (r.tx.commit_time_us > now_us_) break;  // not written yet
      if (r.transaction) {
        lake::StoreTransaction tx = r.tx;
        if (replaying && store.alter_on_replay && !altered_) {
          tx.checksum = Checksum(store.name, tx.commit_lsn, "altered");
          altered_ = true;
        }
        batch.emplace(r.offset, tx);
      }
      through = std::max(through, r.tx.commit_time_us);
      read_to++;
    }
    if (read_to == next) return;
    if (Fire("fanin.crash_before_intake_commit")) return Crash("before the intake commit of " + store.name);
    // One catalog transaction: the admissions and the store's position.
    for (const auto& [offset, tx] : batch) {
      const uint64_t epoch = lake::EpochIndexOf(tx.commit_time_us, kEpoch);
      std::optional<lake::Conflict> conflict;
      const Admission a = catalog_.ledger[epoch].Admit(tx, &conflict);
      if (Defect("lake_count_by_increment") && a != Admission::Conflict) {
        catalog_.counter[epoch].transactions++;
        catalog_.counter[epoch].changes += tx.changes;
      }
      if (a == Admission::Duplicate) {
        out_.duplicates_skipped++;
        Trace(store.name + " offset " + std::to_string(offset) + ": identical replay skipped");
      } else if (a == Admission::Conflict) {
        catalog_.conflicted[epoch].insert(store.name);
        catalog_.quarantine[epoch] = lake::DescribeConflict(*conflict, lake::EpochName(epoch));
        conflict_step_.emplace(epoch, step_);
        Trace(store.name + " offset " + std::to_string(offset) + ": conflicting duplicate: " + catalog_.quarantine[epoch]);
        UpdateViewHorizon();
      }
    }
    if (replaying) {
      next = read_to;
      if (next >= catalog_.position[store.name]) replay_from_.erase(store.name);
    } else {
      next = read_to;
      catalog_.through_us[store.name] = through;
    }
  }

  // ---- publication: decide every epoch, publish what the decision says ---------------------
  void PublishStep() {
    for (uint64_t e = 0; e < Epochs(); ++e) PublishEpoch(e);
    UpdateViewHorizon();
  }

  // The views follow what the catalog holds and what is settled, epoch by epoch. Called after
  // every publication step and in the catalog transaction that quarantines an epoch (as the fan-in
  // records the quarantine and reads the horizon from the same catalog): a quarantined epoch
  // withdraws the views from it at once.
  void UpdateViewHorizon() {
    std::vector<EpochState> states;
    for (uint64_t e = 0; e < Epochs(); ++e) {
      const Snapshot* current = Current(e);
      states.push_back(catalog_.quarantine.count(e)                     ? EpochState::Quarantined
                       : catalog_.pending.count(e) || unknown_.count(e) ? EpochState::PendingCatalogCommit
                       : current != nullptr                             ? current->state
                                                                        : EpochState::Open);
    }
    const uint64_t horizon = lake::CompleteHorizon(states);
    if (horizon != catalog_.view_horizon) {
      catalog_.view_horizon = horizon;
      Trace("current-state views now reach epoch " + std::to_string(horizon));
    }
  }

  void PublishEpoch(uint64_t e) {
    lake::EpochFacts facts;
    facts.index = e;
    facts.now_us = now_us_;
    for (const Store& s : stores_)
      facts.stores.push_back({s.name, catalog_.through_us[s.name], false, catalog_.conflicted[e].count(s.name) > 0});
    facts.quarantined = catalog_.quarantine.count(e) > 0;
    facts.commit_pending = catalog_.pending.count(e) > 0 || unknown_.count(e) > 0;
    if (const Snapshot* current = Current(e)) facts.published = {current->state, current->stores};
    lake::FaninPolicy policy{kEpoch, lake::GapPolicy::PublishWithGaps, 15 * kMinute};
    lake::EpochDecision d = lake::DecideEpoch(facts, policy);
    if (d.action == EpochAction::Quarantine && Defect("lake_publish_on_conflict")) {
      facts.quarantined = false;
      for (auto& s : facts.stores) s.conflict = false;
      d = lake::DecideEpoch(facts, policy);
    }
    if (d.action == EpochAction::Publish && d.state == EpochState::CompleteWithGaps &&
        Defect("lake_complete_ignores_missing"))
      d.state = EpochState::Complete;
    last_decision_[e] = d;
    switch (d.action) {
      case EpochAction::None:
      case EpochAction::Wait:
      case EpochAction::Quarantine:
        return;
      case EpochAction::SettleCommit: {
        // Only the catalog says what happened: its current snapshot of the epoch holds the receipt?
        const std::string receipt = catalog_.pending.count(e) ? catalog_.pending[e].receipt : unknown_[e];
        const Snapshot* current = Current(e);
        const bool holds = current != nullptr && current->receipt == receipt;
        Trace(lake::EpochName(e) + " pending_catalog_commit: the catalog " + (holds ? "holds" : "does not hold") +
              " receipt " + receipt.substr(0, 12));
        unknown_.erase(e);
        if (lake::SettlePendingCommit(holds) == lake::CommitSettlement::Committed) {
          catalog_.pending.erase(e);
          return;
        }
        // Not committed: the same files (already written, found by their addresses) again.
        if (catalog_.pending.count(e)) CommitToCatalog(e, Pending(catalog_.pending[e]), true);
        return;
      }
      case EpochAction::Publish:
        break;
    }
    // The publication: one content-addressed data file per newly included store set, the files
    // of the current snapshot kept, the pending receipt recorded, then one catalog commit.
    Pending p;
    p.stores = d.include;
    p.state = d.state;
    const Snapshot* current = Current(e);
    std::set<std::string> added = d.include;
    if (current != nullptr) {
      p.files = current->files;
      for (const auto& s : current->stores) added.erase(s);
    }
    std::string content;
    for (const auto& [key, tx] : catalog_.ledger[e].held())
      if (added.count(tx.store))
        content += tx.store + "|" + std::to_string(tx.commit_lsn) + "|" + std::to_string(tx.xid) + "|" + tx.checksum + "|" +
                   std::to_string(tx.changes) + "\n";
    const std::string address = pilot::Sha256Hex(content);
    objects_[address] = content;  // an atomic create; the same content lands at the same address
    p.files.push_back(address);
    p.counts = Defect("lake_count_by_increment") ? catalog_.counter[e] : catalog_.ledger[e].CountsOf(d.include);
    p.receipt = lake::PublicationReceipt(e, p.stores, p.files);
    if (Fire("fanin.crash_after_files_before_pending")) {
      Crash("after writing files of " + lake::EpochName(e));  // orphans: written again, same addresses
      return;
    }
    catalog_.pending[e] = p;
    if (Fire("fanin.crash_after_pending_before_commit")) {
      Crash("after recording the pending receipt of " + lake::EpochName(e));
      return;
    }
    CommitToCatalog(e, p, false);
  }

  // One catalog transaction: the snapshot, the pending receipt cleared. Its reply may be lost.
  void CommitToCatalog(uint64_t e, const Pending& p, bool retry) {
    if (Fire("catalog.commit_fails")) {
      Trace("catalog commit of " + lake::EpochName(e) + " refused (nothing committed); the pending receipt stays");
      return;
    }
    catalog_.snapshots.push_back({e, p.state, p.stores, p.files, p.receipt, p.counts, step_});
    catalog_.pending.erase(e);
    Trace(std::string(retry ? "retried " : "") + "catalog commit: " + lake::EpochName(e) + " " +
          std::string(lake::EpochStateName(p.state)) + ", " + lake::DescribeCompleteness(last_decision_[e], stores_.size()) +
          ", " + std::to_string(p.counts.transactions) + " transactions / " + std::to_string(p.counts.changes) + " changes");
    if (Fire("catalog.reply_lost")) {
      unknown_[e] = p.receipt;  // the process does not know: pending_catalog_commit
      Trace("the catalog commit's reply is lost: " + lake::EpochName(e) + " is pending_catalog_commit");
      if (Defect("lake_delete_files_on_unknown_commit")) {
        for (const auto& f : p.files) objects_.erase(f);
        Trace("the fan-in deletes the files of the unknown commit");
      }
    }
  }

  const Snapshot* Current(uint64_t e) const {
    for (auto it = catalog_.snapshots.rbegin(); it != catalog_.snapshots.rend(); ++it)
      if (it->epoch == e) return &*it;
    return nullptr;
  }

  // ---- invariants --------------------------------------------------------------------------
  void CheckInvariants() {
    for (const Snapshot& snap : catalog_.snapshots) {
      std::multiset<std::string> rows;
      for (const auto& f : snap.files) {
        auto object = objects_.find(f);
        if (object == objects_.end() || pilot::Sha256Hex(object->second) != f) {
          Violate("every file the catalog references exists",
                  lake::EpochName(snap.epoch) + " references file " + f.substr(0, 12) + ", which is " +
                      (object == objects_.end() ? "gone" : "not the content its address names"));
          return;
        }
        size_t at = 0;
        while (at < object->second.size()) {
          const size_t eol = object->second.find('\n', at);
          rows.insert(object->second.substr(at, eol - at));
          at = eol + 1;
        }
      }
      // What the stores truly committed in this epoch, for the stores the snapshot names.
      std::multiset<std::string> truth;
      lake::Counts counts;
      for (const Store& s : stores_) {
        if (!snap.stores.count(s.name)) continue;
        for (const StoreRecord& r : s.log)
          if (r.transaction && lake::EpochIndexOf(r.tx.commit_time_us, kEpoch) == snap.epoch) {
            truth.insert(r.tx.store + "|" + std::to_string(r.tx.commit_lsn) + "|" + std::to_string(r.tx.xid) + "|" +
                         r.tx.checksum + "|" + std::to_string(r.tx.changes));
            counts.transactions++;
            counts.changes += r.tx.changes;
          }
      }
      if (rows != truth)
        Violate("a published epoch holds exactly its stores' transactions",
                lake::EpochName(snap.epoch) + " holds " + std::to_string(rows.size()) + " rows for its " +
                    std::to_string(snap.stores.size()) + " stores, which committed " + std::to_string(truth.size()) +
                    " transactions in it (or other content)");
      if (!(snap.counts == counts))
        Violate("published counts are the stores' transactions",
                lake::EpochName(snap.epoch) + " says " + std::to_string(snap.counts.transactions) + " transactions / " +
                    std::to_string(snap.counts.changes) + " changes; its stores committed " +
                    std::to_string(counts.transactions) + " / " + std::to_string(counts.changes));
      const bool every = snap.stores.size() == stores_.size();
      if ((snap.state == EpochState::Complete) != every)
        Violate("complete names every store", lake::EpochName(snap.epoch) + " is " +
                                                  std::string(lake::EpochStateName(snap.state)) + " with " +
                                                  std::to_string(snap.stores.size()) + " of " +
                                                  std::to_string(stores_.size()) + " stores");
    }
    for (const Snapshot& snap : catalog_.snapshots)
      if (auto c = conflict_step_.find(snap.epoch); c != conflict_step_.end() && snap.step > c->second)
        Violate("nothing of a quarantined epoch is published",
                lake::EpochName(snap.epoch) + " was committed to the catalog at step " + std::to_string(snap.step) +
                    ", after a conflicting duplicate of it arrived at step " + std::to_string(c->second));
    for (uint64_t e = 0; e < catalog_.view_horizon; ++e) {
      const Snapshot* current = Current(e);
      if (current == nullptr || current->state != EpochState::Complete || catalog_.quarantine.count(e))
        Violate("views reach only complete epochs",
                "the current-state views reach past " + lake::EpochName(e) + ", which is not complete");
    }
  }

  bool Done() const {
    if (now_us_ < (Epochs() + 1) * kEpoch) return false;  // the clock runs past the last epoch's end
    for (uint64_t e = 0; e < Epochs(); ++e) {
      if (catalog_.quarantine.count(e)) continue;
      if (catalog_.pending.count(e) || unknown_.count(e)) return false;
      const Snapshot* current = Current(e);
      if (current == nullptr) return false;
      if (current->state != EpochState::Complete && AllStoresCanReturn()) return false;
    }
    for (const Store& s : stores_)
      if (s.replay && !s.replayed && s.down.second != UINT64_MAX) return false;
    return true;
  }
  bool AllStoresCanReturn() const {
    for (const Store& s : stores_)
      if (s.down.second == UINT64_MAX) return false;
    return true;
  }

  void CheckFinal() {
    int applied = 0;
    for (uint64_t e = 0; e < Epochs(); ++e) {
      const Snapshot* current = Current(e);
      if (conflict_step_.count(e)) {
        if (!catalog_.quarantine.count(e))
          Violate("a conflict quarantines its epoch", lake::EpochName(e) + " saw a conflicting duplicate and is not quarantined");
        Trace("final: " + lake::EpochName(e) + " quarantined, " + DescribeFinal(e) + ": " + catalog_.quarantine[e]);
        continue;
      }
      if (current == nullptr) {
        Violate("every epoch is published", lake::EpochName(e) + " was never published within " +
                                               std::to_string(config_.max_steps) + " steps");
        continue;
      }
      if (AllStoresCanReturn() && current->state != EpochState::Complete)
        Violate("every epoch is published", lake::EpochName(e) + " ended " +
                                               std::string(lake::EpochStateName(current->state)) +
                                               " though every store returned");
      applied += static_cast<int>(current->counts.transactions);
      Trace("final: " + lake::EpochName(e) + " " + std::string(lake::EpochStateName(current->state)) + ", " +
            DescribeFinal(e) + ", " + std::to_string(current->counts.transactions) + " transactions / " +
            std::to_string(current->counts.changes) + " changes, " + std::to_string(out_.duplicates_skipped) +
            " replays skipped");
    }
    out_.applied = applied;
    out_.quarantined = static_cast<int>(catalog_.quarantine.size());
  }

  std::string DescribeFinal(uint64_t e) {
    auto it = last_decision_.find(e);
    return it == last_decision_.end() ? "undecided" : lake::DescribeCompleteness(it->second, stores_.size());
  }

  SimConfig config_;
  std::mt19937_64 random_;
  SimOutcome out_;
  FaultScheduler faults_{config_.faults, random_, out_};
  int step_ = 0;
  uint64_t now_us_ = 0;
  std::vector<Store> stores_;
  Catalog catalog_;                                   // survives every crash
  std::map<std::string, std::string> objects_;        // the object store: address -> content
  std::map<std::string, uint64_t> replay_from_;       // store -> where its replay reads next
  std::map<uint64_t, std::string> unknown_;           // epoch -> receipt of a commit whose reply was lost
  std::map<uint64_t, lake::EpochDecision> last_decision_;
  bool altered_ = false;
  std::map<uint64_t, int> conflict_step_;             // epoch -> step its first conflicting duplicate arrived
};

}  // namespace

SimOutcome RunFleetSimulation(const SimConfig& config) { return FleetWorld(config).Run(); }

}  // namespace trellara::sim
