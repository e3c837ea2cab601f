// partition_world.cpp — partitioned scale mode in the deterministic simulator (docs/partitioned.md,
// docs/simulator.md "The partition world"): a source whose transactions the REAL assembler writes as
// per-partition chunks, a manifest and a commit marker; N partition appliers and the publisher as
// simulated processes around the REAL core decisions — each reads the log through its own
// TransactionBarrier; a partition applier checks its chunks (CheckChunk, CheckRowsRoute,
// MissingChunks) and stages them with its checkpoint in one target transaction; the publisher
// decides with DecidePublication over the checkpoints, dedups with DecideApply, merges the staged
// chunks with MergeByPosition and commits the rows, the dedup row and the deletion of the staged
// chunks in one target transaction. Processes crash at named points and restart from what the
// target holds. Everything is driven by the seed.
//
// Invariants checked after every step: no source transaction partly visible in the user table,
// none applied twice, a partition's checkpoint never passes a transaction listing it whose chunks
// it did not stage (evidence without data); at the end: every transaction applied once, or — when
// the scenario expects it — the run halted at a quarantine with nothing of it or after it visible.
#include "world.h"
#include "world_internal.h"

#include <algorithm>
#include <set>

#include "trellara/apply/apply_decision.h"
#include "trellara/capture/assembler.h"
#include "trellara/log/barrier.h"
#include "trellara/partition/partition.h"
#include "trellara/record/checksum.h"
#include "trellara/record/codec.h"

namespace trellara::sim {
namespace {

constexpr const char* kFlow = "sim";
constexpr uint64_t kSysid = 7000000000000000003ull;
constexpr uint32_t kPartitions = 3;

// The events table of the strict world (world_internal.h): inserts keyed by (tx, k), routed by key.
RelationInfo Events() { return world_detail::EventsRelation(); }
constexpr uint32_t kOid = world_detail::kEventsOid;

struct SourceTx {
  uint32_t xid = 0;
  uint64_t commit_lsn = 0;
  int changes = 0;
};

struct Frame {
  uint8_t type = 0;
  uint64_t commit_lsn = 0;
  std::vector<uint8_t> bytes;
};

// The target: every commit synchronous (committed == durable).
struct Target {
  std::map<std::pair<uint64_t, int>, int> rows;           // (commit_lsn, k) -> copies
  std::map<uint64_t, DedupRow> dedup;                      // trellara.applied_transactions
  std::map<std::pair<uint64_t, uint32_t>, Frame> stage;    // trellara.partition_stage: (commit, seq) -> chunk record
  std::set<std::pair<uint64_t, uint32_t>> staged_by;       // (commit, partition) that staged chunks of it
  std::map<uint32_t, uint64_t> checkpoint;                 // partition -> evidence (commit LSN)
  std::map<uint32_t, uint64_t> resume;                     // partition -> log index to resume at
  std::map<uint32_t, partition::PartitionBlocker> blockers;
  std::map<uint64_t, std::string> quarantine;              // commit LSN -> reason
  uint64_t origin = 0;                                     // the publisher's origin progress
};

struct Process {
  bool running = false;
  bool halted = false;
  size_t next = 0;  // index of the next log frame to feed
  std::unique_ptr<TransactionBarrier> barrier;
};

class PartitionWorld {
 public:
  explicit PartitionWorld(const SimConfig& config) : config_(config), random_(config.seed) {
    std::mt19937_64 shape(config.seed * 17 + 3);
    uint64_t lsn = 0x2000000;
    for (int i = 0; i < config.transactions; ++i) {
      lsn += 0x100 + shape() % 0x400;
      source_.push_back({800 + static_cast<uint32_t>(i), lsn, 2 + static_cast<int>(shape() % 6)});
    }
    partitions_.resize(kPartitions);
  }

