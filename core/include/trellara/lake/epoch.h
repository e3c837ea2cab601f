// epoch.h — fleet fan-in's epoch rules, as pure decisions (docs/lake.md "Epochs"): many store
// databases' flows feed one lake; an epoch is a window of source commit time; this file decides
// what an epoch holds, which stores it waits for, when it is published and in which state, what a
// replayed or altered transaction is, and how a catalog commit whose reply was lost is settled.
// The adapter (`trellara lake fanin run`) and the simulator (tests/sim/fleet_world.cpp) gather the
// facts and carry out the decisions; nothing here reads a log, a file or a catalog.
//
// The rules:
//   - A store is complete for an epoch when the commit time its log is contiguous through (every
//     offset from its first, nothing missing) has passed the epoch's end. A store with no
//     transaction in the epoch completes it too: its progress records move its time on.
//   - Every counted figure is recomputed from the epoch's dedup set (store, commit LSN, xid ->
//     checksum, changes), never incremented: a replayed transaction changes nothing.
//   - The same transaction (store, commit LSN, xid) arriving with another checksum is a conflict:
//     the epoch is quarantined, naming the store, the LSN and both checksums, and nothing of it is
//     published after that (no ambiguous current-state or history view).
//   - All stores complete: published `complete`. Not all, policy `publish_with_gaps`, and the
//     deadline after the epoch's end passed: published `complete_with_gaps` naming the missing
//     stores. A store completing later is appended to the same epoch; when none is missing the
//     epoch becomes `complete`. Policy `wait`: never published with gaps.
//   - A publication is: data files written (content-addressed), their receipt recorded as pending,
//     then one catalog commit. A commit whose reply is lost leaves the epoch
//     `pending_catalog_commit`; it is settled only by reading the catalog — the receipt there:
//     committed; not there: the same files committed again. A file whose commit state is unknown is
//     never deleted.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "trellara/base/result.h"

namespace trellara::lake {

inline constexpr uint64_t kMicrosPerSecond = 1000000;

// "45s", "15m", "1h", "2d" (a positive integer and one unit). An error names the text and the
// accepted forms.
Result<uint64_t> ParseDurationMicros(std::string_view text);

// The epoch a commit time falls in (epochs are [index * length, (index + 1) * length)).
uint64_t EpochIndexOf(uint64_t commit_time_us, uint64_t epoch_length_us);
// "epoch-" and the index as 16 hex digits: the name in the catalog, the plan and the diagnostics.
std::string EpochName(uint64_t index);

// One source transaction of a store as the fan-in reads it from the store's log.
struct StoreTransaction {
  std::string store;
  uint64_t commit_lsn = 0;
  uint32_t xid = 0;
  uint64_t commit_time_us = 0;
  std::string checksum;  // the record's checksum, hex
  uint64_t changes = 0;
};

enum class Admission { Added, Duplicate, Conflict };

// A transaction delivered again with other content than the epoch holds.
struct Conflict {
  std::string store;
  uint64_t commit_lsn = 0;
  uint32_t xid = 0;
  std::string held_checksum;
  std::string arrived_checksum;
};
// "store S transaction X at commit LSN L arrived again with checksum B, the epoch holds A".
std::string DescribeConflict(const Conflict& conflict, const std::string& epoch_name);

struct Counts {
  uint64_t transactions = 0;
  uint64_t changes = 0;
  bool operator==(const Counts&) const = default;
};

// The dedup set of one epoch. Its counts are always recomputed from what it holds.
class EpochLedger {
 public:
  // Added: new; Duplicate: the same transaction with the same checksum (nothing changes);
  // Conflict: the same transaction with another checksum (`conflict` says which; the held one stays).
  Admission Admit(const StoreTransaction& tx, std::optional<Conflict>* conflict);
  Counts CountsOf(const std::string& store) const;
  Counts CountsOf(const std::set<std::string>& stores) const;
  std::set<std::string> Stores() const;  // stores with at least one transaction held
  const std::map<std::tuple<std::string, uint64_t, uint32_t>, StoreTransaction>& held() const { return held_; }

