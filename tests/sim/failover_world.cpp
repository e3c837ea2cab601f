// failover_world.cpp — source failover in the deterministic simulator (docs/simulator.md "The
// failover world"; docs/decisions.md "Flow slots on physical standbys" and "A standby's slot at the
// target's position"): a primary and a physical standby that receives its WAL asynchronously (it
// lags, its stream can be cut), the relay on the primary writing its local log, the standby's slot
// sync, the applier, and one promotion — planned (writes stop, the standby catches up, the applier
// finishes the old primary's log) or unplanned (the primary dies, and its log and consumer offsets
// with it). The decisions are core's: DecideSlotSync (what the standby's slot may take),
// AppliedConsumerOffset (source_ack = 'applied': the primary's slot is confirmed only to the commit
// LSN below the least downstream consumer's offset), DecideLogTimeline (the promoted relay sets the
// standby's copy of the old log aside), FormatLogTimeline / ParseLogTimeline and
// DecideTimelineContinuity (the applier meeting the promoted server's log of timeline 2, branched at
// the switch point), DecideApply (dedup by commit LSN, xid and checksum). Simulated: the servers'
// WAL (transactions with commit LSNs), the standby's receive position, the relay's log as a list of
// records with their consumers' offsets, the target (synchronous commits), the processes' lives.
//
// Two postures: with the standby hold (`SimConfig::failover_hold`, a `standby_slot_names`-like
// rule: the relay never decodes past what the standby flushed) the applier must never fail closed;
// without it, an unplanned promotion may leave the target holding transactions past the branch
// point, and then — only then — the applier must fail closed naming them.
//
// Invariants checked after every step: no transaction applied twice; the primary's slot and the
// standby's slot are never past what the target holds; nothing of timeline 2 is applied on top of
// a target that holds what the promoted server never had. At the applier's timeline decision: it
// fails closed only when the target really holds transactions past the branch point, names their
// range, and never with the hold. At the end: the target equals the promoted server's committed
// history (none missed, none twice, nothing else), or the applier failed closed.
//
// This world never touches the log device, the barrier or the real relay loop (the strict world
// covers them); one promotion per run.
#include "world.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "trellara/apply/apply_decision.h"
#include "trellara/capture/slot_sync.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/record/checksum.h"

namespace trellara::sim {
namespace {

constexpr const char* kFlow = "sim";
constexpr const char* kSlotName = "trellara_sim";
constexpr const char* kApplier = "applier";
constexpr const char* kLogDir = "/var/lib/postgresql/data/trellara/sim";
constexpr uint64_t kSysid = 7000000000000000005ull;  // a physical standby shares its primary's
constexpr uint64_t kStartLsn = 0x3000000;
constexpr uint32_t kFirstXid = 740;
constexpr int kCutOffStepsMin = 10;  // a standby cut-off lasts 10..39 steps
constexpr int kCutOffStepsSpan = 30;
constexpr int kDisconnectStepsMin = 20;  // a relay disconnect lasts 20..59 steps
constexpr int kDisconnectStepsSpan = 40;

std::string Lsn(uint64_t lsn) { return FormatLsn(lsn); }
std::string OneLine(std::string text) {  // a TIMELINE file's lines, for a trace line
  while (!text.empty() && text.back() == '\n') text.pop_back();
  std::replace(text.begin(), text.end(), '\n', ';');
  return text;
}

struct SourceTx {
  uint32_t timeline = 1;
  uint32_t xid = 0;
  uint64_t commit_lsn = 0;
  Sha256 checksum{};
};
using TxKey = std::tuple<uint64_t, uint32_t, Sha256>;  // what names a transaction: commit LSN, xid, content
TxKey KeyOf(const SourceTx& tx) { return {tx.commit_lsn, tx.xid, tx.checksum}; }

// A relay's local log on one server's host: its TIMELINE file, its records (offset = index) and
// its consumers' offsets (files in the log directory: lost with the host).
struct RelayLog {
  std::string timeline_file;
  std::vector<SourceTx> records;
  std::map<std::string, log::ConsumerState> consumers;
  uint64_t durable_lsn() const { return records.empty() ? 0 : records.back().commit_lsn; }
};

struct Applied {
  int copies = 0;
  uint32_t timeline = 0;
};

class FailoverWorld {
 public:
  explicit FailoverWorld(const SimConfig& config) : config_(config), random_(config.seed) {
    slot_ = {kStartLsn, kStartLsn, kFirstXid};
    standby_flush_lsn_ = kStartLsn;
    // The relay starts on the primary with no TIMELINE file: a new log, recorded on timeline 1.
    if (DecideLogTimeline(std::nullopt, 1) != LogTimelineDecision::kRecord) out_.harness_error = "DecideLogTimeline: new log not recorded";
    log_.timeline_file = FormatLogTimeline({1, 0, 0});
    log_.consumers[kApplier] = {};
    log_.consumers[log::kForwarderConsumer] = {};  // a forwarder far ahead must not count (AppliedConsumerOffset)
    standby_log_copy_timeline_ = log_.timeline_file;  // pg_basebackup copied PGDATA, the log with it
    // The standby's slot is created with the reservation it can honour and synced once.
    standby_slot_ = LocalSlot{kStartLsn, kStartLsn, kFirstXid};
    SyncStandbySlot("initial sync");
  }

