// world.h — the deterministic simulator's world (tests/sim, docs/simulator.md): a simulated source,
// relay, log device, applier and target wired around the REAL core components (log writer, reader
// and recovery over the real SimulatedDevice; relay AckTracker and DecideRestart; the assembler,
// the barrier; DecideApply, ApplyPipeline and its ApplyOffsetTracker). Only the source, the
// transport between the relay's records and the log, the target and the process/crash semantics
// are simulated; the decisions are the product's own code.
//
// Everything is driven by one seeded std::mt19937_64 (never the clock or addresses): the same seed,
// simulation and defect reproduce the same run, step for step.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace trellara::sim {

// Named fault points (docs/simulator.md lists what each one does).
inline const std::vector<std::string>& AllFaultPoints() {
  static const std::vector<std::string> points = {
      "relay.crash_before_append",            // process dies after decoding, before appending
      "relay.power_loss_after_append",        // power loss after append+submit, before the fsync completed
      "relay.crash_after_fsync_before_confirm",  // process dies with the frames durable, slot not confirmed
      "relay.confirm_lost",                   // the confirm message is lost; the relay reconnects
      "relay.power_loss_mid_chunks",          // chunked tx: power loss after some chunks were written
      "relay.crash_after_chunks_before_manifest",  // chunked tx: chunks durable, process dies
      "relay.crash_after_manifest_before_marker",  // chunked tx: manifest durable, no commit marker
      "transport.duplicate_record",           // a record reaches the log twice
      "transport.manifest_before_chunks",     // the manifest is written before the chunks
      "transport.drop_chunk",                 // one chunk never reaches the log
      "applier.crash_before_commit",          // applier dies inside an open target transaction
      "applier.crash_after_commit_before_offset",  // committed on the target, consumer offset not written
      "applier.offset_write_lost",            // the consumer-offset write is lost (lost consumer ack)
      "target.commit_fails",                  // the target refuses one COMMIT (transient)
      "target.checkpoint_update_fails",       // the origin-progress statement fails inside the transaction
      "target.crash",                         // target crash: asynchronous commits not yet flushed are lost
      // the broker hop (broker_hop.cpp; SimConfig::broker)
      "broker.publish_fails",                 // no quorum: the broker refuses a publish (nothing stored)
      "broker.ack_lost",                      // the broker stored a batch; its acknowledgement is lost
      "broker.lose_acknowledged",             // the broker loses an acknowledged message not yet read
      "broker.duplicate_delivery",            // a message is delivered twice
      "broker.reorder_delivery",              // two messages are delivered in swapped order
      "forwarder.crash_after_ack_before_progress",  // acknowledged, the forwarder's progress not written
      "forwarder.crash_during_refill",        // the forwarder dies while republishing a hole
      "receiver.crash_after_append",          // the remote applier dies with its replica just appended
      "receiver.power_loss_after_append",     // the remote host loses power before the replica's fsync
      // the snapshot world (snapshot_world.cpp)
      "snapshot.source_crash_during_copy",    // the copy's source session fails: run and table failed_recoverable
      "snapshot.relay_crash_during_copy",     // relay SIGKILL: backends reset (the copy fails), records redelivered
      "snapshot.target_crash_during_copy",    // the target crashes: the chunk's copy is lost, the applier restarts
      "snapshot.ddl_during_copy",             // the table's definition changes while it is being copied
      "snapshot.duplicate_copy_attempt",      // `trellara snapshot` runs again after the handoff
      "snapshot.applier_crash_after_handoff", // the applier dies right after the handoff was recorded
      // the partition world (partition_world.cpp)
      "partition.crash_before_commit",        // a partition applier dies with its chunks not yet committed
      "partition.crash_after_commit",         // a partition applier dies right after staging with its checkpoint
      "publisher.crash_before_commit",        // the publisher dies inside its open target transaction
      "publisher.crash_after_commit_before_offset",  // the publisher committed; its consumer offset not written
      // the fleet world (fleet_world.cpp)
      "fanin.crash_before_intake_commit",     // the fan-in dies with a store's records read, not committed
      "fanin.crash_after_files_before_pending",  // data files written, their receipt not recorded
      "fanin.crash_after_pending_before_commit", // the receipt recorded pending, the catalog not committed
      "catalog.commit_fails",                 // the catalog refuses a commit (nothing committed)
      "catalog.reply_lost",                   // the catalog committed; the reply never reaches the fan-in
      // the failover world (failover_world.cpp)
      "failover.primary_crash",               // the primary dies at an arbitrary step: unplanned promotion
      "failover.primary_crash_after_append",  // the primary dies right after its relay appended a transaction
      "failover.primary_crash_before_confirm",  // the primary dies after the applier moved on, before the slot confirm
      "failover.primary_crash_while_relay_disconnected",  // the primary dies while its relay is stopped
      "failover.relay_disconnect",            // the relay stops (slot inactive) for 20-59 steps; the workload goes on
      "failover.standby_cut_off",             // the standby's WAL stream is cut for 10-39 steps: it lags
      "failover.planned_promotion",           // switchover: writes stop, the standby catches up, it is promoted
      "failover.applier_crash_after_commit",  // the applier dies after its target commit, before its consumer offset
  };
  return points;
}