 private:
  std::map<std::tuple<std::string, uint64_t, uint32_t>, StoreTransaction> held_;
};

enum class EpochState {
  Open,                  // the epoch's window has not ended
  Waiting,               // ended; waits for stores (and, with gaps allowed, for the deadline)
  CompleteWithGaps,      // published without the stores it names
  Complete,              // published with every store
  PendingCatalogCommit,  // a catalog commit's outcome is unknown
  Quarantined,           // a conflicting duplicate: never published past this
};
std::string_view EpochStateName(EpochState state);

enum class GapPolicy { Wait, PublishWithGaps };
// "wait" | "publish_with_gaps"; an error names the text and the accepted values.
Result<GapPolicy> ParseGapPolicy(std::string_view text);

struct FaninPolicy {
  uint64_t epoch_length_us = 3600 * kMicrosPerSecond;
  GapPolicy gaps = GapPolicy::PublishWithGaps;
  uint64_t gap_deadline_us = 900 * kMicrosPerSecond;  // after the epoch's end
};

// What the fan-in knows of one store for one epoch.
struct StoreFacts {
  std::string store;
  uint64_t contiguous_through_us = 0;  // commit time the store's log is read through without a hole
  bool hole = false;                   // offsets are missing before that point (never complete then)
  bool conflict = false;               // a conflicting duplicate of this store in this epoch
};

// What the catalog holds for one epoch (after the last confirmed commit).
struct PublishedEpoch {
  EpochState state = EpochState::Open;  // Open: nothing published; else CompleteWithGaps / Complete
  std::set<std::string> stores;         // stores its snapshot holds
};

struct EpochFacts {
  uint64_t index = 0;
  std::vector<StoreFacts> stores;  // every store of the fleet, in the configuration's order
  PublishedEpoch published;
  bool commit_pending = false;     // a commit of this epoch has an unknown outcome
  bool quarantined = false;        // recorded before: stays so until an operator resolves it
  uint64_t now_us = 0;             // the fan-in's clock (deadline only; never used for completeness)
};

enum class EpochAction {
  Wait,            // nothing to publish yet (reason says what for)
  Publish,         // commit the epoch's files for `include` in state `state`
  Quarantine,      // record the conflict; publish nothing of the epoch
  SettleCommit,    // read the catalog for the pending commit's receipt first
  None,            // published as complete; nothing more to do
};

struct EpochDecision {
  EpochAction action = EpochAction::Wait;
  EpochState state = EpochState::Open;  // what the epoch is (after the action)
  std::vector<std::string> complete;    // stores whose evidence is complete
  std::vector<std::string> missing;     // stores not complete (named in a complete_with_gaps snapshot)
  std::vector<std::string> quarantined; // stores with a conflicting duplicate
  std::set<std::string> include;        // Publish: the stores the snapshot holds (complete ones only)
  std::string reason;                   // in words: what it waits for, why it is quarantined
};

EpochDecision DecideEpoch(const EpochFacts& facts, const FaninPolicy& policy);

// Settling a commit whose reply was lost: only the catalog says what happened.
enum class CommitSettlement {
  Committed,    // the catalog holds the receipt: the publication happened
  CommitAgain,  // it does not: commit the same (already written) files again
};
CommitSettlement SettlePendingCommit(bool catalog_holds_receipt);

// Whether a written data file may be deleted: only when no commit that could reference it is
// pending and the catalog does not reference it.
bool MayDeleteDataFile(bool referenced_by_catalog, bool commit_pending);

// The receipt of one publication: the epoch, the stores it holds, and its files (content
// addresses), in a canonical order — the same publication always has the same receipt, so a
// retried commit finds the files it wrote before.
std::string PublicationReceipt(uint64_t epoch_index, const std::set<std::string>& stores,
                               const std::vector<std::string>& file_addresses);

// Current-state and history views cover the epochs before the returned index: the first epochs,
// in order, every one published `complete` (a gap, a quarantine, a pending commit or an epoch not
// yet published ends them). `states` lists the epochs from the first.
uint64_t CompleteHorizon(const std::vector<EpochState>& states);

// "9/12 complete, 3 missing, 0 quarantined": the plan's and the snapshot summary's line.
std::string DescribeCompleteness(const EpochDecision& decision, size_t fleet_size);

}  // namespace trellara::lake