  SimOutcome Run() {
    for (step_ = 1; step_ <= config_.max_steps && out_.harness_error.empty(); ++step_) {
      const uint64_t pick = random_() % 100;
      if (pick < 20) WorkloadStep();
      else if (pick < 35) StandbyReceiveStep();
      else if (pick < 45) SyncStandbySlot("sync round");
      else if (pick < 70) RelayStep();
      else if (pick < 95) ApplierStep();
      else ChaosStep();
      if (!promoted_ && !relay_running_ && Fire("failover.primary_crash_while_relay_disconnected"))
        UnplannedPromotion("killed while its relay is disconnected");
      OperatorStep();
      CheckInvariants();
      if (failed_closed_ || halted_ || Done()) break;
    }
    if (out_.harness_error.empty() && !failed_closed_ && !halted_ && !Done()) {
      Trace("drain: no more faults");
      config_.faults.fire_at.clear();
      config_.faults.random_per_mille = 0;
      for (int i = 0; i < 600 && out_.harness_error.empty() && !failed_closed_ && !halted_ && !Done(); ++i) {
        ++step_;
        switch (i % 5) {
          case 0: WorkloadStep(); break;
          case 1: StandbyReceiveStep(); break;
          case 2: SyncStandbySlot("sync round"); break;
          case 3: RelayStep(); break;
          default: ApplierStep(); break;
        }
        OperatorStep();
        CheckInvariants();
      }
    }
    out_.steps = step_;
    if (out_.harness_error.empty()) CheckFinal();
    else out_.harness_error = "step " + std::to_string(step_) + " seed " + std::to_string(config_.seed) + ": " + out_.harness_error;
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
  bool HoldActive() const { return config_.failover_hold && !promoted_; }
  uint64_t SourceFlushLsn() const { return history_.empty() ? kStartLsn : std::max(kStartLsn, history_.back().commit_lsn); }
  uint64_t AckLag() const { return SourceFlushLsn() - slot_.confirmed_flush_lsn; }
  std::string AckLagText() const {
    return "ack lag " + std::to_string(AckLag()) + " bytes (source flush " + Lsn(SourceFlushLsn()) +
           ", slot confirmed " + Lsn(slot_.confirmed_flush_lsn) + ")";
  }
  void NoteDisconnectedLag() {
    if (!relay_running_) max_disconnected_lag_ = std::max(max_disconnected_lag_, AckLag());
  }
  bool OnTarget(const SourceTx& tx) const {
    auto it = target_.find(KeyOf(tx));
    return it != target_.end() && it->second.copies > 0;
  }

  // ---- the source: the current primary's workload and its standby ----------------------------
  void WorkloadStep() {
    if (committed_ >= config_.transactions || switchover_pending_) return;
    SourceTx tx;
    tx.timeline = timeline_;
    const uint64_t last = history_.empty() ? kStartLsn : history_.back().commit_lsn;
    // The promoted server writes after its switch point; its xids continue from what it replayed,
    // so a transaction lost with the old primary may see its xid (and LSN range) reused.
    tx.commit_lsn = std::max(last, promoted_ ? branch_lsn_ : 0) + 0x100 + random_() % 0x300;
    tx.xid = history_.empty() ? kFirstXid : history_.back().xid + 1;
    const std::string content = std::to_string(tx.timeline) + "|" + std::to_string(tx.commit_lsn) + "|" +
                                std::to_string(tx.xid) + "|" + std::to_string(random_() % 1000000);
    tx.checksum = Sha256Of(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(content.data()), content.size()));
    history_.push_back(tx);
    committed_++;
    Trace("source (timeline " + std::to_string(timeline_) + ") commits xid " + std::to_string(tx.xid) + " at " +
          Lsn(tx.commit_lsn) + (relay_running_ ? std::string() : "; relay disconnected: " + AckLagText()));
    NoteDisconnectedLag();
  }