// Paired defects, switched on inside the simulator's adapter code only (never in core).
inline const std::vector<std::string>& AllDefects() {
  static const std::vector<std::string> defects = {
      "relay_confirm_before_fsync",      // confirm the slot when a record is appended, before it is durable
      "relay_confirm_at_manifest",       // treat a Manifest as completing its transaction in the ack tracker
      "device_fsync_is_noop",            // the log device's fdatasync does nothing (SimulatedDevice negative control)
      "apply_skip_dedup_check",          // apply every transaction without DecideApply's dedup evidence
      "apply_ack_before_commit",         // consumer offset passes everything read (ApplyPipeline negative control)
      "apply_offset_ignores_flush",      // consumer offset treats every commit as flushed
      "apply_rows_autocommit",           // each row change commits on its own, outside the transaction
      "apply_checkpoint_outside_transaction",  // origin progress committed before the transaction's rows
      "apply_chunks_before_commit_marker",     // chunks applied as they arrive, before the barrier verified
      "apply_ignore_barrier_failure",    // a barrier failure applies what arrived instead of quarantining
      "apply_skip_quarantined",          // the applier moves past a quarantined transaction
      "snapshot_handoff_before_complete",   // record the handoff as soon as one table is copied
      "snapshot_recopy_completed_chunk",    // a resumed or repeated copy copies completed chunks again
      "snapshot_no_skip_check",             // a chunk copy does not check its snapshot against the applier's skips
      "snapshot_handoff_ignores_contract",  // a table copied partly under an older definition counts as copied
      "snapshot_handoff_drops_chunk_rule",  // after the handoff the applier stops applying the chunk rule
      "apply_hole_check_skipped",           // a record past a hole in the stream is taken as the next one
      "forward_progress_before_ack",        // the forwarder records progress before the broker acknowledged
      "forward_retention_by_forwarder",     // the source log is held only for the forwarder, not the remote applier
      "partition_publish_before_evidence",  // the publisher does not wait for every listed partition's evidence
      "partition_checkpoint_outside",       // a partition applier commits its checkpoint before its staged chunks
      "lake_complete_ignores_missing",      // an epoch published at the gap deadline is called complete
      "lake_count_by_increment",            // an epoch's counts are incremented per arrival, not recomputed
      "lake_publish_on_conflict",           // an epoch with a conflicting duplicate is published anyway
      "lake_delete_files_on_unknown_commit",  // the files of a commit whose reply was lost are deleted
      "standby_slot_past_downstream",       // the standby's slot takes the primary log's durable position, not the slot's
      "failover_dedup_skipped",             // the applier skips the dedup check on the promoted server's log
  };
  return defects;
}

struct FaultPlan {
  // Named simulations: point -> which opportunities (1-based) fire.
  std::map<std::string, std::set<int>> fire_at;
  // Randomized mode: every opportunity of every point fires with this probability (per mille).
  int random_per_mille = 0;
  // Shrinking: fault ids (in firing order of the randomized schedule) that must not fire.
  std::set<int> suppressed;
};

