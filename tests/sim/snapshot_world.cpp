// snapshot_world.cpp — the simulator's snapshot world (docs/simulator.md "Snapshot handoff"): the
// initial copy of two tables by key-range chunks beside a live stream, with the REAL core decisions
// of snapshot.h — PlanChunkRanges / ChunkOf (chunks), ParseSourceSnapshot-shaped SourceSnapshot and
// VisibleIn (the copy's boundary), DecideSnapshotChange (the applier's rule for a change of a table
// under snapshot) and CheckSnapshotTransition (every run and table state change) — against a
// simulated MVCC source (transactions whose commit is logged before it becomes visible, row locks,
// aborts), a log, an applier with dedup rows and a consumer offset, and a snapshot process that can
// fail or be killed at a chunk and is rerun with the same run id.
//
// Modelled as docs/snapshot.md specifies the product: a chunk copy is one target transaction (the
// chunk row FOR UPDATE excludes the applier's transactions touching the chunk; its snapshot must
// see every transaction the applier left out for the chunk, else it waits; delete the key range,
// copy, mark copied, drop the skips — all or nothing); a copy error marks the run and the table
// failed_recoverable, a kill leaves them copying; a table is copied only when each of its chunks is
// copied under the table's current contract (a DDL during the copy makes the table failed and its
// copy is retried under the new contract, by a re-registration of its chunks); the handoff
// (run and tables handoff_ready) is recorded only when every table is copied.
//
// One assumption the simulator makes and states: a table is (re-)registered only when no source
// transaction is committed-but-not-yet-visible (the product's reasoning in docs/snapshot.md, "a T
// applied before the table was registered ... committed before the registration, so before S").
#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "trellara/apply/snapshot.h"
#include "world.h"

namespace trellara::sim {

namespace {

constexpr int kTables = 2;
constexpr int64_t kKeys = 24;        // keys 0..23 per table
constexpr uint64_t kChunkRows = 6;   // about 4 chunks per table

struct Version {
  uint32_t xid;
  std::optional<int> value;  // nullopt: deleted
};

struct RowOp {
  int table = 0;
  Op op = Op::Insert;
  std::optional<int64_t> old_key, new_key;
  int value = 0;
};

struct LoggedTx {
  uint32_t xid;
  std::vector<RowOp> ops;
};

struct Chunk {
  bool copied = false;
  SourceSnapshot snapshot;
  std::set<uint32_t> skips;
  int contract = 0;   // the table's contract version it was copied under
  int copies = 0;     // copies since the chunk was registered
};

struct Table {
  SnapshotState state = SnapshotState::Pending;
  int contract = 0;   // the source's current definition (bumped by DDL)
  std::vector<ChunkRange> ranges;
  std::vector<Chunk> chunks;
  int registration = 0;
};

class SnapshotWorld {
 public:
  explicit SnapshotWorld(const SimConfig& config) : config_(config), rng_(config.seed) {
    for (int t = 0; t < kTables; ++t) {
      Table& table = tables_[t];
      table.ranges = PlanChunkRanges(0, kKeys - 1, kKeys, kChunkRows);
      table.chunks.assign(table.ranges.size(), Chunk{});
      // Rows written before the flow existed: visible to everyone, never in the log.
      for (int64_t k = 0; k < kKeys; k += 2) history_[{t, k}].push_back(Version{3, static_cast<int>(k)});
    }
  }

  SimOutcome Run();

 private:
  // ---- scheduler and evidence ----
  bool Fire(const std::string& point) {
    return faults_.Fire(point, [this](const std::string& line) { Trace(line); });
  }
  void Trace(const std::string& line) { out_.Trace(step_, line); }
  void Violate(const std::string& invariant, const std::string& message) {
    out_.Violate(step_, config_.seed, invariant, message);
  }
  bool Defect(const std::string& name) { return out_.Defect(config_.defect, name); }
  static std::string Where(int t, int64_t k) { return "t" + std::to_string(t) + " key " + std::to_string(k); }