  SimOutcome Run() {
    for (step_ = 1; step_ <= config_.max_steps; ++step_) {
      const uint64_t pick = random_() % (kPartitions + 3);
      if (pick == 0 || pick == 1) RelayStep();
      else if (pick == 2) PublisherStep();
      else PartitionStep(static_cast<uint32_t>(pick - 3));
      if (!out_.harness_error.empty()) break;
      CheckInvariants();
      if (Done()) break;
    }
    out_.steps = step_;
    CheckFinal();
    return out_;
  }

 private:
  bool Fire(const std::string& point) {
    return faults_.Fire(point, [this](const std::string& line) { Trace(line); });
  }
  void Trace(const std::string& line) { out_.Trace(step_, line); }
  void Violate(const std::string& invariant, const std::string& message) {
    out_.Violate(step_, config_.seed, invariant, message);
  }
  bool Defect(const std::string& name) { return out_.Defect(config_.defect, name); }
  bool PartitionDown(uint32_t p) const {
    if (!config_.remote_outage || p != kPartitions - 1) return false;
    const auto [from, steps] = *config_.remote_outage;
    return step_ >= from && step_ < from + steps;
  }

  // ---- the relay: the real assembler, partitioned; the transport may drop a chunk ----------
  void RelayStep() {
    if (relayed_ >= source_.size()) return;
    const SourceTx& s = source_[relayed_++];
    TransactionAssembler::Options options;
    options.flow = kFlow;
    options.origin_sysid = kSysid;
    options.chunk_changes = 2;
    options.partitioned = true;
    options.map = partition::PartitionMap{1, kPartitions};
    TransactionAssembler assembler(options);
    const RelationInfo events = Events();
    std::vector<Frame> records;
    RecordSink sink = [&records](const EmittedRecord& r) -> Status {
      records.push_back({static_cast<uint8_t>(r.type), r.tx.commit_lsn, std::vector<uint8_t>(r.bytes.begin(), r.bytes.end())});
      return Status::Ok();
    };
    assembler.Begin(s.xid, s.commit_lsn - 0x80, s.commit_lsn, 1000 + s.xid);
    for (int k = 0; k < s.changes; ++k) {
      Change c;
      c.op = Op::Insert;
      c.relation_oid = kOid;
      c.new_tuple = {Value::Text(std::to_string(s.commit_lsn)), Value::Text(std::to_string(k)),
                     Value::Text("xid " + std::to_string(s.xid) + " change " + std::to_string(k))};
      if (Status st = assembler.AddChange(std::move(c), &events, {}, sink); !st.ok()) {
        out_.harness_error = "assembler: " + st.error().message;
        return;
      }
    }
    if (Status st = assembler.Commit(sink); !st.ok()) {
      out_.harness_error = "assembler commit: " + st.error().message;
      return;
    }
    size_t chunks = 0;
    for (const Frame& f : records) chunks += f.type == static_cast<uint8_t>(RecordType::Chunk);
    if (chunks >= 2 && relayed_ == source_.size() && Fire("transport.drop_chunk")) {
      auto second = std::find_if(records.begin(), records.end(),
                                 [](const Frame& f) { return f.type == static_cast<uint8_t>(RecordType::Chunk); });
      records.erase(second + 1);
      dropped_ = s.commit_lsn;
    }
    for (Frame& f : records) log_.push_back(std::move(f));
    Trace("relay logged xid " + std::to_string(s.xid) + " (" + std::to_string(s.changes) + " changes, " +
          std::to_string(chunks) + " chunks)");
  }

  // Feeds `p`'s barrier up to one completed transaction; nullopt when the log has no more.
  std::optional<ReadyTransaction> NextReady(Process& p, std::string* failure) {
    while (p.next < log_.size()) {
      const Frame& f = log_[p.next];
      auto fed = p.barrier->Feed(LogFrame{p.next + 1, f.type, f.commit_lsn,
                                          std::span<const uint8_t>(f.bytes.data(), f.bytes.size())});
      p.next++;
      if (!fed.ok()) {
        *failure = fed.error().message;
        return std::nullopt;
      }
      if (fed->has_value()) return std::move(**fed);
    }
    return std::nullopt;
  }