struct SimConfig {
  std::string name;
  uint64_t seed = 1;
  int transactions = 8;
  int large_every = 0;        // every n-th transaction is large (chunked); 0 = none
  int large_changes = 10;     // changes of a large transaction (chunk_changes is 4)
  bool synchronous_commit = true;
  std::optional<int> blocked_event_tx;  // the target refuses this transaction's first row (quarantine)
  bool repair_after_quarantine = false;  // the operator repairs and marks replay-ready
  bool expect_halt = false;   // the run must end halted at a quarantine
  int max_steps = 400;
  bool snapshot = false;      // the snapshot world (initial copy beside the stream) instead of the log world
  bool broker = false;        // the log travels through the broker to a remote applier (broker_hop.h)
  bool partitioned = false;   // the partition world (partition_world.cpp): partition appliers and the publisher
  bool broker_quorum = false; // source_ack = broker_quorum: the slot waits for the broker's acknowledgement
  std::optional<std::pair<int, int>> remote_outage;  // broker: the remote applier's host is down for (from step, steps);
                                                     // partitioned: the last partition applier's;
                                                     // failover: the applier's (its target unreachable)
  bool fleet = false;         // the fleet world (fleet_world.cpp): store flows fanned in to lake epochs
  int fleet_stores = 12;      // fleet: stores
  int fleet_epochs = 1;       // fleet: epochs of one hour the stores write in
  int fleet_offline = 0;      // fleet: stores unreachable from the start ...
  bool fleet_late = false;    // ... that return after the first epoch's gap deadline (else never)
  int fleet_replays = 0;      // fleet: stores whose log is delivered again from its start
  bool fleet_conflict = false;  // fleet: the first store's replay carries one altered transaction
  bool failover = false;      // the failover world (failover_world.cpp): a primary, its standby, one promotion
  bool failover_hold = true;  // failover: the relay never decodes past what the standby flushed (standby_slot_names)
  std::string defect;         // "" = clean
  FaultPlan faults;
};

struct Violation {
  int step = 0;
  std::string invariant;
  std::string message;
};

struct SimOutcome {
  std::vector<Violation> violations;
  std::vector<std::string> trace;            // one line per step and per fault
  std::map<std::string, int> faults_fired;   // point -> times
  std::vector<int> random_fault_ids;         // ids fired in randomized mode (for shrinking)
  int steps = 0;
  int applied = 0;            // distinct transactions applied on the durable target
  int duplicates_skipped = 0;
  int quarantined = 0;
  int power_losses = 0;
  uint64_t torn_or_lost_writes = 0;
  bool defect_fired = false;  // the defect's code path ran at least once
  std::string harness_error;  // the simulator itself failed (never a pass)
  std::string summary;        // a world's one-line outcome ("8/8 applied, 1 redelivered skipped"); may be empty

  // What both worlds record as they run (world.cpp): a trace line of step `step`; a violated
  // invariant (the first 20 kept); whether `name` is the defect under test (`defect` of the
  // configuration), which then counts as fired.
  void Trace(int step, const std::string& line);
  void Violate(int step, uint64_t seed, const std::string& invariant, const std::string& message);
  bool Defect(const std::string& configured, const std::string& name);
};

// The seeded fault schedule of both worlds: a named plan fires a point at its listed opportunities
// (1-based, counted per point); randomized mode draws every opportunity at the plan's rate from the
// world's own generator (so draws stay aligned with the rest of the schedule) and numbers the
// faults it fires, which shrinking suppresses by id.
class FaultScheduler {
 public:
  FaultScheduler(const FaultPlan& plan, std::mt19937_64& random, SimOutcome& out)
      : plan_(plan), random_(random), out_(out) {}

  // `trace` gets the FAULT line of a fired point. `never_random`: the point is not part of the
  // random schedule (log damage that must halt the flow, which a random run does not expect).
  template <typename TraceFn>
  bool Fire(const std::string& point, TraceFn&& trace, bool never_random = false) {
    const int n = ++opportunities_[point];
    bool fire = false;
    if (plan_.random_per_mille > 0) {
      if (never_random) return false;
      if (static_cast<int>(random_() % 1000) < plan_.random_per_mille) {
        const int id = ++random_fault_seq_;
        if (!plan_.suppressed.count(id)) {
          fire = true;
          out_.random_fault_ids.push_back(id);
        }
      }
    } else {
      auto it = plan_.fire_at.find(point);
      fire = it != plan_.fire_at.end() && it->second.count(n);
    }
    if (fire) {
      out_.faults_fired[point]++;
      trace("FAULT " + point + " (opportunity " + std::to_string(n) + ")");
    }
    return fire;
  }

 private:
  const FaultPlan& plan_;
  std::mt19937_64& random_;
  SimOutcome& out_;
  std::map<std::string, int> opportunities_;
  int random_fault_seq_ = 0;
};

SimOutcome RunSimulation(const SimConfig& config);
SimOutcome RunSnapshotSimulation(const SimConfig& config);  // snapshot_world.cpp
SimOutcome RunPartitionSimulation(const SimConfig& config);  // partition_world.cpp
SimOutcome RunFleetSimulation(const SimConfig& config);      // fleet_world.cpp
SimOutcome RunFailoverSimulation(const SimConfig& config);   // failover_world.cpp

}  // namespace trellara::sim