  void StandbyReceiveStep() {
    if (promoted_) return;
    if (step_ < standby_cut_until_) return;
    if (Fire("failover.standby_cut_off")) {
      standby_cut_until_ = step_ + kCutOffStepsMin + static_cast<int>(random_() % kCutOffStepsSpan);
      Trace("the standby's WAL stream is cut until step " + std::to_string(standby_cut_until_) + " (flushed " +
            Lsn(standby_flush_lsn_) + ")");
      return;
    }
    int take = 1 + static_cast<int>(random_() % 3);
    uint64_t to = standby_flush_lsn_;
    for (const SourceTx& tx : history_)
      if (tx.commit_lsn > to && take-- > 0) to = tx.commit_lsn;
    if (to == standby_flush_lsn_) return;
    standby_flush_lsn_ = to;
    Trace("standby flushes WAL through " + Lsn(to));
  }

  // The standby's slot sync worker: one round, through the real rule.
  void SyncStandbySlot(const std::string& round) {
    if (promoted_ || !standby_slot_) return;
    PrimarySlot seen = slot_;
    if (Defect("standby_slot_past_downstream") && log_.durable_lsn() > seen.confirmed_flush_lsn)
      seen.confirmed_flush_lsn = log_.durable_lsn();  // the log's durable position, not the applied-capped slot
    const SlotSyncDecision d = DecideSlotSync(seen, standby_slot_, standby_slot_new_, standby_flush_lsn_, kSlotName);
    switch (d.kind) {
      case SlotSyncDecision::Kind::kSet:
        standby_slot_ = LocalSlot{d.restart_lsn, d.confirmed_flush_lsn, d.catalog_xmin};
        standby_slot_new_ = false;
        Trace("standby slot sync (" + round + "): confirmed " + Lsn(d.confirmed_flush_lsn) + ", restart " +
              Lsn(d.restart_lsn) + ", catalog_xmin " + std::to_string(d.catalog_xmin));
        return;
      case SlotSyncDecision::Kind::kWait:
        Trace("standby slot sync (" + round + ") waits: " + d.reason);
        return;
      case SlotSyncDecision::Kind::kKeep:
        return;
    }
  }