  const Frame* ChunkFrame(const ChunkLocation& loc) const {
    return loc.offset >= 1 && loc.offset <= log_.size() ? &log_[loc.offset - 1] : nullptr;
  }

  // ---- a partition applier -----------------------------------------------------------------
  void PartitionStep(uint32_t k) {
    Process& p = partitions_[k];
    if (PartitionDown(k)) {
      if (p.running) {
        Trace("partition applier " + std::to_string(k) + " is down");
        p.running = false;
      }
      return;
    }
    if (p.halted) return;
    if (!p.running) {  // (re)start: resume at the checkpoint's log index, fresh barrier
      p.running = true;
      p.barrier = std::make_unique<TransactionBarrier>();
      p.next = target_.resume[k];
      Trace("partition applier " + std::to_string(k) + " starts at log index " + std::to_string(p.next));
    }
    std::string failure;
    std::optional<ReadyTransaction> ready = NextReady(p, &failure);
    if (!failure.empty()) {
      // The barrier refused a transaction (a chunk missing from its manifest, ...): a blocker.
      const uint64_t commit = p.next <= log_.size() ? log_[p.next - 1].commit_lsn : 0;
      target_.blockers[k] = {commit, failure};
      p.halted = true;
      Trace("partition applier " + std::to_string(k) + " halts: " + failure);
      return;
    }
    if (!ready) return;
    const uint64_t commit = ready->tx.commit_lsn;
    if (commit <= target_.checkpoint[k]) return;  // evidence holds it already
    const Manifest& manifest = *ready->manifest;
    const partition::PartitionMap map{manifest.map_version, manifest.partitions};
    std::map<uint32_t, ChunkRef> accepted;
    std::vector<std::pair<uint32_t, Frame>> staged;
    for (const ChunkLocation& loc : ready->chunks) {
      if (loc.partition_id != k) continue;
      const Frame* frame = ChunkFrame(loc);
      if (frame == nullptr) {
        out_.harness_error = "the barrier located a chunk at log index " + std::to_string(loc.offset) + ", past the log";
        return;
      }
      auto decoded = DecodeRecord(std::span<const uint8_t>(frame->bytes.data(), frame->bytes.size()));
      const Chunk* chunk = decoded ? std::get_if<Chunk>(&*decoded) : nullptr;
      if (chunk == nullptr || !VerifyRecordChecksum(*decoded).ok()) {
        out_.harness_error = "a chunk the barrier verified does not decode at log index " + std::to_string(loc.offset);
        return;
      }
      const ChunkRef ref{chunk->seq, chunk->partition_id, chunk->event_count, chunk->checksum, chunk->partition_seq};
      const partition::ChunkVerdict verdict = partition::CheckChunk(k, ref, manifest.chunks, accepted);
      std::optional<std::string> refused;
      if (partition::Refused(verdict)) refused = partition::ChunkVerdictName(verdict);
      else if (auto mismatch = partition::CheckRowsRoute(map, *chunk, k)) refused = *mismatch;
      if (refused) {
        target_.blockers[k] = {commit, *refused};
        p.halted = true;
        Trace("partition applier " + std::to_string(k) + " refuses " + Lsn(commit) + ": " + *refused);
        return;
      }
      if (verdict == partition::ChunkVerdict::Accept) {
        accepted.emplace(chunk->seq, ref);
        staged.push_back({chunk->seq, *frame});
      }
    }
    if (!partition::MissingChunks(k, manifest.chunks, accepted).empty()) {
      target_.blockers[k] = {commit, "missing_chunk"};
      p.halted = true;
      return;
    }
    // Negative control: the checkpoint commits on its own, before the chunks.
    if (!staged.empty() && Defect("partition_checkpoint_outside")) {
      target_.checkpoint[k] = commit;
      target_.resume[k] = p.next;
      if (Fire("partition.crash_before_commit")) return PartitionCrash(k, "after its checkpoint, before the chunks");
    } else if (!staged.empty() && Fire("partition.crash_before_commit")) {
      return PartitionCrash(k, "before COMMIT of the staged chunks");
    }
    // One target transaction: the chunks and the checkpoint.
    for (auto& [seq, frame] : staged) target_.stage[{commit, seq}] = std::move(frame);
    if (!staged.empty()) target_.staged_by.insert({commit, k});
    target_.checkpoint[k] = std::max(target_.checkpoint[k], commit);
    target_.resume[k] = p.next;
    Trace("partition applier " + std::to_string(k) + " staged " + std::to_string(staged.size()) + " chunk(s) of " +
          Lsn(commit) + " with its checkpoint");
    if (!staged.empty() && Fire("partition.crash_after_commit")) PartitionCrash(k, "after COMMIT");
  }

