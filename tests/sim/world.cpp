// world.cpp — the simulated world around the real core components (see world.h).
#include "world.h"

#include "broker_hop.h"

#include <algorithm>
#include <sstream>

#include "trellara/apply/apply_decision.h"
#include "trellara/apply/apply_pipeline.h"
#include "trellara/capture/assembler.h"
#include "trellara/log/barrier.h"
#include "trellara/record/checksum.h"
#include "trellara/record/codec.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/log/reader.h"
#include "trellara/log/simulated_device.h"
#include "trellara/log/writer.h"
#include "trellara/capture/relay_progress.h"

namespace trellara::sim {
namespace {

constexpr const char* kFlow = "sim";
constexpr uint64_t kSysid = 7000000000000000001ull;
constexpr const char* kLogDir = "/flows/sim";
constexpr const char* kConsumer = "applier";
constexpr uint32_t kEventsOid = 16384;

std::string Lsn(uint64_t lsn) { return FormatLsn(lsn); }

RelationInfo EventsRelation() {
  RelationInfo r;
  r.oid = kEventsOid;
  r.schema = "public";
  r.name = "events";
  r.columns = {{"tx", 20, "bigint", -1, true}, {"k", 23, "integer", -1, true}, {"v", 25, "text", -1, false}};
  r.fingerprint = ComputeFingerprint(r);
  return r;
}

struct SourceTx {
  uint32_t xid = 0;
  uint64_t commit_lsn = 0;
  int changes = 0;
};

// ---- the simulated target: atomic transactions, crash loses uncommitted work, an asynchronous
// commit window loses the last commits unless flushed -------------------------------------------
struct TargetState {
  std::map<std::pair<uint64_t, int>, int> rows;  // (commit_lsn, k) -> copies (the events table has no key on the target)
  std::map<uint64_t, DedupRow> dedup;            // trellara.applied_transactions by commit LSN
  uint64_t checkpoint = 0;                       // replication origin progress
};

struct Target {
  TargetState committed;  // what a reader sees
  TargetState durable;    // what survives a target crash
  bool synchronous_commit = true;
  std::map<uint64_t, QuarantineRecord> quarantine;  // by commit LSN (written synchronously)
  std::optional<uint64_t> blocked_lsn;              // the first row of this transaction is refused (23505)

  void Commit(const TargetState& state) {
    committed = state;
    if (synchronous_commit) durable = committed;
  }
  void Flush() { durable = committed; }
  void Crash() { committed = durable; }
  uint64_t flushed_lsn() const { return durable.checkpoint; }
  TargetEvidence Evidence(const TxIdentity& tx) const {
    TargetEvidence e;
    auto d = committed.dedup.find(tx.commit_lsn);
    if (d != committed.dedup.end()) e.dedup = d->second;
    e.checkpoint_lsn = committed.checkpoint;
    auto q = quarantine.find(tx.commit_lsn);
    if (q != quarantine.end() && q->second.xid == tx.xid) e.quarantine = q->second.state;
    return e;
  }
};

struct CrashSignal {};  // thrown to unwind a simulated process crash out of nested adapter code

class World {
 public:
  explicit World(const SimConfig& config)
      : config_(config),
        random_(config.seed),
        device_(log::SimulatedDeviceOptions{config.seed ^ 0x9E3779B97F4A7C15ull, config.defect == "device_fsync_is_noop"}) {
    target_.synchronous_commit = config.synchronous_commit;
    std::mt19937_64 shape(config.seed * 31 + 7);
    uint64_t lsn = 0x1000000;
    for (int i = 0; i < config.transactions; ++i) {
      SourceTx tx;
      tx.xid = 700 + static_cast<uint32_t>(i);
      lsn += 0x100 + shape() % 0x400;
      tx.commit_lsn = lsn;
      bool large = config.large_every > 0 && (i % config.large_every) == config.large_every - 1;
      tx.changes = large ? config.large_changes : 1 + static_cast<int>(shape() % 3);
      source_.push_back(tx);
    }
    if (config.blocked_event_tx) target_.blocked_lsn = source_.at(*config.blocked_event_tx).commit_lsn;
    if (config.broker) {
      HopHooks hooks;
      hooks.fire = [this](const std::string& point) { return Fire(point); };
      hooks.defect = [this](const std::string& name) { return Defect(name); };
      hooks.trace = [this](const std::string& line) { Trace(line); };
      hooks.violate = [this](const std::string& invariant, const std::string& message) { Violate(invariant, message); };
      hooks.harness_error = [this](const std::string& message) { out_.harness_error = message; };
      hooks.applier_dies = [this](const std::string& why) { ApplierCrash(why); };
      hop_ = std::make_unique<BrokerHop>(device_, kLogDir, replica_device_, random_, std::move(hooks), kFlow,
                                         broker::LogIdentity(kSysid, 0));
    }
  }

  SimOutcome Run();

 private:
  // ---- scheduler ----
  bool Fire(const std::string& point);
  void Trace(const std::string& line) { out_.trace.push_back("step " + std::to_string(step_) + ": " + line); }
  void Violate(const std::string& invariant, const std::string& message) {
    if (out_.violations.size() < 20)
      out_.violations.push_back({step_, invariant, "step " + std::to_string(step_) + " seed " +
                                                        std::to_string(config_.seed) + ": " + message});
  }
  bool Defect(const std::string& name) {
    if (config_.defect != name) return false;
    out_.defect_fired = true;
    return true;
  }

  // ---- relay ----
  void RelayStart();
  void RelayStep();
  void RelayCrash(const std::string& why) {
    Trace("relay process crash (" + why + ")");
    writer_.reset();
    relay_running_ = false;
  }
  void PowerLoss(const std::string& why);
  void Confirm(uint64_t lsn);
  void AppendFrame(uint8_t type, uint64_t commit_lsn, const std::string& bytes, uint8_t ack_type);
  std::vector<log::LogRecord> ReadWholeLog();

  // ---- applier ----
  void ApplierStart();
  void ApplierStep();
  void ApplierCrash(const std::string& why) {
    Trace("applier process crash (" + why + ")");
    if (hop_) hop_->ReceiverCrash();
    applier_running_ = false;
    reader_.reset();
    barrier_.reset();
    chunk_cache_.reset();
    pipeline_.reset();
  }
  void ProcessPipeline();
  // Executes one transaction on the target; returns whether it committed. Throws CrashSignal.
  enum class TxResult { Committed, Failed, Quarantined };
  TxResult ExecuteOnTarget(const ReadyTransaction& ready, bool alone);
  std::vector<std::pair<uint64_t, int>> RowsOf(const ReadyTransaction& ready);
  void Quarantine(const TxIdentity& tx, const Sha256& checksum, const QuarantineCause& cause);
  void WriteOffset();