  // ---- the relay on the current primary ---------------------------------------------------------
  void RelayStep() {
    if (!relay_running_) {
      if (step_ < relay_down_until_) return;
      relay_running_ = true;
      const auto recorded = ParseLogTimeline(log_.timeline_file);
      if (!recorded.ok() || DecideLogTimeline(recorded->timeline, timeline_) != LogTimelineDecision::kUse)
        out_.harness_error = "the relay's own log is not kUse on reconnect";
      Trace("relay reconnects after " + std::to_string(step_ - disconnected_at_) + " steps; " + AckLagText());
      return;
    }
    if (!switchover_pending_ && Fire("failover.relay_disconnect")) {
      relay_running_ = false;
      disconnected_at_ = step_;
      relay_down_until_ = step_ + kDisconnectStepsMin + static_cast<int>(random_() % kDisconnectStepsSpan);
      Trace("relay disconnects (slot inactive) until step " + std::to_string(relay_down_until_) + "; " + AckLagText());
      NoteDisconnectedLag();
      return;
    }
    // Decode: the restart rule resumes after the slot's confirmed position or the log's tail.
    const uint64_t resume = std::max(slot_.confirmed_flush_lsn, log_.durable_lsn());
    for (const SourceTx& tx : history_) {
      if (tx.commit_lsn <= resume) continue;
      if (HoldActive() && tx.commit_lsn > standby_flush_lsn_) {
        if (!holding_) Trace("relay holds capture at " + Lsn(tx.commit_lsn) + ": the standby flushed only " + Lsn(standby_flush_lsn_));
        holding_ = true;
        break;
      }
      holding_ = false;
      log_.records.push_back(tx);  // appended and fsynced (this world does not tear the log)
      log_.consumers[log::kForwarderConsumer].next_offset = log_.records.size();
      Trace("relay appends xid " + std::to_string(tx.xid) + " (commit " + Lsn(tx.commit_lsn) + ") at offset " +
            std::to_string(log_.records.size() - 1));
      if (!promoted_ && Fire("failover.primary_crash_after_append")) return UnplannedPromotion("killed after the relay's append");
      break;
    }
    // Confirm (source_ack = 'applied'): through the commit LSN below the least consumer's offset.
    const uint64_t offset = AppliedConsumerOffset(log_.consumers);
    if (offset == 0) return;
    const SourceTx& through = log_.records.at(offset - 1);
    if (through.commit_lsn <= slot_.confirmed_flush_lsn) return;
    if (!promoted_ && Fire("failover.primary_crash_before_confirm"))
      return UnplannedPromotion("killed before the relay confirmed " + Lsn(through.commit_lsn));
    slot_ = {through.commit_lsn, through.commit_lsn, through.xid + 1};
    Trace("relay confirms the slot through " + Lsn(through.commit_lsn) + " (applied consumer offset " +
          std::to_string(offset) + ")");
  }