  void PartitionCrash(uint32_t k, const std::string& why) {
    Trace("partition applier " + std::to_string(k) + " process crash (" + why + ")");
    partitions_[k].running = false;
    partitions_[k].barrier.reset();
  }

  // ---- the publisher -----------------------------------------------------------------------
  void PublisherStep() {
    Process& p = publisher_;
    if (p.halted) return;
    if (!p.running) {
      p.running = true;
      p.barrier = std::make_unique<TransactionBarrier>();
      p.next = publisher_offset_;
      pending_.reset();
      Trace("publisher starts at log index " + std::to_string(p.next));
    }
    if (!pending_) {
      std::string failure;
      pending_ = NextReady(p, &failure);
      if (!failure.empty()) {
        const uint64_t commit = log_[p.next - 1].commit_lsn;
        target_.quarantine[commit] = "barrier_failure: " + failure;
        out_.quarantined++;
        p.halted = true;
        Trace("publisher quarantines " + Lsn(commit) + ": " + failure);
        return;
      }
      if (!pending_) return;
    }
    const ReadyTransaction& ready = *pending_;
    const uint64_t commit = ready.tx.commit_lsn;
    TargetEvidence evidence;
    if (auto d = target_.dedup.find(commit); d != target_.dedup.end()) evidence.dedup = d->second;
    evidence.checkpoint_lsn = target_.origin;
    const ApplyDecision decision = DecideApply(ready.tx, ready.checksum, evidence);
    if (decision.action == ApplyAction::SkipDuplicate) {
      out_.duplicates_skipped++;
      Trace("publisher skips " + Lsn(commit) + " (dedup row)");
      publisher_offset_ = p.next;
      pending_.reset();
      return;
    }
    if (decision.action != ApplyAction::Apply) {
      out_.harness_error = "DecideApply: " + decision.reason;
      return;
    }
    const std::vector<uint32_t> listed = partition::ListedPartitions(ready.manifest->chunks);
    auto publish = partition::DecidePublication(0, commit, listed, target_.checkpoint, target_.blockers);
    if (!publish) {
      out_.harness_error = "DecidePublication: " + publish.error().message;
      return;
    }
    const bool defect = publish->action == partition::PublishAction::Wait && Defect("partition_publish_before_evidence");
    if (publish->action == partition::PublishAction::Wait && !defect) return;  // the partitions' evidence first
    if (publish->action == partition::PublishAction::Quarantine) {
      target_.quarantine[commit] = "barrier_failure: partition " + std::to_string(publish->refusing) + " refused it: " +
                                   publish->reason;
      out_.quarantined++;
      p.halted = true;
      Trace("publisher quarantines " + Lsn(commit) + ": " + target_.quarantine[commit]);
      return;
    }
    // The staged chunks merged back into source order (the defect takes whatever is staged).
    std::vector<int> keys;
    Status merged = partition::MergeByPosition(
        ready.manifest->chunks, ready.total_changes,
        [&](const ChunkRef& ref) -> Result<Chunk> {
          auto staged = target_.stage.find({commit, ref.seq});
          if (staged == target_.stage.end())
            return MakeError("chunk " + std::to_string(ref.seq) + " of " + Lsn(commit) + " is not staged");
          auto decoded = DecodeRecord(std::span<const uint8_t>(staged->second.bytes.data(), staged->second.bytes.size()));
          if (!decoded || !std::holds_alternative<Chunk>(*decoded)) return MakeError("staged chunk does not decode");
          return std::get<Chunk>(std::move(*decoded));
        },
        [&](const Chunk& chunk, size_t i) -> Status {
          keys.push_back(std::stoi(chunk.changes[i].new_tuple.at(1).data));
          return Status::Ok();
        });
    if (!merged.ok() && !defect) {
      target_.quarantine[commit] = "barrier_failure: the staged chunks do not reconstruct it: " + merged.error().message;
      out_.quarantined++;
      p.halted = true;
      Trace("publisher quarantines " + Lsn(commit) + ": " + target_.quarantine[commit]);
      return;
    }
    if (defect)
      for (const auto& [key, frame] : target_.stage)
        if (key.first == commit)
          if (auto d = DecodeRecord(std::span<const uint8_t>(frame.bytes.data(), frame.bytes.size())); d && std::holds_alternative<Chunk>(*d) && !merged.ok())
            for (const Change& c : std::get<Chunk>(*d).changes) keys.push_back(std::stoi(c.new_tuple.at(1).data));
    if (Fire("publisher.crash_before_commit")) return PublisherCrash("before COMMIT");
    // One target transaction: the rows, the dedup row, the origin progress, the staged chunks deleted.
    for (int key : keys) target_.rows[{commit, key}]++;
    target_.dedup[commit] = DedupRow{kSysid, ready.tx.xid, ready.checksum};
    target_.origin = std::max(target_.origin, commit);
    for (auto it = target_.stage.begin(); it != target_.stage.end();)
      it = it->first.first == commit ? target_.stage.erase(it) : std::next(it);
    for (auto it = target_.staged_by.begin(); it != target_.staged_by.end();)
      it = it->first == commit ? target_.staged_by.erase(it) : std::next(it);
    Trace("publisher applied " + Lsn(commit) + " (" + std::to_string(keys.size()) + " rows)");
    published_.insert(commit);
    if (Fire("publisher.crash_after_commit_before_offset")) return PublisherCrash("after COMMIT, offset not written");
    publisher_offset_ = p.next;
    pending_.reset();
  }