  // Every run/table state change goes through the product's rule.
  void Move(SnapshotState& state, SnapshotState to, bool force, const std::string& what) {
    Status ok = CheckSnapshotTransition(state, to, force, what);
    if (!ok.ok()) {
      Violate("snapshot_state_transitions_allowed", ok.error().message);
      return;
    }
    if (state != to) Trace(what + ": " + SnapshotStateName(state) + " -> " + SnapshotStateName(to));
    state = to;
  }

  // ---- source ----
  bool Visible(uint32_t xid) const { return !running_.count(xid) && !committed_invisible_.count(xid); }
  std::optional<int> Current(int t, int64_t k) const {
    auto it = history_.find({t, k});
    if (it == history_.end() || it->second.empty()) return std::nullopt;
    return it->second.back().value;
  }
  bool Locked(int t, int64_t k) const {
    for (const auto& [x, keys] : locks_)
      if (keys.count({t, k})) return true;
    auto it = history_.find({t, k});
    return it != history_.end() && !it->second.empty() && !Visible(it->second.back().xid);
  }
  SourceSnapshot TakeSnapshot() const {
    SourceSnapshot s;
    s.xmax = next_xid_;
    std::set<uint32_t> in_progress = running_;
    in_progress.insert(committed_invisible_.begin(), committed_invisible_.end());
    s.xmin = in_progress.empty() ? next_xid_ : *in_progress.begin();
    for (uint32_t x : in_progress) s.xip.push_back(x);
    return s;
  }
  std::optional<int> ReadIn(const SourceSnapshot& s, int t, int64_t k) const {
    auto it = history_.find({t, k});
    if (it == history_.end()) return std::nullopt;
    for (auto v = it->second.rbegin(); v != it->second.rend(); ++v)
      if (VisibleIn(s, v->xid)) return v->value;
    return std::nullopt;
  }
  void StartTx();
  void CommitTx();
  void MakeVisible() {
    if (committed_invisible_.empty()) return;
    auto it = committed_invisible_.begin();
    std::advance(it, static_cast<long>(rng_() % committed_invisible_.size()));
    committed_invisible_.erase(it);
  }

  // ---- applier ----
  int32_t ChunkNo(int t, int64_t k) const { return *ChunkOf(tables_[t].ranges, k); }
  ChunkView View(int t, int32_t c) {
    auto cached = cache_.find({t, c});
    if (cached != cache_.end()) return cached->second;
    auto it = read_in_tx_.find({t, c});
    return it == read_in_tx_.end() ? ChunkView{} : it->second;
  }
  void ReadState(int t, int32_t c) {  // FOR SHARE of the chunk row
    const Chunk& chunk = tables_[t].chunks[static_cast<size_t>(c)];
    if (chunk.copied) cache_[{t, c}] = ChunkView{ChunkView::Kind::Copied, chunk.snapshot};
    else read_in_tx_[{t, c}] = ChunkView{ChunkView::Kind::Pending, {}};
  }
  void ApplyNext();
  void ApplierCrash(const std::string& why) {
    Trace("applier crash (" + why + "): restarts from consumer offset " + std::to_string(consumer_offset_));
    read_position_ = consumer_offset_;
    cache_.clear();
  }

  // ---- snapshot process ----
  bool AllTablesCopied() const {
    for (const auto& table : tables_)
      if (table.state != SnapshotState::Copied && table.state != SnapshotState::HandoffReady) return false;
    return true;
  }
  void RegisterTable(int t, bool force);
  void CopyStep();
  bool CopyChunk(int t, int32_t c);
  void CompleteTable(int t);
  void RecordHandoff();
  void RerunAfterHandoff();

  void CheckStep();
  void CheckEnd();

  const SimConfig& config_;
  std::mt19937_64 rng_;
  SimOutcome out_;
  int step_ = 0;
  FaultScheduler faults_{config_.faults, rng_, out_};

  uint32_t next_xid_ = 10;
  std::set<uint32_t> running_, committed_invisible_;
  std::map<uint32_t, std::set<std::pair<int, int64_t>>> locks_;
  std::map<std::pair<int, int64_t>, std::vector<Version>> history_;
  std::map<uint32_t, std::vector<RowOp>> pending_ops_;
  std::map<uint32_t, std::map<std::pair<int, int64_t>, std::optional<int>>> pending_versions_;
  std::vector<LoggedTx> log_;