  // ---- the applier -------------------------------------------------------------------------
  void ApplierStep() {
    if (failed_closed_ || halted_) return;
    if (config_.remote_outage && step_ >= config_.remote_outage->first &&
        step_ < config_.remote_outage->first + config_.remote_outage->second) {
      if (!applier_down_) Trace("the applier's target is unreachable until step " +
                                std::to_string(config_.remote_outage->first + config_.remote_outage->second) +
                                ": the applier falls behind the log");
      applier_down_ = true;
      return;
    }
    applier_down_ = false;
    RelayLog& log = reading_old_log_ ? *old_log_ : log_;
    if (!continuity_checked_ && !DecideContinuity(log)) return;
    if (read_offset_ >= log.records.size()) {
      if (reading_old_log_) {  // the old primary's log is finished: on to the promoted server's
        Trace("applier finished the old primary's log (" + std::to_string(read_offset_) + " records); it reads the promoted server's log");
        reading_old_log_ = false;
        old_log_.reset();
        read_offset_ = log_.consumers[kApplier].next_offset;
        continuity_checked_ = false;
      }
      return;
    }
    const SourceTx tx = log.records[read_offset_];
    const bool promoted_log = promoted_ && !reading_old_log_;
    TargetEvidence evidence;
    if (auto it = dedup_.find(tx.commit_lsn); it != dedup_.end()) evidence.dedup = it->second;
    evidence.checkpoint_lsn = checkpoint_;
    ApplyDecision d;
    if (!(promoted_log && Defect("failover_dedup_skipped")))
      d = DecideApply({kFlow, kSysid, tx.xid, tx.commit_lsn}, tx.checksum, evidence);
    switch (d.action) {
      case ApplyAction::Apply: {
        // Rows, dedup row and checkpoint commit in one target transaction (synchronous commit).
        Applied& a = target_[KeyOf(tx)];
        a.copies++;
        a.timeline = tx.timeline;
        dedup_[tx.commit_lsn] = DedupRow{kSysid, tx.xid, tx.checksum};
        checkpoint_ = CheckpointAfter(checkpoint_, tx.commit_lsn);
        Trace("applier applies xid " + std::to_string(tx.xid) + " (commit " + Lsn(tx.commit_lsn) + ", offset " +
              std::to_string(read_offset_) + (promoted_log ? " of the promoted log)" : ")"));
        break;
      }
      case ApplyAction::SkipDuplicate:
        out_.duplicates_skipped++;
        if (promoted_log) redelivered_skipped_++;
        Trace("applier skips xid " + std::to_string(tx.xid) + " (commit " + Lsn(tx.commit_lsn) + "): " +
              (promoted_log ? "redelivered by the promoted server, " : "") + "already applied (dedup row)");
        break;
      case ApplyAction::QuarantineConflict:
      case ApplyAction::WaitReplayReady:
        halted_ = true;
        Violate("target_holds_only_promoted_history", "the applier met " + std::string(ApplyActionName(d.action)) +
                                                          " at commit " + Lsn(tx.commit_lsn) + ": " + d.reason);
        return;
    }
    read_offset_++;
    if (Fire("failover.applier_crash_after_commit")) {
      read_offset_ = log.consumers[kApplier].next_offset;
      continuity_checked_ = false;
      Trace("applier dies after its target commit, before its consumer offset; it restarts at offset " +
            std::to_string(read_offset_));
      return;
    }
    log.consumers[kApplier].next_offset = read_offset_;
  }

  // Before reading a log: what the target says about timelines against the log's TIMELINE file.
  bool DecideContinuity(const RelayLog& log) {
    const auto parsed = ParseLogTimeline(log.timeline_file);
    if (!parsed.ok()) {
      out_.harness_error = "the log's TIMELINE file does not parse: " + parsed.error().message;
      return false;
    }
    TargetTimelineFacts facts;
    facts.applied_timeline = applied_timeline_;
    for (const auto& [lsn, row] : dedup_) {
      (void)row;
      facts.max_applied_lsn = std::max(facts.max_applied_lsn, lsn);
      if (parsed->parent_timeline != 0 && lsn > parsed->branch_lsn) {
        if (facts.applied_past_branch++ == 0) facts.first_past_branch = lsn;
        facts.last_past_branch = lsn;
      }
    }
    const TimelineContinuity d = DecideTimelineContinuity(*parsed, facts, kFlow);
    continuity_checked_ = true;
    switch (d.kind) {
      case TimelineContinuity::Kind::kProceed:
        return true;
      case TimelineContinuity::Kind::kRecord:
        applied_timeline_ = parsed->timeline;
        Trace("applier: " + d.reason);
        return true;
      case TimelineContinuity::Kind::kFailClosed:
        break;
    }
    failed_closed_ = true;
    Trace("applier fails closed: " + d.reason + "; next: " + d.next_step);
    // Legal only when the target really holds transactions the promoted server never had, and the
    // message must name their range; with the standby hold it must never happen.
    std::vector<SourceTx> ahead;
    for (const auto& [key, a] : target_)
      if (a.copies > 0 && std::get<0>(key) > branch_lsn_)
        ahead.push_back({a.timeline, std::get<1>(key), std::get<0>(key), std::get<2>(key)});
    if (ahead.empty())
      Violate("fail_closed_only_when_target_ahead", "the applier failed closed at timeline " +
                                                        std::to_string(parsed->timeline) + " but the target holds nothing past " +
                                                        Lsn(branch_lsn_) + ": " + d.reason);
    else if (d.reason.find(Lsn(ahead.front().commit_lsn) + " .. " + Lsn(ahead.back().commit_lsn)) == std::string::npos ||
             d.reason.find(std::to_string(ahead.size()) + " transaction(s)") == std::string::npos)
      Violate("fail_closed_only_when_target_ahead", "the fail-closed message does not name the " +
                                                        std::to_string(ahead.size()) + " transaction(s) " +
                                                        Lsn(ahead.front().commit_lsn) + " .. " + Lsn(ahead.back().commit_lsn) +
                                                        ": " + d.reason);
    if (config_.failover_hold)
      Violate("hold_never_fails_closed", "with the standby hold the applier failed closed: " + d.reason);
    return false;
  }