  // ---- invariants ----
  void CheckInvariants();
  void CheckFinal();
  const SourceTx* SourceByLsn(uint64_t lsn) const {
    for (const auto& s : source_)
      if (s.commit_lsn == lsn) return &s;
    return nullptr;
  }
  int RowsVisible(const TargetState& st, const SourceTx& s, int* max_copies) const {
    int present = 0;
    *max_copies = 0;
    for (int k = 0; k < s.changes; ++k) {
      auto it = st.rows.find({s.commit_lsn, k});
      if (it != st.rows.end() && it->second > 0) {
        present++;
        *max_copies = std::max(*max_copies, it->second);
      }
    }
    return present;
  }

  SimConfig config_;
  std::mt19937_64 random_;
  log::SimulatedDevice device_;
  log::SimulatedDevice replica_device_{log::SimulatedDeviceOptions{config_.seed ^ 0x5DEECE66Dull, false}};
  std::vector<SourceTx> source_;
  SimOutcome out_;
  int step_ = 0;
  FaultScheduler faults_{config_.faults, random_, out_};

  // source + relay
  uint64_t slot_confirmed_ = 0;
  LogStartRecord log_start_;
  bool relay_running_ = false;
  bool relay_refused_ = false;
  bool log_recovered_ = true;  // false from a power loss until the relay reopened (recovered) the log
  std::unique_ptr<log::LogWriter> writer_;
  std::unique_ptr<AckTracker> ack_;
  uint64_t decode_after_ = 0;  // the relay decodes transactions with commit_lsn above this
  // frames the relay appended (offset -> (type, commit_lsn)) as the writer numbered them, this log life
  std::map<uint64_t, std::pair<uint8_t, uint64_t>> appended_;
  std::set<uint64_t> logged_durably_;  // commit LSNs whose completing frame was ever durable in the log

  // applier
  bool applier_running_ = false;
  bool applier_refused_ = false;
  bool halted_ = false;
  std::optional<uint64_t> halted_at_;  // commit LSN of the quarantined transaction
  int halted_since_ = 0;               // step at which the applier halted (0: not halted)
  std::unique_ptr<log::LogReader> reader_;
  std::unique_ptr<TransactionBarrier> barrier_;
  // As the real applier: the barrier's verified chunks, reused by the pass that applies them. The
  // bound comes from the seed (nothing fits / about one chunk / everything), so runs exercise the
  // cached, the re-read and the mixed pass.
  std::unique_ptr<VerifiedChunkCache> chunk_cache_;
  std::unique_ptr<ApplyPipeline> pipeline_;
  uint64_t consumer_offset_ = 0;  // as last written (durable: atomic file on the device)
  // The applier's log: the source's log, or (broker mode) its replica on the remote host.
  log::SimulatedDevice& ApplierDevice() { return hop_ ? replica_device_ : device_; }
  const char* ApplierDir() const { return hop_ ? BrokerHop::kReplicaDir : kLogDir; }
  int64_t NowMs() const { return static_cast<int64_t>(step_) * 100; }
  // broker: the remote applier's host is down (SimConfig::remote_outage); it dies when that begins.
  bool RemoteHostDown() {
    if (!hop_ || !config_.remote_outage) return false;
    const auto [from, steps] = *config_.remote_outage;
    if (step_ < from || step_ >= from + steps) return false;
    if (applier_running_) ApplierCrash("its host goes down for " + std::to_string(steps) + " steps");
    return true;
  }
  std::vector<ReadyTransaction> deferred_chunked_;

  Target target_;

