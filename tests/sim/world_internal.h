// world_internal.h — the simulated world of world.h, shared by its files: the simulated target,
// the relay's and the applier's processes around the real core components, and the invariants.
// world.cpp runs it; world_relay.cpp, world_applier.cpp and world_checks.cpp hold each side.
#pragma once

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

#include <random>
#include <set>

namespace trellara::sim::world_detail {


constexpr const char* kFlow = "sim";
constexpr uint64_t kSysid = 7000000000000000001ull;
constexpr const char* kLogDir = "/flows/sim";
constexpr const char* kConsumer = "applier";
constexpr uint32_t kEventsOid = 16384;

inline std::string Lsn(uint64_t lsn) { return FormatLsn(lsn); }

inline RelationInfo EventsRelation() {
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
  void Trace(const std::string& line) { out_.Trace(step_, line); }
  void Violate(const std::string& invariant, const std::string& message) {
    out_.Violate(step_, config_.seed, invariant, message);
  }
  bool Defect(const std::string& name) { return out_.Defect(config_.defect, name); }

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

}  // namespace trellara::sim::world_detail