  // ---- promotions ------------------------------------------------------------------------
  void ChaosStep() {
    if (promoted_) return;
    if (Fire("failover.primary_crash")) return UnplannedPromotion("killed");
    if (!switchover_pending_ && Fire("failover.planned_promotion")) StartSwitchover("a planned switchover");
  }

  void StartSwitchover(const std::string& why) {
    switchover_pending_ = true;
    Trace("operator starts " + why + ": writes stop on the primary, the standby catches up");
  }

  // Completes a switchover once the standby has everything; starts one when the workload is done
  // and nothing is left to do on the primary (every run ends on a promoted server).
  void OperatorStep() {
    if (promoted_ || !out_.harness_error.empty()) return;
    if (!switchover_pending_) {
      const bool caught_up = committed_ >= config_.transactions && log_.durable_lsn() == SourceFlushLsn() &&
                             slot_.confirmed_flush_lsn == SourceFlushLsn() && read_offset_ == log_.records.size();
      if (caught_up && (step_ > 60 || config_.faults.random_per_mille == 0)) StartSwitchover("a switchover (workload done)");
      return;
    }
    if (standby_flush_lsn_ != SourceFlushLsn()) return;
    SyncStandbySlot("last round before the promotion");
    Trace("the primary shuts down cleanly; " + AckLagText());
    old_log_ = std::move(log_);
    reading_old_log_ = true;  // the old primary's log survives: the applier finishes it first
    Promote(true);
  }

  void UnplannedPromotion(const std::string& why) {
    Trace("the primary is " + why + ": its relay, its log (" + std::to_string(log_.records.size()) + " records through " +
          Lsn(log_.durable_lsn()) + ") and the consumer offsets beside it are gone; " + AckLagText() +
          (relay_running_ ? std::string() : " with the relay disconnected"));
    promoted_while_disconnected_ = !relay_running_;
    lag_at_promotion_ = AckLagText();
    size_t lost = 0;
    while (!history_.empty() && history_.back().commit_lsn > standby_flush_lsn_) {
      history_.pop_back();
      lost++;
    }
    lost_with_primary_ = static_cast<int>(lost);
    if (lost > 0) Trace(std::to_string(lost) + " transaction(s) past " + Lsn(standby_flush_lsn_) + " never reached the standby: lost");
    read_offset_ = 0;  // the applier's log is gone; it reads the promoted server's
    reading_old_log_ = false;
    continuity_checked_ = false;
    Promote(false);
  }