  void PublisherCrash(const std::string& why) {
    Trace("publisher process crash (" + why + ")");
    publisher_.running = false;
    publisher_.barrier.reset();
    pending_.reset();
  }

  static std::string Lsn(uint64_t lsn) { return FormatLsn(lsn); }

  // ---- invariants --------------------------------------------------------------------------
  void CheckInvariants() {
    for (const SourceTx& s : source_) {
      int present = 0, copies = 0;
      for (int k = 0; k < s.changes; ++k) {
        auto it = target_.rows.find({s.commit_lsn, k});
        if (it != target_.rows.end() && it->second > 0) {
          present++;
          copies = std::max(copies, it->second);
        }
      }
      if (present != 0 && present != s.changes)
        Violate("no partial transaction visible", "xid " + std::to_string(s.xid) + " shows " + std::to_string(present) +
                                                      " of its " + std::to_string(s.changes) + " rows on the target");
      if (copies > 1)
        Violate("none applied twice", "xid " + std::to_string(s.xid) + " has a row applied " + std::to_string(copies) +
                                          " times");
    }
    // Evidence without data: a checkpoint at or past an unpublished transaction that lists the
    // partition, with none of its chunks staged for that partition.
    for (const auto& [k, lsn] : target_.checkpoint) {
      for (const SourceTx& s : source_) {
        if (s.commit_lsn > lsn || published_.count(s.commit_lsn) || !listed_.count({s.commit_lsn, k})) continue;
        if (!target_.staged_by.count({s.commit_lsn, k}) && !target_.quarantine.count(s.commit_lsn))
          Violate("a partition's evidence covers only what it staged",
                  "partition " + std::to_string(k) + "'s checkpoint " + Lsn(lsn) + " covers xid " + std::to_string(s.xid) +
                      " but its chunks of it are not staged");
      }
    }
    RecordListings();
  }