  // broker mode (SimConfig::broker): the hop to the remote applier (its device is declared with
  // the source's, so it outlives every reader and writer on it)
  std::unique_ptr<BrokerHop> hop_;
  std::unique_ptr<AckTracker> broker_ack_;  // source_ack = broker_quorum: what the broker's quorum holds
  // What the relay may confirm now: durable, and (broker_quorum) acknowledged by the broker.
  uint64_t Confirmable(uint64_t durable_confirmable) {
    if (!broker_ack_) return durable_confirmable;
    return std::min(durable_confirmable,
                    broker_ack_->Durable(std::min(hop_->forwarder_progress(), writer_->durable_end())));
  }
};

bool World::Fire(const std::string& point) {
  return faults_.Fire(point, [this](const std::string& line) { Trace(line); }, point == "transport.drop_chunk");
}

// ---------------------------------------------------------------------------------------------
// relay

std::vector<log::LogRecord> World::ReadWholeLog() {
  std::vector<log::LogRecord> records;
  auto reader = log::LogReader::Open(device_, kLogDir);
  if (!reader.ok()) {
    out_.harness_error = "log reader open failed: " + reader.error().message;
    return records;
  }
  for (;;) {
    auto next = (*reader)->Next();
    if (!next.ok()) {
      out_.harness_error = "log read failed: " + next.error().message;
      return records;
    }
    if (!next->has_value()) break;
    records.push_back(std::move(**next));
  }
  return records;
}

void World::RelayStart() {
  log::WriterOptions options;
  options.segment_bytes_max = 4096 + random_() % 4096;
  log::RecoveryReport report;
  auto writer = log::LogWriter::Open(device_, kLogDir, options, &report);
  if (!writer.ok()) {
    // Recovery refuses a log whose acknowledged frames are damaged (never skips past them): the
    // flow stops, and what the slot confirmed is no longer held anywhere.
    Trace("relay cannot open its log: " + writer.error().message);
    Violate("no_acknowledged_transaction_lost", "log recovery refuses the log: " + writer.error().message);
    relay_refused_ = true;
    return;
  }
  log_recovered_ = true;
  writer_ = std::move(*writer);
  appended_.clear();
  std::vector<log::LogRecord> records = ReadWholeLog();
  if (!out_.harness_error.empty()) {
    // The reader refuses a damaged acknowledged frame (never skips it): the flow stops.
    Violate("no_acknowledged_transaction_lost", "the recovered log cannot be read: " + out_.harness_error);
    out_.harness_error.clear();
    relay_refused_ = true;
    writer_.reset();
    return;
  }
  for (const auto& r : records) appended_[r.offset] = {r.type, r.commit_lsn};
  std::vector<TailFrame> newest_first;
  for (auto it = records.rbegin(); it != records.rend(); ++it) {
    newest_first.push_back({it->offset, it->type, it->commit_lsn});
    if (CompletesTransaction(it->type)) break;
  }
  RestartDecision d = DecideRestart(newest_first, slot_confirmed_, log_start_, kFlow);
  if (d.kind == RestartDecision::Kind::kRefuse) {
    Trace("relay refuses to start: " + d.reason);
    relay_refused_ = true;
    writer_.reset();
    return;
  }
  ack_ = std::make_unique<AckTracker>(d.covered_lsn);
  // source_ack = broker_quorum: what the log holds beyond the slot may not be with the broker yet.
  if (config_.broker_quorum)
    broker_ack_ = std::make_unique<AckTracker>(d.kind == RestartDecision::Kind::kFreshLog ? 0 : slot_confirmed_);
  if (d.kind == RestartDecision::Kind::kFreshLog) {
    std::string payload(8, '\0');
    for (int i = 0; i < 8; ++i) payload[i] = static_cast<char>((slot_confirmed_ >> (8 * i)) & 0xff);
    AppendFrame(kProgressRecordType, slot_confirmed_, payload, kProgressRecordType);
    auto durable = writer_->Flush();
    if (!durable.ok()) {
      out_.harness_error = "relay: start marker flush failed: " + durable.error().message;
      return;
    }
    (void)ack_->Durable(*durable);
    log_start_.started_lsn = slot_confirmed_;
    decode_after_ = slot_confirmed_;
  } else {
    decode_after_ = std::max(d.skip_through_lsn, slot_confirmed_);
  }
  Trace("relay starts: " + std::string(d.kind == RestartDecision::Kind::kFreshLog ? "fresh log" : "resume") +
        ", covered " + Lsn(d.covered_lsn) + ", decoding after " + Lsn(decode_after_) +
        (d.torn_commit_lsn ? ", torn chunked tail at " + Lsn(*d.torn_commit_lsn) : "") + ", " +
        std::to_string(report.torn_tail_bytes) + " torn bytes truncated");
  relay_running_ = true;
}

void World::AppendFrame(uint8_t type, uint64_t commit_lsn, const std::string& bytes, uint8_t ack_type) {
  auto offset = writer_->Append(type, commit_lsn,
                                std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  if (!offset.ok()) {
    out_.harness_error = "relay: append failed: " + offset.error().message;
    return;
  }
  appended_[*offset] = {type, commit_lsn};
  ack_->Appended(*offset, ack_type, commit_lsn);
  if (broker_ack_) broker_ack_->Appended(*offset, ack_type, commit_lsn);
  if (CompletesTransaction(ack_type) && Defect("relay_confirm_before_fsync")) Confirm(commit_lsn);
}

void World::Confirm(uint64_t lsn) {
  // source_confirmed_only_to_durable_log, checked at the moment of the confirm too: after the step
  // the frames may have become durable, hiding a confirm that raced ahead of the fsync.
  if (writer_ && lsn > slot_confirmed_) {
    bool durable = false;
    for (const auto& [off, meta] : appended_)
      if (off < writer_->durable_end() && CompletesTransaction(meta.first) && meta.second >= lsn) durable = true;
    if (!durable)
      Violate("source_confirmed_only_to_durable_log",
              "the relay confirms " + Lsn(lsn) + " to the source while its completing frame is not durable (durable end " +
                  std::to_string(writer_->durable_end()) + ")");
  }
  if (lsn > slot_confirmed_) {
    Trace("source slot confirmed to " + Lsn(lsn));
    slot_confirmed_ = lsn;
  }
}

void World::PowerLoss(const std::string& why) {
  Trace("POWER LOSS on the log host (" + why + "): relay and applier die");
  device_.PowerLoss();
  out_.power_losses++;
  log_recovered_ = false;  // readers wait until the relay's recovery made the log consistent
  writer_.reset();
  relay_running_ = false;
  if (hop_) {
    hop_->ForwarderCrash("its host lost power");  // the remote applier runs on another host
    return;
  }
  applier_running_ = false;
  reader_.reset();
  barrier_.reset();
  chunk_cache_.reset();
  pipeline_.reset();
}

void World::RelayStep() {
  if (relay_refused_) return;
  if (!relay_running_) {
    RelayStart();
    return;
  }
  const SourceTx* next = nullptr;
  for (const auto& s : source_)
    if (s.commit_lsn > decode_after_) {
      next = &s;
      break;
    }
  if (next == nullptr) {  // caught up with the source
    if (broker_ack_) Confirm(Confirmable(ack_->confirmable_lsn()));
    return;
  }
  // Decode: the real assembler turns the changes into records.
  TransactionAssembler::Options options;
  options.flow = kFlow;
  options.origin_sysid = kSysid;
  options.chunk_changes = 4;
  TransactionAssembler assembler(options);
  RelationInfo events = EventsRelation();
  struct Out {
    RecordType type;
    bool completes;
    std::string bytes;
  };
  std::vector<Out> records;
  RecordSink sink = [&records](const EmittedRecord& r) -> Status {
    records.push_back({r.type, r.completes_transaction, r.bytes});
    return Status::Ok();
  };
  assembler.Begin(next->xid, next->commit_lsn - 0x80, next->commit_lsn, 1000 + next->xid);
  for (int k = 0; k < next->changes; ++k) {
    Change c;
    c.op = Op::Insert;
    c.relation_oid = kEventsOid;
    c.new_tuple = {Value::Text(std::to_string(next->commit_lsn)), Value::Text(std::to_string(k)),
                   Value::Text("xid " + std::to_string(next->xid) + " change " + std::to_string(k))};
    Status s = assembler.AddChange(std::move(c), &events, {}, sink);
    if (!s.ok()) {
      out_.harness_error = "assembler: " + s.error().message;
      return;
    }
  }
  Status s = assembler.Commit(sink);
  if (!s.ok()) {
    out_.harness_error = "assembler commit: " + s.error().message;
    return;
  }
  const bool chunked = records.size() > 1;
  Trace("relay decoded xid " + std::to_string(next->xid) + " commit " + Lsn(next->commit_lsn) + ": " +
        std::to_string(records.size()) + (chunked ? " records (chunked)" : " record"));
  if (Fire("relay.crash_before_append")) return RelayCrash("before append");

  // The transport between the assembler and the log: duplicates, reordering, drops.
  if (chunked && Fire("transport.manifest_before_chunks")) {
    auto manifest = std::find_if(records.begin(), records.end(), [](const Out& o) { return o.type == RecordType::Manifest; });
    Out m = *manifest;
    records.erase(manifest);
    records.insert(records.begin(), m);
  }
  if (chunked && Fire("transport.drop_chunk")) {
    auto second = std::find_if(records.begin(), records.end(), [](const Out& o) { return o.type == RecordType::Chunk; });
    if (second != records.end()) ++second;
    if (second != records.end() && second->type == RecordType::Chunk) records.erase(second);
  }
  if (!chunked && Fire("transport.duplicate_record")) records.push_back(records.back());

  if (chunked) {
    // Chunks first, each group made durable (the relay flushes as chunks leave the assembler).
    size_t i = 0;
    for (; i < records.size() && records[i].type != RecordType::CommitMarker; ++i) {
      uint8_t type = static_cast<uint8_t>(records[i].type);
      uint8_t ack_type = type;
      if (records[i].type == RecordType::Manifest && Defect("relay_confirm_at_manifest"))
        ack_type = static_cast<uint8_t>(RecordType::CommitMarker);
      AppendFrame(type, next->commit_lsn, records[i].bytes, ack_type);
      if (!out_.harness_error.empty()) return;
      if (records[i].type == RecordType::Chunk && i >= 1 && Fire("relay.power_loss_mid_chunks"))
        return PowerLoss("after chunk " + std::to_string(i) + " was appended");
      bool last_chunk = records[i].type == RecordType::Chunk &&
                        (i + 1 >= records.size() || records[i + 1].type != RecordType::Chunk);
      if (last_chunk || records[i].type == RecordType::Manifest) {
        auto durable = writer_->Flush();
        if (!durable.ok()) {
          out_.harness_error = "relay flush: " + durable.error().message;
          return;
        }
        Confirm(Confirmable(ack_->Durable(*durable)));
      }
      if (last_chunk && Fire("relay.crash_after_chunks_before_manifest"))
        return RelayCrash("chunks durable, manifest not written");
      if (records[i].type == RecordType::Manifest && i + 1 < records.size() &&
          records[i + 1].type == RecordType::CommitMarker && Fire("relay.crash_after_manifest_before_marker"))
        return RelayCrash("manifest durable, commit marker not written");
    }
    for (; i < records.size(); ++i) AppendFrame(static_cast<uint8_t>(records[i].type), next->commit_lsn, records[i].bytes,
                                                static_cast<uint8_t>(records[i].type));
  } else {
    for (const auto& r : records) AppendFrame(static_cast<uint8_t>(r.type), next->commit_lsn, r.bytes, static_cast<uint8_t>(r.type));
  }
  if (!out_.harness_error.empty()) return;
  Status submitted = writer_->Submit();
  if (!submitted.ok()) {
    out_.harness_error = "relay submit: " + submitted.error().message;
    return;
  }
  if (Fire("relay.power_loss_after_append")) return PowerLoss("frames appended and submitted, fsync not complete");
  auto durable = writer_->Flush();
  if (!durable.ok()) {
    out_.harness_error = "relay flush: " + durable.error().message;
    return;
  }
  decode_after_ = next->commit_lsn;
  uint64_t confirmable = Confirmable(ack_->Durable(*durable));
  if (Fire("relay.crash_after_fsync_before_confirm")) return RelayCrash("durable, not confirmed");
  if (Fire("relay.confirm_lost")) {
    Trace("confirm of " + Lsn(confirmable) + " lost; the relay reconnects");
    writer_.reset();
    relay_running_ = false;
    return;
  }
  Confirm(confirmable);
}

// ---------------------------------------------------------------------------------------------
// applier

void World::ApplierStart() {
  if (hop_ && !hop_->ReceiverStart()) return;  // the replica first (recovered), then the applier reads it
  auto offsets = log::ReadConsumerOffsets(ApplierDevice(), ApplierDir());
  if (!offsets.ok()) {
    // The consumer offset is written atomically (tmp, fdatasync, rename, directory fsync): a
    // damaged one means the durable acknowledgement of what was applied is gone.
    Violate("no_acknowledged_transaction_lost", "the applier cannot read its consumer offset: " + offsets.error().message);
    applier_refused_ = true;
    return;
  }
  auto it = offsets->find(kConsumer);
  consumer_offset_ = it == offsets->end() ? 0 : it->second;
  auto exists = ApplierDevice().Exists(ApplierDir());
  if (!exists.ok() || !*exists) return;    // no log yet
  if (!hop_ && !log_recovered_) return;    // after a power loss the relay recovers the log first
  auto reader = log::LogReader::Open(ApplierDevice(), ApplierDir());
  if (!reader.ok()) {
    out_.harness_error = "applier: reader open: " + reader.error().message;
    return;
  }
  reader_ = std::move(*reader);
  Status seek = reader_->Seek(consumer_offset_);
  if (!seek.ok()) {
    out_.harness_error = "applier: seek to consumer offset " + std::to_string(consumer_offset_) + ": " + seek.error().message;
    return;
  }
  barrier_ = std::make_unique<TransactionBarrier>();
  static constexpr uint64_t kCacheBounds[] = {0, 4096, 64u << 20};
  chunk_cache_ = std::make_unique<VerifiedChunkCache>(kCacheBounds[config_.seed % 3]);
  barrier_->SetChunkSink([cache = chunk_cache_.get()](uint64_t offset, Chunk&& chunk) {
    cache->Offer(offset, std::move(chunk));
  });
  PipelineLimits limits;
  limits.batch_transactions_max = 3;
  pipeline_ = std::make_unique<ApplyPipeline>(consumer_offset_, limits);
  deferred_chunked_.clear();
  applier_running_ = true;
  Trace("applier starts at consumer offset " + std::to_string(consumer_offset_));
}

std::vector<std::pair<uint64_t, int>> World::RowsOf(const ReadyTransaction& ready) {
  std::vector<std::pair<uint64_t, int>> rows;
  auto add = [&rows](const std::vector<Change>& changes) {
    for (const auto& c : changes)
      rows.push_back({std::stoull(c.new_tuple.at(0).data), std::stoi(c.new_tuple.at(1).data)});
  };
  if (ready.envelope) {
    add(ready.envelope->changes);
  } else {
    auto read = [this](uint64_t offset) -> Result<std::vector<uint8_t>> {
      auto r = log::LogReader::Open(ApplierDevice(), ApplierDir());
      if (!r.ok()) return r.error();
      Status s = (*r)->Seek(offset);
      if (!s.ok()) return s.error();
      auto rec = (*r)->Next();
      if (!rec.ok()) return rec.error();
      if (!rec->has_value()) return MakeError("offset " + std::to_string(offset) + " is not readable");
      return std::move((**rec).payload);
    };
    Status s = ForEachVerifiedChunk(ready, read, [&add](const Chunk& chunk) {
      add(chunk.changes);
      return Status::Ok();
    }, chunk_cache_.get());
    if (!s.ok()) out_.harness_error = "re-reading chunks: " + s.error().message;
  }
  return rows;
}

void World::Quarantine(const TxIdentity& tx, const Sha256& checksum, const QuarantineCause& cause) {
  uint32_t attempts = 0;
  auto it = target_.quarantine.find(tx.commit_lsn);
  if (it != target_.quarantine.end()) attempts = it->second.attempts;
  QuarantineRecord q = BuildQuarantine(tx, checksum, cause, attempts);
  target_.quarantine[tx.commit_lsn] = q;
  out_.quarantined++;
  Trace("QUARANTINE " + q.message);
  if (Defect("apply_skip_quarantined")) {
    Trace("defect apply_skip_quarantined: moving on past the quarantined transaction");
    return;
  }
  halted_ = true;
  halted_at_ = tx.commit_lsn;
}

World::TxResult World::ExecuteOnTarget(const ReadyTransaction& ready, bool alone) {
  const TxIdentity& tx = ready.tx;
  std::vector<std::pair<uint64_t, int>> rows = RowsOf(ready);
  TargetState work = target_.committed;  // BEGIN
  bool checkpoint_first = Defect("apply_checkpoint_outside_transaction");
  if (checkpoint_first) {
    TargetState cp = target_.committed;
    cp.checkpoint = CheckpointAfter(cp.checkpoint, tx.commit_lsn);
    target_.Commit(cp);
    work.checkpoint = cp.checkpoint;
  }
  bool autocommit = config_.defect == "apply_rows_autocommit";
  for (size_t i = 0; i < rows.size(); ++i) {
    if (target_.blocked_lsn && *target_.blocked_lsn == tx.commit_lsn && rows[i].second == 0) {
      Trace("target refuses a row of " + DescribeTransaction(tx) + ": 23505 duplicate key");
      if (!alone) return TxResult::Failed;
      QuarantineCause cause = CauseFromStatementError("23505", "duplicate key value violates unique constraint \"events_pkey\"",
                                                      "Key (tx, k)=(" + std::to_string(rows[i].first) + ", 0) already exists.");
      Quarantine(tx, ready.checksum, cause);
      return TxResult::Quarantined;
    }
    work.rows[rows[i]] += 1;
    if (autocommit) {
      out_.defect_fired = true;
      TargetState st = target_.committed;
      st.rows[rows[i]] += 1;
      target_.Commit(st);
    }
    if (i == 0 && Fire("applier.crash_before_commit")) {
      ApplierCrash("inside the open target transaction of " + DescribeTransaction(tx));
      throw CrashSignal{};
    }
  }
  // trellara.applied_transactions has PRIMARY KEY (flow, commit_lsn): a second dedup row for the
  // same boundary fails the transaction with 23505 (the defect writes it as an upsert instead).
  if (work.dedup.count(tx.commit_lsn) && !Defect("apply_skip_dedup_check")) {
    Trace("dedup row insert for " + DescribeTransaction(tx) + " failed: 23505 (already applied); rolled back");
    return TxResult::Failed;
  }
  work.dedup[tx.commit_lsn] = DedupRow{tx.origin_sysid, tx.xid, ready.checksum};
  if (Fire("target.checkpoint_update_fails")) {
    Trace("origin progress update failed for " + DescribeTransaction(tx) + "; the transaction rolls back");
    return TxResult::Failed;
  }
  work.checkpoint = CheckpointAfter(work.checkpoint, tx.commit_lsn);
  if (Fire("target.commit_fails")) {
    Trace("COMMIT of " + DescribeTransaction(tx) + " failed; rolled back");
    return TxResult::Failed;
  }
  if (autocommit) {
    // The rows are already committed one by one; the final commit records dedup and checkpoint.
    TargetState st = target_.committed;
    st.dedup = work.dedup;
    st.checkpoint = work.checkpoint;
    target_.Commit(st);
  } else {
    target_.Commit(work);
  }
  auto q = target_.quarantine.find(tx.commit_lsn);
  if (q != target_.quarantine.end()) q->second.state = QuarantineState::Resolved;
  Trace("target committed " + DescribeTransaction(tx) + " (" + std::to_string(rows.size()) + " rows)");
  return TxResult::Committed;
}

void World::WriteOffset() {
  if (Defect("apply_ack_before_commit")) pipeline_->DefectTreatEverythingReadAsDone();
  uint64_t flushed = target_.flushed_lsn();
  if (Defect("apply_offset_ignores_flush")) flushed = UINT64_MAX;
  uint64_t offset = pipeline_->DurableOffset(flushed);
  if (offset <= consumer_offset_) return;
  if (Fire("applier.offset_write_lost")) return;
  Status s = log::WriteConsumerOffset(ApplierDevice(), ApplierDir(), kConsumer, offset);
  if (!s.ok()) {
    out_.harness_error = "consumer offset write: " + s.error().message;
    return;
  }
  consumer_offset_ = offset;
  Trace("consumer offset -> " + std::to_string(offset));
  if (hop_) hop_->ReportPosition(offset, NowMs());
}

void World::ProcessPipeline() {
  ApplyPipeline& p = *pipeline_;
  for (int guard = 0; guard < 64 && !halted_; ++guard) {
    PipelineStep next = p.Next();
    if (next == PipelineStep::Idle) break;
    if (next == PipelineStep::Form) {
      size_t n = p.Candidates();
      for (size_t i = 0; i < n; ++i) {
        const PipelineTx& c = p.at(i);
        Admission a = Admission::Alone;
        if (Defect("apply_skip_dedup_check")) {
          a = Admission::Apply;
        } else {
          ApplyDecision d = DecideApply(c.ready.tx, c.ready.checksum, target_.Evidence(c.ready.tx));
          a = d.action == ApplyAction::SkipDuplicate ? Admission::Duplicate
              : d.action == ApplyAction::Apply && !target_.Evidence(c.ready.tx).quarantine ? Admission::Apply
                                                                                           : Admission::Alone;
        }
        if (!p.Admit(i, a, 1)) break;
      }
      p.Seal();
      continue;
    }
    if (next == PipelineStep::Collect) {
      std::vector<bool> committed;
      bool failed = false;
      for (size_t i = 0; i < p.in_flight(); ++i) {
        const PipelineTx& t = p.at(i);
        if (t.duplicate) {
          committed.push_back(false);
          out_.duplicates_skipped++;
          Trace("duplicate skipped: " + DescribeTransaction(t.ready.tx));
          continue;
        }
        if (failed) {
          committed.push_back(false);
          continue;
        }
        TxResult r = ExecuteOnTarget(t.ready, false);
        committed.push_back(r == TxResult::Committed);
        if (r != TxResult::Committed) failed = true;
      }
      auto outcome = p.Collect(committed);
      if (!outcome.ok()) {
        out_.harness_error = "pipeline collect: " + outcome.error().message;
        return;
      }
      if (Fire("applier.crash_after_commit_before_offset")) {
        ApplierCrash("after target commit, before the consumer offset");
        throw CrashSignal{};
      }
      continue;
    }
    // Alone: the one-at-a-time path.
    PipelineTx& t = p.front();
    ApplyDecision d = DecideApply(t.ready.tx, t.ready.checksum, target_.Evidence(t.ready.tx));
    if (Defect("apply_skip_dedup_check")) d.action = ApplyAction::Apply;
    if (d.action == ApplyAction::SkipDuplicate) {
      out_.duplicates_skipped++;
      p.RetireAlone();
      continue;
    }
    if (d.action == ApplyAction::WaitReplayReady) {
      if (Defect("apply_skip_quarantined")) {
        p.RetireAlone();
        continue;
      }
      halted_ = true;
      halted_at_ = t.ready.tx.commit_lsn;
      return;
    }
    if (d.action == ApplyAction::QuarantineConflict) {
      Quarantine(t.ready.tx, t.ready.checksum, d.cause);
      if (!halted_) p.RetireAlone();
      return;
    }
    TxResult r = ExecuteOnTarget(t.ready, true);
    if (r == TxResult::Committed) {
      p.RetireAlone();
    } else if (r == TxResult::Quarantined) {
      if (!halted_) p.RetireAlone();
      return;
    } else {
      return;  // transient: retried at the next applier step
    }
  }
}

void World::ApplierStep() {
  if (applier_refused_) return;
  if (!applier_running_) {
    ApplierStart();
    return;
  }
  try {
    if (hop_) {
      hop_->ReceiverPump(NowMs());
      if (!applier_running_) return;  // the remote host lost power, or the process died
    }
    if (!halted_) {
      // Read up to a few frames.
      int reads = 1 + static_cast<int>(random_() % 4);
      for (int i = 0; i < reads && pipeline_->unsent() < 6; ++i) {
        auto rec = reader_->Next();
        if (!rec.ok()) {
          out_.harness_error = "applier read: " + rec.error().message;
          return;
        }
        if (!rec->has_value()) break;
        const log::LogRecord& r = **rec;
        LogFrame frame{r.offset, r.type, r.commit_lsn, std::span<const uint8_t>(r.payload)};
        // Defect: apply chunk rows as they arrive, outside any verified transaction.
        if (r.type == static_cast<uint8_t>(RecordType::Chunk) && Defect("apply_chunks_before_commit_marker")) {
          auto dec = DecodeRecord(std::span<const uint8_t>(r.payload));
          if (dec.ok()) {
            TargetState st = target_.committed;
            for (const auto& c : std::get<Chunk>(*dec).changes)
              st.rows[{std::stoull(c.new_tuple.at(0).data), std::stoi(c.new_tuple.at(1).data)}] += 1;
            target_.Commit(st);
          }
        }
        auto fed = barrier_->Feed(frame);
        if (!fed.ok()) {
          // As the real applier does (Pump before BarrierFailed): everything before the failure is
          // applied first; if that cannot finish now, restart and come back to it.
          ProcessPipeline();
          if (halted_) return;
          if (!pipeline_->empty()) {
            ApplierCrash("transactions before a barrier failure are not all applied yet; retrying");
            return;
          }
          WriteOffset();
          const auto& failure = barrier_->failure();
          Trace("barrier failure: " + fed.error().message);
          if (failure && failure->tx) {
            if (Defect("apply_ignore_barrier_failure")) {
              TargetState st = target_.committed;
              // Apply the chunks that did arrive for the failed transaction.
              auto whole = ReadWholeLog();
              for (const auto& lr : whole) {
                if (lr.type != static_cast<uint8_t>(RecordType::Chunk) || lr.commit_lsn != failure->tx->commit_lsn) continue;
                auto dec = DecodeRecord(std::span<const uint8_t>(lr.payload));
                if (!dec.ok()) continue;
                for (const auto& c : std::get<Chunk>(*dec).changes)
                  st.rows[{std::stoull(c.new_tuple.at(0).data), std::stoi(c.new_tuple.at(1).data)}] = 1;
              }
              target_.Commit(st);
              halted_ = true;
              return;
            }
            QuarantineCause cause;
            cause.reason = QuarantineReason::BarrierFailure;
            cause.detail = failure->reason;
            Quarantine(*failure->tx, Sha256{}, cause);
          } else {
            halted_ = true;
          }
          halted_ = true;
          return;
        }
        if (fed->has_value()) {
          ReadyTransaction ready = std::move(**fed);
          if (ready.chunked()) {
            // A chunked transaction goes alone with nothing queued: drain the pipeline first.
            ProcessPipeline();
            WriteOffset();
            if (halted_ || !pipeline_->empty()) {
              deferred_chunked_.push_back(std::move(ready));
              break;
            }
            ReadyTransaction tx = std::move(ready);
            ApplyDecision d = DecideApply(tx.tx, tx.checksum, target_.Evidence(tx.tx));
            if (Defect("apply_skip_dedup_check")) d.action = ApplyAction::Apply;
            if (d.action == ApplyAction::SkipDuplicate) {
              out_.duplicates_skipped++;
            } else if (d.action == ApplyAction::Apply) {
              TxResult res = ExecuteOnTarget(tx, true);
              if (res != TxResult::Committed) {
                // Retry from the log: the applier restarts at its consumer offset.
                ApplierCrash("chunked transaction not committed; restarting from the consumer offset");
                return;
              }
            } else {
              if (d.action == ApplyAction::QuarantineConflict) Quarantine(tx.tx, tx.checksum, d.cause);
              else halted_ = true;
              return;
            }
            Status s = pipeline_->AppliedAlone(barrier_->RetainFromOffset().value_or(r.offset + 1), tx.tx.commit_lsn);
            if (!s.ok()) {
              out_.harness_error = "AppliedAlone: " + s.error().message;
              return;
            }
          } else {
            // Like the real applier: finished with everything below RetainFromOffset (never past
            // the first frame of a chunked transaction still open in the barrier).
            uint64_t after = barrier_->RetainFromOffset().value_or(r.offset + 1);
            pipeline_->ReadWhole(std::move(ready), after);
          }
        } else {
          pipeline_->ReadNothing(barrier_->RetainFromOffset().value_or(r.offset + 1));
        }
      }
      if (!deferred_chunked_.empty()) {
        // Not expected with one reader loop; restart from the offset to keep it simple and safe.
        ApplierCrash("chunked transaction arrived behind a non-empty pipeline; re-reading");
        return;
      }
      // Some steps only read ahead (the previous batch is still in flight on a real applier).
      if (random_() % 3 != 0) ProcessPipeline();
    }
    if (applier_running_) WriteOffset();
  } catch (const CrashSignal&) {
    // The applier process died; its in-memory state is gone (ApplierCrash already ran).
  }
}

// ---------------------------------------------------------------------------------------------
// invariants

void World::CheckInvariants() {
  // Source confirmed only to durable log, and no acknowledged transaction lost.
  if (writer_) {
    // Accumulated: retention (broker mode) deletes segments the consumers are done with, and what
    // was durable stays so (a power loss takes only unsynced writes).
    uint64_t durable_end = writer_->durable_end();
    for (const auto& [off, meta] : appended_)
      if (off < durable_end && CompletesTransaction(meta.first)) logged_durably_.insert(meta.second);
    for (const auto& s : source_) {
      if (s.commit_lsn <= slot_confirmed_ && s.commit_lsn > log_start_.started_lsn.value_or(0) &&
          !logged_durably_.count(s.commit_lsn))
        Violate("source_confirmed_only_to_durable_log",
                "the slot is confirmed to " + Lsn(slot_confirmed_) + " but xid " + std::to_string(s.xid) + " (commit " +
                    Lsn(s.commit_lsn) + ") has no durable completing frame in the log");
    }
  }
  if (relay_refused_)
    Violate("no_acknowledged_transaction_lost",
            "the relay refuses to start: the log does not cover the slot's confirmed position " + Lsn(slot_confirmed_) +
                " (a confirmed transaction was lost)");
  if (hop_) {
    hop_->CheckReplica();
    // source_ack = broker_quorum: the slot never passes a transaction the broker did not store.
    // (A transaction logged twice needs one of its completing frames with the broker.)
    if (config_.broker_quorum) {
      std::map<uint64_t, std::pair<uint64_t, bool>> completing;  // commit LSN -> (an offset, one stored)
      for (const auto& [off, meta] : appended_)
        if (CompletesTransaction(meta.first) && meta.first != kProgressRecordType && meta.second <= slot_confirmed_ &&
            meta.second > log_start_.started_lsn.value_or(0)) {
          auto& c = completing[meta.second];
          c.first = off;
          c.second = c.second || hop_->Stored(off);
        }
      for (const auto& [lsn, c] : completing)
        if (!c.second)
          Violate("source_confirmed_only_to_broker_quorum",
                  "the slot is confirmed to " + Lsn(slot_confirmed_) + " but the broker never acknowledged offset " +
                      std::to_string(c.first) + " (commit " + Lsn(lsn) + ")");
    }
  }
  // Target-side invariants, on what a reader sees and on what survives a target crash.
  for (const TargetState* st : {&target_.committed, &target_.durable}) {
    const char* which = st == &target_.committed ? "committed" : "durable";
    for (const auto& s : source_) {
      int copies = 0;
      int present = RowsVisible(*st, s, &copies);
      if (copies > 1)
        Violate("none_applied_twice", std::string(which) + " target holds " + std::to_string(copies) + " copies of rows of xid " +
                                          std::to_string(s.xid) + " (commit " + Lsn(s.commit_lsn) + ")");
      if (present != 0 && present != s.changes)
        Violate("no_partial_transaction_visible", std::string(which) + " target shows " + std::to_string(present) + " of " +
                                                      std::to_string(s.changes) + " rows of xid " + std::to_string(s.xid) +
                                                      " (commit " + Lsn(s.commit_lsn) + ")");
      if (s.commit_lsn <= st->checkpoint && present != s.changes)
        Violate("checkpoint_never_ahead_of_data", std::string(which) + " checkpoint " + Lsn(st->checkpoint) +
                                                      " is at or past commit " + Lsn(s.commit_lsn) + " of xid " +
                                                      std::to_string(s.xid) + " whose rows are not all there");
    }
  }
  // The consumer offset never passes a transaction that is not durably applied.
  std::set<uint64_t> below_offset;
  for (const auto& [off, meta] : appended_)
    if (off < consumer_offset_ && CompletesTransaction(meta.first) && meta.first != kProgressRecordType)
      below_offset.insert(meta.second);
  for (uint64_t lsn : below_offset) {
    const SourceTx* s = SourceByLsn(lsn);
    if (s == nullptr) continue;
    int copies = 0;
    if (RowsVisible(target_.durable, *s, &copies) != s->changes)
      Violate("no_acknowledged_transaction_lost", "the consumer offset " + std::to_string(consumer_offset_) + " passed xid " +
                                                      std::to_string(s->xid) + " (commit " + Lsn(lsn) +
                                                      ") which the target does not hold durably");
  }
  // A quarantine halts: nothing after an unresolved quarantined transaction is applied.
  for (const auto& [lsn, q] : target_.quarantine) {
    if (q.state == QuarantineState::Resolved) continue;
    for (const auto& s : source_) {
      if (s.commit_lsn <= lsn) continue;
      int copies = 0;
      if (RowsVisible(target_.committed, s, &copies) > 0)
        Violate("quarantine_halts", "xid " + std::to_string(s.xid) + " (commit " + Lsn(s.commit_lsn) +
                                        ") was applied while xid " + std::to_string(q.xid) + " (commit " + Lsn(lsn) +
                                        ") is quarantined (" + QuarantineStateName(q.state) + ")");
    }
    if (target_.committed.checkpoint > lsn)
      Violate("quarantine_halts", "the checkpoint " + Lsn(target_.committed.checkpoint) + " moved past quarantined commit " + Lsn(lsn));
  }
}

void World::CheckFinal() {
  int applied = 0;
  for (const auto& s : source_) {
    int copies = 0;
    int present = RowsVisible(target_.durable, s, &copies);
    bool expected = !(halted_at_ && s.commit_lsn >= *halted_at_);
    if (present == s.changes) applied++;
    if (expected && present != s.changes)
      Violate("no_acknowledged_transaction_lost", "after draining, xid " + std::to_string(s.xid) + " (commit " +
                                                      Lsn(s.commit_lsn) + ") is not applied on the target (" +
                                                      std::to_string(present) + "/" + std::to_string(s.changes) + " rows)");
    if (!expected && present != 0)
      Violate("quarantine_halts", "xid " + std::to_string(s.xid) + " at or after the quarantined commit " +
                                      Lsn(*halted_at_) + " is on the target");
  }
  out_.applied = applied;
  if (config_.expect_halt && !halted_) Violate("quarantine_halts", "the run was expected to halt at a quarantine but did not");
  if (!config_.expect_halt && halted_ && !config_.repair_after_quarantine)
    Violate("no_acknowledged_transaction_lost", "the applier halted at a quarantine of commit " +
                                                    Lsn(halted_at_.value_or(0)) + " in a run that expects none");
}

SimOutcome World::Run() {
  device_.MakeDirectory("/flows").ok();
  auto done = [this]() {
    bool decoded_all = !source_.empty() && decode_after_ >= source_.back().commit_lsn && relay_running_;
    return decoded_all && applier_running_ && pipeline_ && pipeline_->empty() && !barrier_->RetainFromOffset() &&
           (!hop_ || hop_->Drained(writer_->next_offset())) && reader_->next_offset() >= writer_->next_offset();
  };
  for (step_ = 1; step_ <= config_.max_steps; ++step_) {
    uint64_t pick = random_() % 100;
    if (hop_ && pick >= 30 && pick < 50) {
      // broker mode: the forwarder and the broker take a share of the relay's steps
      if (pick < 45) hop_->ForwarderStep(log_recovered_);
      else hop_->BrokerStep();
    } else if (pick < 45) RelayStep();
    else if (pick < 90) {
      if (!RemoteHostDown()) ApplierStep();
    }
    else if (pick < 95) {
      target_.Flush();
      Trace("target flushes its WAL (flushed " + Lsn(target_.flushed_lsn()) + ")");
    } else if (Fire("target.crash")) {
      Trace("target crash: asynchronous commits after " + Lsn(target_.durable.checkpoint) + " are lost");
      target_.Crash();
      if (applier_running_) ApplierCrash("its target connection broke");
    }
    if (!out_.harness_error.empty()) break;
    CheckInvariants();
    if (halted_ && halted_since_ == 0) halted_since_ = step_;
    // The operator comes a few steps later: meanwhile the applier must stay halted.
    if (halted_ && config_.repair_after_quarantine && step_ >= halted_since_ + 6) {
      // The operator repairs the target (removes the conflicting row) and marks the boundary
      // replay-ready through the real decision.
      std::vector<QuarantineEntry> entries;
      for (const auto& [lsn, q] : target_.quarantine) entries.push_back({q.xid, lsn, q.state, q.reason});
      auto q = target_.quarantine.find(*halted_at_);
      ReplayReadyDecision rr = DecideReplayReady(kFlow, entries, q->second.xid, q->first);
      Trace("operator repairs the target and calls " + ReplayReadyCall(q->second.xid, q->first) + ": " + rr.message);
      if (rr.outcome == ReplayReadyOutcome::Mark) {
        q->second.state = QuarantineState::ReplayReady;
        target_.blocked_lsn.reset();
        halted_ = false;
        halted_at_.reset();
        halted_since_ = 0;
        ApplierCrash("restarted by the operator after replay-ready");
      }
    }
    if (halted_ && step_ > 40) break;
    if (relay_refused_ || applier_refused_) break;  // the flow stopped for good; the violation is recorded
    if (hop_ && hop_->blocked()) break;
    // Caught up: stop, unless a planned fault still waits for an opportunity (a target crash can
    // still come; a relay fault cannot once the source is drained — the run then reports it).
    bool planned_pending = false;
    for (const auto& [point, at] : config_.faults.fire_at)
      if (!out_.faults_fired.count(point)) planned_pending = true;
    if (!halted_ && done() && step_ > 20 && (!planned_pending || step_ > 120)) break;
  }
  out_.steps = step_;
  if (out_.harness_error.empty()) {
    // Drain without faults: the system must converge.
    Trace("drain: no more faults");
    config_.faults.fire_at.clear();
    config_.faults.random_per_mille = 0;
    target_.Flush();
    for (int i = 0; i < 400 && out_.harness_error.empty(); ++i) {
      ++step_;
      if (relay_refused_ || (hop_ && hop_->blocked())) break;
      if (!halted_ && relay_running_ && applier_running_ && pipeline_ && done()) break;
      const int turns = hop_ ? 3 : 2;
      if (i % turns == 0) RelayStep();
      else if (i % turns == 1) ApplierStep();
      else hop_->ForwarderStep(log_recovered_);
      target_.Flush();
      CheckInvariants();
      if (halted_) break;
    }
    target_.Flush();
    if (applier_running_ && pipeline_) WriteOffset();
    CheckInvariants();
    CheckFinal();
  }
  out_.torn_or_lost_writes = device_.writes_torn() + device_.writes_lost();
  // The device defect acts inside SyncData: it ran once any fdatasync was asked for.
  if (config_.defect == "device_fsync_is_noop" && device_.syncs_completed() > 0) out_.defect_fired = true;
  if (!out_.harness_error.empty()) out_.harness_error = "step " + std::to_string(step_) + " seed " + std::to_string(config_.seed) + ": " + out_.harness_error;
  return out_;
}

}  // namespace

SimOutcome RunSimulation(const SimConfig& config) {
  if (config.snapshot) return RunSnapshotSimulation(config);
  World world(config);
  return world.Run();
}

}  // namespace trellara::sim