  void Promote(bool planned) {
    promoted_ = true;
    planned_ = planned;
    switchover_pending_ = false;  // the promoted server takes writes
    branch_lsn_ = standby_flush_lsn_;
    timeline_ = 2;
    slot_ = {standby_slot_->restart_lsn, standby_slot_->confirmed_flush_lsn, standby_slot_->catalog_xmin};
    standby_slot_.reset();
    promoted_slot_confirmed_ = slot_.confirmed_flush_lsn;
    Trace(std::string(planned ? "planned" : "unplanned") + " promotion: the standby is the primary on timeline 2, branched off 1 at " +
          Lsn(branch_lsn_) + "; its slot (synced) is confirmed through " + Lsn(slot_.confirmed_flush_lsn));
    // The relay starts on the promoted server: its log directory holds the copy of the old
    // primary's log that pg_basebackup made; never append to it.
    const auto recorded = ParseLogTimeline(standby_log_copy_timeline_);
    if (!recorded.ok() || DecideLogTimeline(recorded->timeline, timeline_) != LogTimelineDecision::kSetAside) {
      out_.harness_error = "DecideLogTimeline did not set the standby's copy of the old log aside";
      return;
    }
    log_ = RelayLog{};
    log_.timeline_file = FormatLogTimeline({timeline_, 1, branch_lsn_});
    log_.consumers[kApplier] = {};
    log_.consumers[log::kForwarderConsumer] = {};
    relay_running_ = true;
    relay_down_until_ = 0;
    holding_ = false;
    Trace("relay on the promoted server: the old log copy moves to " + SetAsideLogDirectory(kLogDir, 1) +
          "; a new log (TIMELINE \"" + OneLine(log_.timeline_file) + "\") from the slot's confirmed position " + Lsn(slot_.confirmed_flush_lsn));
  }

  // Caught up on the promoted server: the applier opened its log (and so decided on its timeline,
  // even when the log is empty), every transaction of its history decoded, applied and
  // acknowledged (the slot is confirmed through its last commit).
  bool Done() const {
    return promoted_ && committed_ >= config_.transactions && !reading_old_log_ && relay_running_ && continuity_checked_ &&
           read_offset_ == log_.records.size() && slot_.confirmed_flush_lsn == SourceFlushLsn();
  }

  // ---- invariants --------------------------------------------------------------------------
  void CheckInvariants() {
    for (const auto& [key, a] : target_)
      if (a.copies > 1)
        Violate("none_applied_twice", "xid " + std::to_string(std::get<1>(key)) + " (commit " + Lsn(std::get<0>(key)) +
                                          ") is on the target " + std::to_string(a.copies) + " times");
    for (const SourceTx& tx : history_) {
      if (tx.commit_lsn <= slot_.confirmed_flush_lsn && !OnTarget(tx))
        Violate("source_confirmed_only_to_applied", "the " + std::string(promoted_ ? "promoted server's" : "primary's") +
                                                        " slot is confirmed through " + Lsn(slot_.confirmed_flush_lsn) +
                                                        " but xid " + std::to_string(tx.xid) + " (commit " +
                                                        Lsn(tx.commit_lsn) + ") is not on the target");
      if (standby_slot_ && tx.commit_lsn <= standby_flush_lsn_ && tx.commit_lsn <= standby_slot_->confirmed_flush_lsn &&
          !OnTarget(tx))
        Violate("standby_slot_never_past_target", "the standby's slot is confirmed through " +
                                                      Lsn(standby_slot_->confirmed_flush_lsn) + " but xid " +
                                                      std::to_string(tx.xid) + " (commit " + Lsn(tx.commit_lsn) +
                                                      ") is not on the target: a promotion now would miss it");
    }
    if (promoted_) {
      bool timeline2 = false, foreign = false;
      std::set<TxKey> history;
      for (const SourceTx& tx : history_) history.insert(KeyOf(tx));
      for (const auto& [key, a] : target_) {
        if (a.copies == 0) continue;
        if (a.timeline == 2) timeline2 = true;
        if (!history.count(key)) foreign = true;
      }
      if (timeline2 && foreign)
        Violate("target_holds_only_promoted_history", "transactions of timeline 2 were applied on top of a target "
                                                      "holding transactions the promoted server never had");
    }
  }