  // Which partitions each logged transaction lists (from its manifest), for the evidence check.
  void RecordListings() {
    for (; listed_upto_ < log_.size(); ++listed_upto_) {
      const Frame& f = log_[listed_upto_];
      if (f.type != static_cast<uint8_t>(RecordType::Manifest)) continue;
      auto decoded = DecodeRecord(std::span<const uint8_t>(f.bytes.data(), f.bytes.size()));
      if (!decoded || !std::holds_alternative<Manifest>(*decoded)) continue;
      for (uint32_t k : partition::ListedPartitions(std::get<Manifest>(*decoded).chunks)) listed_.insert({f.commit_lsn, k});
    }
  }

  bool Done() const {
    if (publisher_.halted) return true;
    return relayed_ == source_.size() && published_.size() == source_.size() && publisher_offset_ == log_.size();
  }

  void CheckFinal() {
    out_.applied = static_cast<int>(published_.size());
    if (config_.expect_halt || dropped_) {  // a dropped chunk must end in its quarantine
      if (!publisher_.halted || !dropped_ || !target_.quarantine.count(*dropped_)) {
        Violate("a quarantine halts", "the run was to halt at the transaction missing a chunk, quarantined; it " +
                                          std::string(publisher_.halted ? "halted elsewhere" : "did not halt"));
        return;
      }
      for (const SourceTx& s : source_)
        if (s.commit_lsn >= *dropped_ && published_.count(s.commit_lsn))
          Violate("a quarantine halts", "xid " + std::to_string(s.xid) + " at or after the quarantined one was applied");
      for (const SourceTx& s : source_)
        if (s.commit_lsn < *dropped_ && !published_.count(s.commit_lsn))
          Violate("no acknowledged transaction lost", "xid " + std::to_string(s.xid) + " before the quarantine was never applied");
      return;
    }
    for (const SourceTx& s : source_)
      if (!published_.count(s.commit_lsn))
        Violate("no acknowledged transaction lost",
                "xid " + std::to_string(s.xid) + " was never applied" +
                    (target_.quarantine.count(s.commit_lsn) ? " (quarantined: " + target_.quarantine.at(s.commit_lsn) + ")"
                                                            : " within " + std::to_string(config_.max_steps) + " steps"));
    if (!target_.stage.empty())
      Violate("no staged chunk left", std::to_string(target_.stage.size()) + " staged chunk(s) left after every "
                                                                             "transaction was published");
  }

  SimConfig config_;
  std::mt19937_64 random_;
  SimOutcome out_;
  FaultScheduler faults_{config_.faults, random_, out_};
  int step_ = 0;
  std::vector<SourceTx> source_;
  size_t relayed_ = 0;
  std::optional<uint64_t> dropped_;
  std::vector<Frame> log_;
  Target target_;
  std::vector<Process> partitions_;
  Process publisher_;
  size_t publisher_offset_ = 0;  // the publisher's consumer offset (written after its COMMIT)
  std::optional<ReadyTransaction> pending_;
  std::set<uint64_t> published_;
  std::set<std::pair<uint64_t, uint32_t>> listed_;
  size_t listed_upto_ = 0;
};

}  // namespace

SimOutcome RunPartitionSimulation(const SimConfig& config) { return PartitionWorld(config).Run(); }

}  // namespace trellara::sim