  size_t read_position_ = 0;   // next log entry the applier reads
  size_t consumer_offset_ = 0; // durable: where a restarted applier reads from
  std::set<uint32_t> dedup_;   // the target's dedup rows (committed with the changes)
  std::map<std::pair<int, int32_t>, ChunkView> cache_;  // copied chunks, for good (until re-registration)
  std::map<std::pair<int, int32_t>, ChunkView> read_in_tx_;
  std::map<std::pair<int, int64_t>, int> target_;

  Table tables_[kTables];
  SnapshotState run_state_ = SnapshotState::Pending;
  bool snapshot_running_ = false;  // a snapshot process is alive
  bool snapshot_done_ = false;     // handoff recorded
  bool rerun_done_ = false;
};

void SnapshotWorld::StartTx() {
  const uint32_t xid = next_xid_++;
  running_.insert(xid);
  std::vector<RowOp> ops;
  std::map<std::pair<int, int64_t>, std::optional<int>> mine;
  const int n = 1 + static_cast<int>(rng_() % 3);
  for (int i = 0; i < n; i++) {
    const int t = static_cast<int>(rng_() % kTables);
    const int64_t k = static_cast<int64_t>(rng_() % kKeys);
    if (Locked(t, k) || mine.count({t, k})) continue;
    const std::optional<int> cur = Current(t, k);
    const int value = static_cast<int>(rng_() % 1000);
    if (!cur) {
      ops.push_back(RowOp{t, Op::Insert, std::nullopt, k, value});
      mine[{t, k}] = value;
    } else if (rng_() % 4 == 0) {
      ops.push_back(RowOp{t, Op::Delete, k, std::nullopt, 0});
      mine[{t, k}] = std::nullopt;
    } else if (rng_() % 3 == 0) {
      const int64_t k2 = static_cast<int64_t>(rng_() % kKeys);
      if (k2 == k || Locked(t, k2) || mine.count({t, k2}) || Current(t, k2)) continue;
      ops.push_back(RowOp{t, Op::Update, k, k2, value});
      mine[{t, k}] = std::nullopt;
      mine[{t, k2}] = value;
    } else {
      ops.push_back(RowOp{t, Op::Update, k, k, value});
      mine[{t, k}] = value;
    }
  }
  for (const auto& [key, v] : mine) locks_[xid].insert(key);
  pending_ops_[xid] = ops;
  pending_versions_[xid] = mine;
}

void SnapshotWorld::CommitTx() {
  if (running_.empty()) return;
  auto it = running_.begin();
  std::advance(it, static_cast<long>(rng_() % running_.size()));
  const uint32_t xid = *it;
  running_.erase(it);
  locks_.erase(xid);
  if (rng_() % 5 == 0) return;  // rolled back: nothing logged, nothing installed
  for (const auto& [key, v] : pending_versions_[xid]) history_[key].push_back(Version{xid, v});
  committed_invisible_.insert(xid);  // the commit record is logged; visibility comes later
  if (!pending_ops_[xid].empty()) log_.push_back(LoggedTx{xid, pending_ops_[xid]});
}

// One logged transaction, in one target transaction: its changes (through the applier's rule while
// the table is under snapshot), its skips and its dedup row commit together.
void SnapshotWorld::ApplyNext() {
  if (read_position_ >= log_.size()) return;
  const LoggedTx& tx = log_[read_position_++];
  if (dedup_.count(tx.xid)) {
    Trace("applier: xid " + std::to_string(tx.xid) + " is a duplicate (dedup row), skipped");
    out_.duplicates_skipped++;
  } else {
    read_in_tx_.clear();
    std::map<std::pair<int, int64_t>, int> staged = target_;
    std::vector<std::tuple<int, int32_t, uint32_t>> skips;
    bool failed = false;
    for (const RowOp& op : tx.ops) {
      const int t = op.table;
      std::optional<ChunkView> o, n;
      RowDecision d;
      for (;;) {
        o = op.old_key ? std::optional(View(t, ChunkNo(t, *op.old_key))) : std::nullopt;
        n = op.new_key ? std::optional(View(t, ChunkNo(t, *op.new_key))) : std::nullopt;
        // No WAL positions in this world: chunks carry no snapshot_lsn, so the xid rule decides
        // (the unit model in tests/unit/snapshot_test.cpp covers the LSN rule).
        d = DecideSnapshotChange(op.op, tx.xid, /*commit_lsn=*/0, o, n);
        if (d.action != RowAction::NeedState) break;
        if (d.need_old) ReadState(t, ChunkNo(t, *op.old_key));
        if (d.need_new) ReadState(t, ChunkNo(t, *op.new_key));
      }
      // Defect: once the handoff is recorded, treat the table as plain (the chunk rule dropped)
      // although transactions the copies already hold may still be ahead in the log.
      if (snapshot_done_ && d.action != RowAction::Apply && Defect("snapshot_handoff_drops_chunk_rule")) {
        d = RowDecision{};
      }
      if (d.skip_old) skips.emplace_back(t, ChunkNo(t, *op.old_key), tx.xid);
      if (d.skip_new) skips.emplace_back(t, ChunkNo(t, *op.new_key), tx.xid);
      auto del = [&](int64_t k) {
        if (!staged.erase({t, k})) {
          Violate("no_insert_of_existing_or_delete_of_missing",
                  "DELETE of a missing row " + Where(t, k) + " by xid " + std::to_string(tx.xid));
          failed = true;
        }
      };
      auto ins = [&](int64_t k, int v) {
        if (!staged.emplace(std::pair{t, k}, v).second) {
          Violate("no_insert_of_existing_or_delete_of_missing",
                  "INSERT of an existing row " + Where(t, k) + " by xid " + std::to_string(tx.xid));
          failed = true;
        }
      };
      switch (d.action) {
        case RowAction::Apply:
          if (op.op == Op::Insert) ins(*op.new_key, op.value);
          if (op.op == Op::Delete) del(*op.old_key);
          if (op.op == Op::Update) {
            del(*op.old_key);
            ins(*op.new_key, op.value);
          }
          break;
        case RowAction::DeleteOldOnly: del(*op.old_key); break;
        case RowAction::InsertNewOnly: ins(*op.new_key, op.value); break;
        case RowAction::Drop:
        case RowAction::NeedState: break;
      }
    }
    if (failed) return;  // the violation is recorded; the run ends there
    target_ = std::move(staged);
    for (const auto& [t, c, xid] : skips) tables_[t].chunks[static_cast<size_t>(c)].skips.insert(xid);
    dedup_.insert(tx.xid);
    out_.applied++;
  }
  // The consumer offset is written after the commit, every other transaction (a crash re-reads).
  if (read_position_ % 2 == 0 || read_position_ == log_.size()) consumer_offset_ = read_position_;
}

void SnapshotWorld::RegisterTable(int t, bool force) {
  Table& table = tables_[t];
  Move(table.state, SnapshotState::Pending, force, "table t" + std::to_string(t) + " (re-registered)");
  table.chunks.assign(table.ranges.size(), Chunk{});
  table.registration++;
  // The control version moves: the applier forgets what it cached of this table's chunks.
  for (auto it = cache_.begin(); it != cache_.end();) it = it->first.first == t ? cache_.erase(it) : std::next(it);
}

// One chunk's copy, as one target transaction. Returns false when the process failed or died here.
bool SnapshotWorld::CopyChunk(int t, int32_t c) {
  Table& table = tables_[t];
  Chunk& chunk = table.chunks[static_cast<size_t>(c)];
  const std::string what = "t" + std::to_string(t) + " chunk " + std::to_string(c);
  if (Fire("snapshot.ddl_during_copy")) {
    table.contract++;
    Trace("source DDL on t" + std::to_string(t) + ": contract version " + std::to_string(table.contract));
  }
  if (Fire("snapshot.source_crash_during_copy")) {
    // The source session fails: the copy's target transaction rolls back; the process records the
    // failure (run and table failed_recoverable) and exits.
    Trace("snapshot: source connection lost while copying " + what + ": marked failed_recoverable");
    Move(table.state, SnapshotState::FailedRecoverable, false, "table t" + std::to_string(t));
    Move(run_state_, SnapshotState::FailedRecoverable, false, "run");
    snapshot_running_ = false;
    return false;
  }
  if (Fire("snapshot.relay_crash_during_copy")) {
    // SIGKILL of the relay: the postmaster resets every backend (the copy's source session too) and
    // the relay restarts from its confirmed point: the last transactions reach the log again.
    const size_t n = std::min<size_t>(2, log_.size());
    const std::vector<LoggedTx> again(log_.end() - static_cast<long>(n), log_.end());
    log_.insert(log_.end(), again.begin(), again.end());
    Trace("relay killed while copying " + what + ": backends reset, " + std::to_string(n) +
          " transactions redelivered to the log; the snapshot marks failed_recoverable");
    Move(table.state, SnapshotState::FailedRecoverable, false, "table t" + std::to_string(t));
    Move(run_state_, SnapshotState::FailedRecoverable, false, "run");
    snapshot_running_ = false;
    return false;
  }
  if (Fire("snapshot.target_crash_during_copy")) {
    // The target crashes: the copy's transaction is lost, and the snapshot process cannot record
    // anything (the run stays copying); the applier restarts from its consumer offset.
    Trace("target crash while copying " + what + ": copy rolled back, run left copying");
    snapshot_running_ = false;
    ApplierCrash("target crash");
    return false;
  }
  if (chunk.copied) {
    // Already copied by an earlier attempt of this run: skipped (step 1 of the copy).
    if (!Defect("snapshot_recopy_completed_chunk")) return true;
    Trace("DEFECT: " + what + " copied again although it is copied");
  }
  const SourceSnapshot s = TakeSnapshot();
  if (!Defect("snapshot_no_skip_check")) {
    for (uint32_t x : chunk.skips)
      if (!VisibleIn(s, x)) return true;  // too old for a transaction the applier left out: later
  }
  const ChunkRange& r = table.ranges[static_cast<size_t>(c)];
  for (auto it = target_.begin(); it != target_.end();) {
    const bool in = it->first.first == t && (!r.lo || it->first.second >= *r.lo) && (!r.hi || it->first.second < *r.hi);
    it = in ? target_.erase(it) : std::next(it);
  }
  for (int64_t k = 0; k < kKeys; k++)
    if (ChunkNo(t, k) == c)
      if (auto v = ReadIn(s, t, k)) target_[{t, k}] = *v;
  chunk.copied = true;
  chunk.snapshot = s;
  chunk.skips.clear();
  chunk.contract = table.contract;
  chunk.copies++;
  Trace("snapshot: " + what + " copied in snapshot " + FormatSourceSnapshot(s));
  if (chunk.copies > 1) {
    Violate("snapshot_copy_idempotent", what + " was copied " + std::to_string(chunk.copies) +
                                            " times in one registration (a completed chunk must be skipped)");
  }
  return true;
}

void SnapshotWorld::CompleteTable(int t) {
  Table& table = tables_[t];
  for (const auto& chunk : table.chunks)
    if (!chunk.copied) return;
  bool drift = false;
  for (const auto& chunk : table.chunks) drift |= chunk.contract != table.contract;
  if (drift && !Defect("snapshot_handoff_ignores_contract")) {
    // Copied under an older definition: the table's copy is withheld and retried under the new one.
    Trace("snapshot: t" + std::to_string(t) + " changed definition during its copy: handoff withheld, copy retried");
    Move(table.state, SnapshotState::FailedRecoverable, false, "table t" + std::to_string(t));
    if (committed_invisible_.empty()) RegisterTable(t, true);  // else: retried at a later step
    return;
  }
  Move(table.state, SnapshotState::Copied, false, "table t" + std::to_string(t));
}

void SnapshotWorld::RecordHandoff() {
  Move(run_state_, SnapshotState::Copied, false, "run");
  Move(run_state_, SnapshotState::HandoffReady, false, "run");
  for (int t = 0; t < kTables; ++t) Move(tables_[t].state, SnapshotState::HandoffReady, false, "table t" + std::to_string(t));
  snapshot_done_ = true;
  snapshot_running_ = false;
  Trace("snapshot: handoff recorded");
  if (Fire("snapshot.applier_crash_after_handoff")) ApplierCrash("right after the handoff was recorded");
}

void SnapshotWorld::CopyStep() {
  if (snapshot_done_) return;
  if (!snapshot_running_) {
    // (Re)start of `trellara snapshot --run-id R`: a failed or killed run resumes.
    snapshot_running_ = true;
    Move(run_state_, SnapshotState::Copying, false, "run");
  }
  for (int t = 0; t < kTables; ++t) {
    Table& table = tables_[t];
    if (table.state == SnapshotState::Copied || table.state == SnapshotState::HandoffReady) continue;
    if (table.state == SnapshotState::FailedRecoverable) {
      bool drift = false;
      for (const auto& chunk : table.chunks) drift |= chunk.copied && chunk.contract != table.contract;
      if (drift) {
        if (!committed_invisible_.empty()) return;  // re-registration waits (see the file comment)
        RegisterTable(t, true);
      }
    }
    Move(table.state, SnapshotState::Copying, false, "table t" + std::to_string(t));
    // The next chunk of the table that is not copied (or, with the defect, any chunk).
    std::vector<int32_t> todo;
    for (size_t c = 0; c < table.chunks.size(); ++c)
      if (!table.chunks[c].copied || config_.defect == "snapshot_recopy_completed_chunk") todo.push_back(static_cast<int32_t>(c));
    if (todo.empty()) {
      CompleteTable(t);
      return;
    }
    const int32_t c = todo[rng_() % todo.size()];
    if (!CopyChunk(t, c)) return;
    CompleteTable(t);
    // Defect: record the handoff as soon as one table is copied.
    if (table.state == SnapshotState::Copied && !AllTablesCopied() && Defect("snapshot_handoff_before_complete")) {
      for (int u = 0; u < kTables; ++u)
        if (tables_[u].state != SnapshotState::Copied) tables_[u].state = SnapshotState::Copied;
      RecordHandoff();
    }
    return;
  }
  if (AllTablesCopied()) RecordHandoff();
}

// A second `trellara snapshot` of the same flow after the handoff: every table is reported as
// already handoff_ready and skipped; no chunk is copied again.
void SnapshotWorld::RerunAfterHandoff() {
  rerun_done_ = true;
  Trace("snapshot: rerun after the handoff (duplicate copy attempt)");
  for (int t = 0; t < kTables; ++t) {
    Table& table = tables_[t];
    if (table.state == SnapshotState::HandoffReady && !Defect("snapshot_recopy_completed_chunk")) {
      Trace("snapshot: t" + std::to_string(t) + " is handoff_ready: skipped");
      continue;
    }
    for (size_t c = 0; c < table.chunks.size(); ++c) {
      Chunk& chunk = table.chunks[c];
      if (chunk.copied && !Defect("snapshot_recopy_completed_chunk")) continue;
      // A duplicate copy: the same registration copies the chunk again in a newer snapshot.
      const SourceSnapshot s = TakeSnapshot();
      const ChunkRange& r = table.ranges[c];
      for (auto it = target_.begin(); it != target_.end();) {
        const bool in = it->first.first == t && (!r.lo || it->first.second >= *r.lo) && (!r.hi || it->first.second < *r.hi);
        it = in ? target_.erase(it) : std::next(it);
      }
      for (int64_t k = 0; k < kKeys; k++)
        if (ChunkNo(t, k) == static_cast<int32_t>(c))
          if (auto v = ReadIn(s, t, k)) target_[{t, k}] = *v;
      chunk.copies++;
      Violate("snapshot_copy_idempotent", "t" + std::to_string(t) + " chunk " + std::to_string(c) + " copied " +
                                              std::to_string(chunk.copies) + " times by a rerun after the handoff");
    }
  }
}

// After every step: the handoff is recorded only when every table is copied under its current
// contract, and a chunk is copied at most once per registration.
void SnapshotWorld::CheckStep() {
  if (run_state_ != SnapshotState::HandoffReady) return;
  for (int t = 0; t < kTables; ++t) {
    for (size_t c = 0; c < tables_[t].chunks.size(); ++c) {
      const Chunk& chunk = tables_[t].chunks[c];
      if (!chunk.copied) {
        Violate("handoff_only_when_every_table_complete",
                "the handoff is recorded but t" + std::to_string(t) + " chunk " + std::to_string(c) + " is not copied");
        return;
      }
      if (chunk.contract != tables_[t].contract) {
        Violate("handoff_under_current_contract",
                "the handoff is recorded but t" + std::to_string(t) + " chunk " + std::to_string(c) +
                    " was copied under contract " + std::to_string(chunk.contract) + ", the source's is now " +
                    std::to_string(tables_[t].contract));
        return;
      }
    }
  }
}

void SnapshotWorld::CheckEnd() {
  std::map<std::pair<int, int64_t>, int> source;
  for (const auto& [key, versions] : history_)
    if (!versions.empty() && versions.back().value) source[key] = *versions.back().value;
  if (source == target_) return;
  std::string what = "target differs from source at the end:";
  int shown = 0;
  for (int t = 0; t < kTables; ++t) {
    for (int64_t k = 0; k < kKeys && shown < 6; k++) {
      auto a = source.find({t, k});
      auto b = target_.find({t, k});
      const std::string sv = a == source.end() ? "-" : std::to_string(a->second);
      const std::string tv = b == target_.end() ? "-" : std::to_string(b->second);
      if (sv == tv) continue;
      what += " " + Where(t, k) + " (chunk " + std::to_string(ChunkNo(t, k)) + ", source " + sv + ", target " + tv + ")";
      shown++;
    }
  }
  Violate("target_equals_source", what);
}

SimOutcome SnapshotWorld::Run() {
  Trace("snapshot run registered: " + std::to_string(kTables) + " tables of " +
        std::to_string(tables_[0].chunks.size()) + " chunks each");
  for (step_ = 1; step_ <= config_.max_steps && out_.violations.empty(); ++step_) {
    switch (rng_() % 8) {
      case 0: StartTx(); break;
      case 1: CommitTx(); break;
      case 2: MakeVisible(); break;
      case 3:
      case 4: ApplyNext(); break;
      case 5:
      case 6: CopyStep(); break;
      case 7:
        if (snapshot_done_ && !rerun_done_ && Fire("snapshot.duplicate_copy_attempt")) RerunAfterHandoff();
        break;
    }
    CheckStep();
  }
  // Drain: every transaction ends and becomes visible, the snapshot finishes, the log is applied.
  while (!running_.empty()) CommitTx();
  while (!committed_invisible_.empty()) MakeVisible();
  for (int guard = 0; guard < 2000 && out_.violations.empty(); guard++, step_++) {
    if (snapshot_done_ && read_position_ == log_.size()) break;
    CopyStep();
    CheckStep();
    ApplyNext();
  }
  if (out_.violations.empty() && !snapshot_done_) Violate("target_equals_source", "the snapshot never reached its handoff");
  if (out_.violations.empty() && snapshot_done_ && !rerun_done_ && config_.faults.fire_at.count("snapshot.duplicate_copy_attempt")) {
    if (Fire("snapshot.duplicate_copy_attempt")) RerunAfterHandoff();
    while (read_position_ < log_.size() && out_.violations.empty()) ApplyNext();
  }
  if (out_.violations.empty()) CheckEnd();
  out_.steps = step_;
  return out_;
}

}  // namespace

SimOutcome RunSnapshotSimulation(const SimConfig& config) {
  SnapshotWorld world(config);
  return world.Run();
}

}  // namespace trellara::sim
