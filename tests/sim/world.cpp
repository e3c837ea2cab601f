// world.cpp — the simulated world around the real core components (see world.h): its scheduler
// and run loop; each side lives in its own file (world_internal.h).
#include "world_internal.h"

namespace trellara::sim {
namespace world_detail {

bool World::Fire(const std::string& point) {
  return faults_.Fire(point, [this](const std::string& line) { Trace(line); }, point == "transport.drop_chunk");
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

}  // namespace world_detail

void SimOutcome::Trace(int step, const std::string& line) {
  trace.push_back("step " + std::to_string(step) + ": " + line);
}

void SimOutcome::Violate(int step, uint64_t seed, const std::string& invariant, const std::string& message) {
  if (violations.size() < 20)
    violations.push_back({step, invariant, "step " + std::to_string(step) + " seed " + std::to_string(seed) + ": " +
                                               message});
}

bool SimOutcome::Defect(const std::string& configured, const std::string& name) {
  if (configured != name) return false;
  defect_fired = true;
  return true;
}

SimOutcome RunSimulation(const SimConfig& config) {
  if (config.snapshot) return RunSnapshotSimulation(config);
  if (config.partitioned) return RunPartitionSimulation(config);
  if (config.fleet) return RunFleetSimulation(config);
  if (config.failover) return RunFailoverSimulation(config);
  world_detail::World world(config);
  return world.Run();
}

}  // namespace trellara::sim