  void CheckFinal() {
    if (!promoted_) {
      Violate("run_ends_promoted", "no promotion within " + std::to_string(step_) + " steps");
      return;
    }
    if (failed_closed_) {
      out_.summary = "failed closed at the promoted server's log: the target holds transactions past " + Lsn(branch_lsn_);
      Trace("final: " + out_.summary);
      return;
    }
    int applied = 0;
    std::set<TxKey> history;
    for (const SourceTx& tx : history_) {
      history.insert(KeyOf(tx));
      if (OnTarget(tx)) applied++;
      else
        Violate("no_transaction_missed", "xid " + std::to_string(tx.xid) + " (commit " + Lsn(tx.commit_lsn) + ", timeline " +
                                             std::to_string(tx.timeline) + ") of the promoted server's history is not on the target");
    }
    for (const auto& [key, a] : target_)
      if (a.copies > 0 && !history.count(key))
        Violate("target_holds_only_promoted_history", "xid " + std::to_string(std::get<1>(key)) + " (commit " +
                                                          Lsn(std::get<0>(key)) + ") is on the target, not on the promoted server");
    out_.applied = applied;
    out_.summary = std::to_string(applied) + "/" + std::to_string(history_.size()) + " applied, " +
                   std::to_string(redelivered_skipped_) +
                   (promoted_while_disconnected_ ? " replayed from the promoted slot's last durable acknowledgement " +
                                                       Lsn(promoted_slot_confirmed_)
                                                 : std::string(" redelivered skipped")) +
                   " (" + (planned_ ? "planned" : "unplanned") + " promotion at " + Lsn(branch_lsn_) +
                   (lost_with_primary_ > 0 ? ", " + std::to_string(lost_with_primary_) + " committed transaction(s) lost with the primary"
                                           : std::string()) + ")";
    if (promoted_while_disconnected_)
      out_.summary += "; ack lag while the relay was disconnected: up to " + std::to_string(max_disconnected_lag_) +
                      " bytes, at the promotion " + lag_at_promotion_;
    Trace("final: " + out_.summary);
  }

  SimConfig config_;
  std::mt19937_64 random_;
  SimOutcome out_;
  FaultScheduler faults_{config_.faults, random_, out_};
  int step_ = 0;
  // the source
  std::vector<SourceTx> history_;  // the current primary's committed history (after a promotion: the promoted server's)
  int committed_ = 0;              // transactions the workload committed (lost ones included)
  uint32_t timeline_ = 1;
  uint64_t standby_flush_lsn_ = 0;
  int standby_cut_until_ = 0;
  PrimarySlot slot_;                       // the current primary's slot of the flow
  std::optional<LocalSlot> standby_slot_;  // the standby's synced slot
  bool standby_slot_new_ = true;
  std::string standby_log_copy_timeline_;  // the TIMELINE file of the standby's copy of the log
  bool switchover_pending_ = false;
  bool promoted_ = false, planned_ = false, promoted_while_disconnected_ = false;
  uint64_t branch_lsn_ = 0;
  uint64_t promoted_slot_confirmed_ = 0;  // where the promoted server's relay resumed
  int lost_with_primary_ = 0;  // committed on the old primary past what the standby flushed
  std::string lag_at_promotion_;
  // the relay
  RelayLog log_;                   // the current primary's log
  std::optional<RelayLog> old_log_;  // a planned switchover: the old primary's log, still read
  bool relay_running_ = true, holding_ = false;
  int relay_down_until_ = 0, disconnected_at_ = 0;
  uint64_t max_disconnected_lag_ = 0;
  // the applier and the target
  bool reading_old_log_ = false, continuity_checked_ = false, failed_closed_ = false, halted_ = false;
  bool applier_down_ = false;
  uint64_t read_offset_ = 0;
  std::map<TxKey, Applied> target_;  // the target's rows by transaction (no key: a double apply shows as 2 copies)
  std::map<uint64_t, DedupRow> dedup_;
  uint64_t checkpoint_ = 0;
  std::optional<uint32_t> applied_timeline_;  // trellara.source_timelines
  int redelivered_skipped_ = 0;
};

}  // namespace

SimOutcome RunFailoverSimulation(const SimConfig& config) { return FailoverWorld(config).Run(); }

}  // namespace trellara::sim
