// main.cpp — trellara_sim: the deterministic simulator's command line (docs/simulator.md).
//
//   trellara_sim --list
//   trellara_sim --run NAME [--seed S] [--defect D]     one named simulation (and, without
//                                                        --defect, its paired defect run too;
//                                                        --clean-only: the clean run alone)
//   trellara_sim --all                                  every named simulation and its paired defect
//   trellara_sim --random N [--seed-base S]             N seeds of a mixed fault schedule
//   --results-dir DIR                                   append one JSON line per run to DIR/sim.jsonl
//   --verbose                                           print every run's trace
//
// Exit status: 0 when every clean run passed its invariants and every paired defect was caught,
// 1 otherwise, 2 on a usage error.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "world.h"

using trellara::sim::SimConfig;
using trellara::sim::SimOutcome;

namespace {

struct Named {
  std::string name;
  std::vector<std::string> seed_rows;  // seed 000 rows this simulation proves
  uint64_t seed;
  std::string what;
  std::string defect;                       // the paired defect
  std::vector<std::string> defect_breaks;   // invariants the defect run must violate (any of them)
  SimConfig config;
};

SimConfig Base(const std::string& name, uint64_t seed) {
  SimConfig c;
  c.name = name;
  c.seed = seed;
  return c;
}

std::vector<Named> NamedSimulations() {
  std::vector<Named> all;
  auto add = [&all](std::string name, std::vector<std::string> rows, uint64_t seed, std::string what,
                    std::string defect, std::vector<std::string> breaks, auto configure) {
    Named n{name, std::move(rows), seed, std::move(what), std::move(defect), std::move(breaks), Base(name, seed)};
    configure(n.config);
    all.push_back(std::move(n));
  };
  // ---- through the broker hop (broker_hop.cpp): forwarder, lossy stream, remote applier ----
  add("publish_ack_loss", {"publish_ack_loss"}, 20260812,
      "through the broker with source_ack = broker_quorum: the broker refuses publishes (no quorum) and stores "
      "batches whose acknowledgement is lost, while the relay's confirm is lost and the log host loses power; the "
      "forwarder resumes after the stream's last record, the slot waits for the broker's quorum, nothing is lost "
      "or applied twice",
      "relay_confirm_before_fsync", {"source_confirmed_only_to_durable_log", "no_acknowledged_transaction_lost"},
      [](SimConfig& c) {
        c.broker = c.broker_quorum = true;
        c.transactions = 12;
        c.faults.fire_at["broker.publish_fails"] = {2, 4, 5, 7};
        c.faults.fire_at["broker.ack_lost"] = {1, 3};
        c.faults.fire_at["relay.confirm_lost"] = {2};
        c.faults.fire_at["relay.power_loss_after_append"] = {5};
      });
  add("crash_after_publish_before_source_ack", {"crash_after_publish_before_source_ack"}, 20260813,
      "through the broker: the relay dies with records durable but the slot not confirmed, the log host loses power "
      "with records appended but not fsynced, and the forwarder dies between the broker's acknowledgement and its "
      "own progress: the restart rule re-decodes exactly what is missing, the forwarder resumes after the stream's "
      "last record",
      "relay_confirm_before_fsync", {"no_acknowledged_transaction_lost", "source_confirmed_only_to_durable_log"},
      [](SimConfig& c) {
        c.broker = true;
        c.faults.fire_at["relay.crash_after_fsync_before_confirm"] = {1, 3};
        c.faults.fire_at["relay.power_loss_after_append"] = {2, 4, 5, 6};
        c.faults.fire_at["forwarder.crash_after_ack_before_progress"] = {1, 2};
      });
  add("qualification_broker_outage_quorum_loss", {"qualification_broker_outage_quorum_loss"}, 20261208,
      "source_ack = broker_quorum and the broker loses its quorum for a stretch of publishes while the source keeps "
      "committing: the relay keeps capturing into the local log, the slot is withheld at what the broker "
      "acknowledged, the forwarder retries; when quorum returns everything flows and the target is exact",
      "forward_progress_before_ack", {"source_confirmed_only_to_broker_quorum"},
      [](SimConfig& c) {
        c.broker = c.broker_quorum = true;
        c.transactions = 14;
        c.faults.fire_at["broker.publish_fails"] = {2, 3, 4, 5, 6, 7, 8, 9};
      });
  add("broker_lost_record_is_refilled", {}, 20261206,
      "the remote applier lags (its host down for 40 steps) and the broker loses acknowledged messages it has not "
      "read, delivers some twice and some out of order, and the forwarder dies while refilling: every hole is seen, never skipped, refilled from the source's "
      "log; the replica equals the log offset for offset and the target is exact (design row, DESIGN §9)",
      "apply_hole_check_skipped", {"replica_matches_log", "no_acknowledged_transaction_lost"},
      [](SimConfig& c) {
        c.broker = true;
        c.transactions = 16;
        c.remote_outage = std::make_pair(25, 40);  // the applier lags: messages wait unread
        c.faults.fire_at["broker.lose_acknowledged"] = {1, 2, 4};
        c.faults.fire_at["broker.duplicate_delivery"] = {1, 3};
        c.faults.fire_at["broker.reorder_delivery"] = {1, 2};
        c.faults.fire_at["forwarder.crash_during_refill"] = {1};
      });
  add("broker_retention_by_remote_appliers", {}, 20261207,
      "the remote applier's host is down while the forwarder publishes and the broker loses messages it has not "
      "read; the remote host also loses power with its replica unsynced: the source's log is held for the remote "
      "applier (not the forwarder), so every hole is refilled (design row, DESIGN §9)",
      "forward_retention_by_forwarder", {"no_acknowledged_transaction_lost"},
      [](SimConfig& c) {
        c.broker = true;
        c.transactions = 24;
        c.large_every = 4;
        c.remote_outage = std::make_pair(30, 120);
        c.faults.fire_at["broker.lose_acknowledged"] = {1, 2};
        c.faults.fire_at["receiver.power_loss_after_append"] = {3};
        c.faults.fire_at["receiver.crash_after_append"] = {2};
      });
  add("duplicate_delivery", {"duplicate_delivery"}, 20260815,
      "records reach the log twice and the applier loses a consumer-offset write: every second delivery is "
      "skipped through the dedup row",
      "apply_skip_dedup_check", {"none_applied_twice"},
      [](SimConfig& c) {
        c.faults.fire_at["transport.duplicate_record"] = {1, 3};
        c.faults.fire_at["applier.offset_write_lost"] = {2};
      });
  add("target_failure_before_commit", {"target_failure_before_commit"}, 20260816,
      "the target refuses COMMITs and the applier dies inside an open target transaction: nothing of the "
      "transaction is visible, it is applied once later",
      "apply_rows_autocommit", {"no_partial_transaction_visible", "none_applied_twice"},
      [](SimConfig& c) {
        c.faults.fire_at["target.commit_fails"] = {1, 3};
        c.faults.fire_at["applier.crash_before_commit"] = {2, 5};
      });
  add("target_quarantine_repair_replay", {"target_quarantine_repair_replay"}, 20260817,
      "the target refuses a row of the 4th transaction (23505): it is quarantined and the applier halts; the "
      "operator repairs the target and marks it replay-ready (DecideReplayReady); it is applied and the rest follows",
      "apply_skip_quarantined", {"quarantine_halts"},
      [](SimConfig& c) {
        c.blocked_event_tx = 3;
        c.repair_after_quarantine = true;
      });
  add("checkpoint_failure_during_apply", {"checkpoint_failure_during_apply"}, 20260818,
      "the origin-progress statement fails inside the target transaction: the rows, dedup row and checkpoint "
      "roll back together and the transaction is applied again",
      "apply_checkpoint_outside_transaction", {"checkpoint_never_ahead_of_data"},
      [](SimConfig& c) { c.faults.fire_at["target.checkpoint_update_fails"] = {1, 2, 4}; });
  add("stream_ack_loss_after_apply", {"stream_ack_loss_after_apply"}, 20260819,
      "the applier commits on the target and dies before writing its consumer offset, a consumer-offset write "
      "is lost, and it dies inside transactions: re-read transactions are skipped as duplicates, none is lost",
      "apply_ack_before_commit", {"no_acknowledged_transaction_lost"},
      [](SimConfig& c) {
        c.faults.fire_at["applier.crash_after_commit_before_offset"] = {1};
        c.faults.fire_at["applier.offset_write_lost"] = {1, 3};
        c.faults.fire_at["applier.crash_before_commit"] = {2, 3, 4, 5, 6};
      });
  add("strict_chunk_relay_crash_after_chunks_before_manifest", {"strict_chunk_relay_crash_after_chunks_before_manifest"},
      20261012,
      "chunked transactions: the relay dies with chunks durable before the manifest, and the power fails between "
      "chunks; the torn tail is re-decoded whole, duplicate chunks are tolerated, nothing is applied before its "
      "commit marker",
      "apply_chunks_before_commit_marker", {"no_partial_transaction_visible", "none_applied_twice"},
      [](SimConfig& c) {
        c.large_every = 2;
        c.faults.fire_at["relay.crash_after_chunks_before_manifest"] = {1};
        c.faults.fire_at["relay.power_loss_mid_chunks"] = {3};
      });
  add("strict_chunk_relay_crash_after_manifest_before_source_ack",
      {"strict_chunk_relay_crash_after_manifest_before_source_ack"}, 20261013,
      "chunked transactions: the relay dies with chunks and manifest durable but no commit marker; the slot is "
      "not confirmed past the transaction and the restart re-decodes it",
      "relay_confirm_at_manifest", {"no_acknowledged_transaction_lost", "source_confirmed_only_to_durable_log"},
      [](SimConfig& c) {
        c.large_every = 2;
        c.faults.fire_at["relay.crash_after_manifest_before_marker"] = {1, 2};
      });
  add("strict_chunk_manifest_arrives_with_missing_chunk", {"strict_chunk_manifest_arrives_with_missing_chunk"},
      20261014,
      "a chunk of a chunked transaction never reaches the log: the barrier fails closed, the transaction is "
      "quarantined (barrier_failure) and nothing of it or after it is applied",
      "apply_ignore_barrier_failure", {"no_partial_transaction_visible"},
      [](SimConfig& c) {
        c.large_every = 2;
        c.expect_halt = true;
        c.faults.fire_at["transport.drop_chunk"] = {2};
      });
  add("strict_chunk_manifest_arrives_before_chunks", {"strict_chunk_manifest_arrives_before_chunks"}, 20261015,
      "the manifest is written before the chunks it lists: it is only a claim until the commit marker, the "
      "transaction is applied whole once",
      "apply_chunks_before_commit_marker", {"no_partial_transaction_visible", "none_applied_twice"},
      [](SimConfig& c) {
        c.large_every = 2;
        c.faults.fire_at["transport.manifest_before_chunks"] = {1, 2, 3};
      });
  add("strict_chunk_target_crash_after_staging_before_commit",
      {"strict_chunk_target_crash_after_staging_before_commit"}, 20261016,
      "chunked transactions: the applier dies after writing rows into the open target transaction, before its "
      "commit; nothing is visible and the transaction is applied whole later",
      "apply_rows_autocommit", {"no_partial_transaction_visible", "none_applied_twice"},
      [](SimConfig& c) {
        c.large_every = 2;
        c.faults.fire_at["applier.crash_before_commit"] = {1, 2, 3};
      });
  add("qualification_target_restart_during_apply", {"qualification_target_restart_during_apply"}, 20261112,
      "synchronous_commit = off on the target and the target crashes while applying: commits not yet flushed are "
      "lost, the consumer offset never passed them (offset tracker) and they are applied again",
      "apply_offset_ignores_flush", {"no_acknowledged_transaction_lost"},
      [](SimConfig& c) {
        c.synchronous_commit = false;
        c.faults.fire_at["target.crash"] = {1, 2, 3, 4};
      });
  // ---- the snapshot world: the initial copy beside the live stream (snapshot_world.cpp) ----
  add("snapshot_source_crash_during_table_copy", {"snapshot_source_crash_during_table_copy"}, 20261301,
      "the copy's source session fails twice while the source takes writes: run and table are marked "
      "failed_recoverable, the rerun with the same run id skips the copied chunks and copies the rest; the handoff "
      "comes after every table, and the target ends equal to the source",
      "snapshot_recopy_completed_chunk", {"snapshot_copy_idempotent", "target_equals_source",
                                          "no_insert_of_existing_or_delete_of_missing"},
      [](SimConfig& c) {
        c.snapshot = true;
        c.faults.fire_at["snapshot.source_crash_during_copy"] = {2, 5};
      });
  add("snapshot_relay_crash_during_table_copy", {"snapshot_relay_crash_during_table_copy"}, 20261302,
      "the relay is killed while a chunk is copied: every backend resets (the copy fails), the relay redelivers its "
      "last transactions (skipped by their dedup rows); the table copy is retried and the handoff waits for it",
      "snapshot_handoff_before_complete", {"handoff_only_when_every_table_complete"},
      [](SimConfig& c) {
        c.snapshot = true;
        c.faults.fire_at["snapshot.relay_crash_during_copy"] = {3};
      });
  add("snapshot_target_crash_during_table_copy", {"snapshot_target_crash_during_table_copy"}, 20261303,
      "the target crashes while chunks are copied: the copy in flight is lost and the run stays copying, the "
      "applier restarts from its consumer offset; the rerun copies what is missing and only then records the handoff",
      "snapshot_handoff_before_complete", {"handoff_only_when_every_table_complete"},
      [](SimConfig& c) {
        c.snapshot = true;
        c.faults.fire_at["snapshot.target_crash_during_copy"] = {2, 4};
      });
  add("snapshot_duplicate_copy_attempt", {"snapshot_duplicate_copy_attempt"}, 20261304,
      "`trellara snapshot` runs again after the handoff: every table is handoff_ready and skipped, no chunk is "
      "copied a second time",
      "snapshot_recopy_completed_chunk", {"snapshot_copy_idempotent"},
      [](SimConfig& c) {
        c.snapshot = true;
        c.faults.fire_at["snapshot.duplicate_copy_attempt"] = {1};
      });
  add("snapshot_ddl_during_table_copy", {"snapshot_ddl_during_table_copy"}, 20261305,
      "a table's definition changes while it is being copied: the handoff is withheld, the table is registered "
      "again and copied under the new definition, then the handoff is recorded",
      "snapshot_handoff_ignores_contract", {"handoff_under_current_contract"},
      [](SimConfig& c) {
        c.snapshot = true;
        c.faults.fire_at["snapshot.ddl_during_copy"] = {2};
      });
  add("snapshot_handoff_recorded_before_stream_start", {"snapshot_handoff_recorded_before_stream_start"}, 20261417,
      "the applier dies right after the handoff is recorded and restarts from its consumer offset: the transactions "
      "after it are applied under the chunk rule (those the copies hold are left out), the rest are duplicates",
      "snapshot_handoff_drops_chunk_rule", {"no_insert_of_existing_or_delete_of_missing", "target_equals_source"},
      [](SimConfig& c) {
        c.snapshot = true;
        c.faults.fire_at["snapshot.applier_crash_after_handoff"] = {1};
      });
  add("relay_power_loss_torn_tail", {}, 20261201,
      "repeated power losses on the log host while records are unsynced: torn tails are truncated by recovery, "
      "nothing acknowledged is lost (not a seed row: the local-log durability boundary)",
      "device_fsync_is_noop", {"no_acknowledged_transaction_lost"},
      [](SimConfig& c) {
        c.transactions = 12;
        c.faults.fire_at["relay.power_loss_after_append"] = {2, 4, 6, 8};
      });
  // ---- partitioned scale mode (partition_world.cpp): partition appliers and the publisher ----
  add("partition_applier_before_ack", {"partition_applier_before_ack"}, 20261901,
      "a partitioned flow in 3 partitions: partition appliers die before and after committing their staged chunks "
      "with their checkpoint, the publisher dies inside its target transaction and between its COMMIT and its "
      "offset; each restarts from what the target holds: no transaction is ever partly visible, none is applied "
      "twice, every one is applied",
      "partition_checkpoint_outside", {"a partition's evidence covers only what it staged",
                                       "no acknowledged transaction lost", "no partial transaction visible"},
      [](SimConfig& c) {
        c.partitioned = true;
        c.transactions = 12;
        c.faults.fire_at["partition.crash_before_commit"] = {2, 5, 9};
        c.faults.fire_at["partition.crash_after_commit"] = {3, 7};
        c.faults.fire_at["publisher.crash_before_commit"] = {2};
        c.faults.fire_at["publisher.crash_after_commit_before_offset"] = {4};
      });
  add("partition_manifest_missing_chunk", {"partition_manifest_missing_chunk"}, 20261902,
      "a partitioned flow in 3 partitions whose last partition applier is down for a stretch while the publisher "
      "waits for its evidence; the transport then drops a chunk of the last transaction: the barriers refuse it, "
      "the publisher quarantines it and halts, with everything before it applied whole and nothing of it visible",
      "partition_publish_before_evidence", {"no partial transaction visible"},
      [](SimConfig& c) {
        c.partitioned = true;
        c.transactions = 10;
        c.expect_halt = true;
        c.remote_outage = std::make_pair(5, 60);
        c.faults.fire_at["transport.drop_chunk"] = {1};
      });
  // ---- fleet fan-in (fleet_world.cpp): 12 store flows into hourly lake epochs ----
  auto fleet = [](SimConfig& c) {
    c.fleet = true;
    c.max_steps = 1500;
  };
  add("fleet_fanin_offline_stores_publish_with_gaps", {"fleet_fanin_offline_stores_publish_with_gaps"}, 20264001,
      "12 stores, 3 of them unreachable the whole time: at the gap deadline the epoch is published "
      "complete_with_gaps naming the 3 missing stores (9/12 complete, 3 missing, 0 quarantined; 9 transactions / "
      "9 changes), its counts those of the 9 stores' transactions; the views do not reach it",
      "lake_complete_ignores_missing", {"complete names every store"},
      [fleet](SimConfig& c) {
        fleet(c);
        c.fleet_offline = 3;
      });
  add("fleet_fanin_late_store_recovery_completes_epoch", {"fleet_fanin_late_store_recovery_completes_epoch"}, 20264002,
      "the 3 unreachable stores return after the epoch was published with gaps, while 2 stores deliver their logs "
      "again: the late stores are appended to the same epoch, complete_with_gaps -> complete (12/12), the counts "
      "recomputed from the dedup set (12 transactions, no replay counted twice); the views then reach it",
      "lake_count_by_increment", {"published counts are the stores' transactions"},
      [fleet](SimConfig& c) {
        fleet(c);
        c.fleet_offline = 3;
        c.fleet_late = true;
        c.fleet_replays = 2;
      });
  add("fleet_fanin_duplicate_store_transaction_replay", {"fleet_fanin_duplicate_store_transaction_replay"}, 20264003,
      "3 stores unreachable, 2 stores deliver their logs again from the start: the identical replays are skipped, "
      "the epoch publishes 9 transactions / 9 changes with gaps, exactly what the 9 stores committed",
      "lake_count_by_increment", {"published counts are the stores' transactions"},
      [fleet](SimConfig& c) {
        fleet(c);
        c.fleet_offline = 3;
        c.fleet_replays = 2;
      });
  add("fleet_fanin_conflicting_duplicate_quarantine", {"fleet_fanin_conflicting_duplicate_quarantine"}, 20264004,
      "3 stores unreachable; store-01 delivers its log again with one transaction altered (same store, LSN and xid, "
      "another checksum): the epoch is quarantined (8/12 complete, 3 missing, 1 quarantined) naming the store, the "
      "LSN and both checksums, and nothing of it is published, not even at the gap deadline",
      "lake_publish_on_conflict", {"nothing of a quarantined epoch is published"},
      [fleet](SimConfig& c) {
        fleet(c);
        c.fleet_offline = 3;
        c.fleet_conflict = true;
      });
  add("qualification_object_store_success_catalog_timeout", {"qualification_object_store_success_catalog_timeout"},
      20264005,
      "12 stores, 2 epochs: the first catalog commit's reply is lost (the epoch is pending_catalog_commit until the "
      "catalog is read: it holds the receipt), the fan-in dies once after writing files and once after recording a "
      "pending receipt, and the catalog refuses a commit once: each retry commits the files already written, found "
      "by their addresses; no file is ever deleted; the views reach each epoch only once its commit is settled",
      "lake_delete_files_on_unknown_commit", {"every file the catalog references exists"},
      [fleet](SimConfig& c) {
        fleet(c);
        c.fleet_epochs = 2;
        c.faults.fire_at["catalog.reply_lost"] = {1};
        c.faults.fire_at["fanin.crash_after_files_before_pending"] = {2};
        c.faults.fire_at["fanin.crash_after_pending_before_commit"] = {2};
        c.faults.fire_at["catalog.commit_fails"] = {2};
      });
  // ---- source failover (failover_world.cpp): a primary, its standby, one promotion ----
  auto failover = [](SimConfig& c) {
    c.failover = true;
    c.failover_hold = true;  // source_ack = 'applied' and the standby hold: the safe posture
  };
  add("source_failover_after_publish_before_ack", {"source_failover_after_publish_before_ack"}, 20264101,
      "source_ack = 'applied' with the standby hold: the primary dies after its relay appended the last transaction "
      "and the applier applied it, before the relay confirmed the slot; the standby is promoted (timeline 2), the "
      "relay on it sets the old log's copy aside and restarts from the synced slot, the applier checks the new "
      "log's timeline (nothing past the branch point) and skips the redelivered transaction by its dedup row",
      "failover_dedup_skipped", {"none_applied_twice"},
      [failover](SimConfig& c) {
        failover(c);
        c.transactions = 8;
        c.faults.fire_at["failover.primary_crash_before_confirm"] = {6};
      });
  add("qualification_source_promotion_while_relay_disconnected",
      {"qualification_source_promotion_while_relay_disconnected"}, 20264105,
      "source_ack = 'applied' with the standby hold: the relay disconnects while the workload goes on (the ack lag, "
      "source flush minus the slot's confirmed position, grows in the trace) and the applier's target is unreachable "
      "(it falls behind the log); the standby keeps receiving WAL and the primary dies while the relay is still away: "
      "the promoted server's relay replays from the last durable acknowledgement (the synced slot), dedup absorbs "
      "what the target already applied, nothing is missed",
      "standby_slot_past_downstream", {"standby_slot_never_past_target", "no_transaction_missed"},
      [failover](SimConfig& c) {
        failover(c);
        c.transactions = 12;
        c.remote_outage = std::make_pair(30, 30);  // the applier is behind the log when the primary dies
        c.faults.fire_at["failover.relay_disconnect"] = {8};
        c.faults.fire_at["failover.primary_crash_while_relay_disconnected"] = {18};
      });
  return all;
}

std::string Exe() { return "build/bin/trellara_sim"; }

struct RunRecord {
  bool passed = false;
  SimOutcome outcome;
  double seconds = 0;
};

// A clean run passes when no invariant is violated, the harness did not fail, and every planned
// fault fired. A defect run passes (= the defect was caught) when it violated one of the
// invariants the defect must break and the defect's code path ran.
RunRecord RunOne(const Named& n, uint64_t seed, const std::string& defect, std::string* why) {
  SimConfig c = n.config;
  c.seed = seed;
  c.defect = defect;
  auto start = std::chrono::steady_clock::now();
  RunRecord r;
  r.outcome = trellara::sim::RunSimulation(c);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const SimOutcome& o = r.outcome;
  if (!o.harness_error.empty()) {
    *why = "simulator failure: " + o.harness_error;
    return r;
  }
  // The clean run must reach every planned fault; a defect run may be caught before the later ones.
  for (const auto& [point, at] : n.config.faults.fire_at) {
    (void)at;
    if (defect.empty() && !o.faults_fired.count(point)) {
      *why = "fault point " + point + " never fired (a fault that never fired proves nothing)";
      return r;
    }
  }
  if (defect.empty()) {
    if (!o.violations.empty()) {
      *why = o.violations.front().invariant + ": " + o.violations.front().message;
      return r;
    }
    r.passed = true;
    return r;
  }
  if (!o.defect_fired) {
    *why = "the defect " + defect + " never ran (harness failure, not a caught defect)";
    return r;
  }
  for (const auto& v : o.violations) {
    for (const auto& b : n.defect_breaks) {
      if (v.invariant == b) {
        r.passed = true;
        *why = "caught: " + v.invariant + ": " + v.message;
        return r;
      }
    }
  }
  *why = o.violations.empty() ? "NOT caught: no invariant was violated"
                              : "NOT caught by the expected invariant; saw " + o.violations.front().invariant + ": " +
                                    o.violations.front().message;
  return r;
}

// The trace up to the first violation (the steps after it add nothing to the explanation).
void PrintTraceToFailure(const SimOutcome& o) {
  int until = o.violations.empty() ? INT32_MAX : o.violations.front().step;
  for (const auto& line : o.trace) {
    int step = std::atoi(line.c_str() + 5);  // "step N: ..."
    if (step > until) break;
    std::cout << "    " << line << "\n";
  }
}

void PrintTrace(const SimOutcome& o, size_t tail) {
  size_t from = o.trace.size() > tail ? o.trace.size() - tail : 0;
  if (from > 0) std::cout << "    ... (" << from << " earlier lines)\n";
  for (size_t i = from; i < o.trace.size(); ++i) std::cout << "    " << o.trace[i] << "\n";
}

struct Results {
  std::string dir;
  void Write(const nlohmann::json& line) const {
    if (dir.empty()) return;
    std::filesystem::create_directories(dir);
    std::ofstream out(std::filesystem::path(dir) / "sim.jsonl", std::ios::app);
    out << line.dump() << "\n";
  }
};

nlohmann::json Invariants(const SimConfig& c) {
  if (c.broker) {
    return {"no acknowledged transaction lost", "none applied twice", "checkpoint never ahead of data",
            "no partial transaction visible", "a quarantine halts", "the source is confirmed only to durable log",
            "the replica matches the source log offset for offset", "the source is confirmed only to what the broker "
            "acknowledged (source_ack = broker_quorum)"};
  }
  if (c.fleet) {
    return {"every file the catalog references exists", "a published epoch holds exactly its stores' transactions",
            "published counts are the stores' transactions", "complete names every store",
            "nothing of a quarantined epoch is published", "views reach only complete epochs",
            "a conflict quarantines its epoch", "every epoch is published"};
  }
  if (c.failover) {
    return {"none applied twice", "the source is confirmed only to what the target applied",
            "the standby's slot is never past the target", "nothing of timeline 2 applied on a target ahead of it",
            "fail closed only when the target holds transactions past the branch point, naming them",
            "with the standby hold the applier never fails closed", "no transaction of the promoted history missed"};
  }
  if (c.partitioned) {
    return {"no partial transaction visible", "none applied twice", "a partition's evidence covers only what it staged",
            "no acknowledged transaction lost", "a quarantine halts", "no staged chunk left"};
  }
  if (c.snapshot) {
    return {"handoff only when every table is complete", "handoff under the current contract",
            "a chunk copied once per registration", "no insert of an existing row or delete of a missing one",
            "every run and table state change allowed", "target equals source at the end"};
  }
  return {"no acknowledged transaction lost", "none applied twice", "checkpoint never ahead of data",
          "no partial transaction visible", "a quarantine halts", "the source is confirmed only to durable log"};
}

// A random run covers every world: the invariants of each.
nlohmann::json AllInvariants() {
  SimConfig broker, snapshot;
  broker.broker = true;
  snapshot.snapshot = true;
  nlohmann::json all = Invariants(broker);
  for (const auto& i : Invariants(snapshot)) all.push_back(i);
  SimConfig partitioned;
  partitioned.partitioned = true;
  for (const auto& i : Invariants(partitioned))
    if (std::find(all.begin(), all.end(), i) == all.end()) all.push_back(i);
  SimConfig fleet;
  fleet.fleet = true;
  for (const auto& i : Invariants(fleet))
    if (std::find(all.begin(), all.end(), i) == all.end()) all.push_back(i);
  SimConfig failover;
  failover.failover = true;
  for (const auto& i : Invariants(failover))
    if (std::find(all.begin(), all.end(), i) == all.end()) all.push_back(i);
  return all;
}

bool RunNamed(const Named& n, uint64_t seed, const std::string& only_defect, bool run_clean, bool run_defect,
              const Results& results, bool verbose) {
  bool ok = true;
  if (run_clean) {
    std::string why;
    RunRecord r = RunOne(n, seed, "", &why);
    const SimOutcome& o = r.outcome;
    std::cout << (r.passed ? "PASS " : "FAIL ") << n.name << " seed " << seed << " (" << o.steps << " steps, "
              << o.applied << " applied, " << o.duplicates_skipped << " duplicates skipped, " << o.quarantined
              << " quarantined, " << o.power_losses << " power losses)" << (r.passed ? "" : ": " + why) << "\n";
    if (!o.summary.empty()) std::cout << "    outcome: " << o.summary << "\n";
    if (verbose) PrintTrace(o, 100000);
    else if (!r.passed) PrintTraceToFailure(o);
    nlohmann::json faults = nlohmann::json::object();
    for (const auto& [p, c] : o.faults_fired) faults[p] = c;
    nlohmann::json points = nlohmann::json::array();
    for (const auto& [p, at] : n.config.faults.fire_at) { (void)at; points.push_back(p); }
    results.Write({{"kind", "simulation"}, {"name", n.name}, {"suite", "simulation"}, {"script", "tests/sim"},
                   {"seed_rows", n.seed_rows}, {"seed", seed}, {"status", r.passed ? "passed" : "failed"},
                   {"duration_s", r.seconds}, {"command", Exe() + " --run " + n.name + " --seed " + std::to_string(seed)},
                   {"fault_points", points}, {"faults_fired", faults}, {"defect", nullptr}, {"pairs_with", nullptr},
                   {"defect_caught", nullptr}, {"invariants", Invariants(n.config)}, {"steps", o.steps},
                   {"transactions_applied", o.applied}, {"duplicates_skipped", o.duplicates_skipped},
                   {"outcome", o.summary},
                   {"error", r.passed ? nlohmann::json(nullptr) : nlohmann::json(why.substr(0, 2000))}});
    ok = ok && r.passed;
  }
  if (run_defect) {
    std::string defect = only_defect.empty() ? n.defect : only_defect;
    std::string why;
    RunRecord r = RunOne(n, seed, defect, &why);
    std::cout << (r.passed ? "PASS " : "FAIL ") << n.name << " with defect " << defect << " seed " << seed << ": " << why
              << "\n";
    if (!r.passed || verbose) PrintTrace(r.outcome, verbose ? 100000 : 40);
    nlohmann::json faults = nlohmann::json::object();
    for (const auto& [p, c] : r.outcome.faults_fired) faults[p] = c;
    if (r.outcome.defect_fired) faults["defect." + defect] = 1;
    nlohmann::json points = nlohmann::json::array({"defect." + defect});
    results.Write({{"kind", "simulation"}, {"name", n.name + "__defect_" + defect}, {"suite", "simulation"},
                   // A negative control proves no row by itself; the matrix binds it as the row's defect.
                   {"script", "tests/sim"}, {"seed_rows", nlohmann::json::array()}, {"seed", seed},
                   {"status", r.passed ? "passed" : "failed"}, {"duration_s", r.seconds},
                   {"command", Exe() + " --run " + n.name + " --seed " + std::to_string(seed) + " --defect " + defect},
                   {"fault_points", points}, {"faults_fired", faults}, {"defect", defect}, {"pairs_with", n.name},
                   {"defect_caught", r.passed}, {"invariants", n.defect_breaks},
                   {"error", r.passed ? nlohmann::json(nullptr) : nlohmann::json(why.substr(0, 2000))}});
    ok = ok && r.passed;
  }
  return ok;
}

// ---- randomized mode ----

SimConfig RandomConfig(uint64_t seed) {
  SimConfig c;
  c.name = "random";
  c.seed = seed;
  std::mt19937_64 shape(seed ^ 0xA5A5A5A5ull);
  c.transactions = 6 + static_cast<int>(shape() % 6);
  c.large_every = static_cast<int>(shape() % 4);  // 0: none
  c.synchronous_commit = shape() % 2 == 0;
  c.faults.random_per_mille = 20 + static_cast<int>(shape() % 60);
  c.snapshot = shape() % 4 == 0;  // a quarter of the seeds run the snapshot world
  c.broker = !c.snapshot && shape() % 3 == 0;  // a third of the others go through the broker hop
  c.broker_quorum = c.broker && shape() % 2 == 0;
  c.partitioned = !c.snapshot && !c.broker && shape() % 4 == 0;  // and a quarter of the rest the partition world
  c.fleet = !c.snapshot && !c.broker && !c.partitioned && shape() % 4 == 0;  // and a quarter of the rest the fleet
  if (c.fleet) {
    c.max_steps = 1500;
    c.fleet_stores = 4 + static_cast<int>(shape() % 9);
    c.fleet_epochs = 1 + static_cast<int>(shape() % 2);
    c.fleet_offline = static_cast<int>(shape() % 4);
    c.fleet_late = shape() % 2 == 0;
    c.fleet_replays = static_cast<int>(shape() % 3);
    c.fleet_conflict = shape() % 5 == 0;
  }
  // and a third of the rest the failover world (drawn only here, so no other world's shape moves)
  c.failover = !c.snapshot && !c.broker && !c.partitioned && !c.fleet && shape() % 3 == 0;
  if (c.failover) {
    c.transactions = 6 + static_cast<int>(shape() % 10);
    c.failover_hold = shape() % 2 == 0;
  }
  return c;
}

bool Fails(const SimOutcome& o) { return !o.harness_error.empty() || !o.violations.empty(); }

int RunRandom(uint64_t count, uint64_t base, const std::string& defect, const Results& results, bool verbose) {
  auto start = std::chrono::steady_clock::now();
  uint64_t failed = 0, faults = 0, power_losses = 0, duplicates = 0;
  std::optional<uint64_t> first_failure;
  for (uint64_t i = 0; i < count; ++i) {
    SimConfig c = RandomConfig(base + i);
    c.defect = defect;
    SimOutcome o = trellara::sim::RunSimulation(c);
    for (const auto& [p, n] : o.faults_fired) faults += n;
    power_losses += o.power_losses;
    duplicates += o.duplicates_skipped;
    if (verbose) PrintTrace(o, 100000);
    if (!Fails(o)) continue;
    failed++;
    if (first_failure) continue;
    first_failure = base + i;
    // Shrink: replay the same seed with fewer injected faults while it still fails.
    std::vector<int> fired = o.random_fault_ids;
    std::set<int> suppressed;
    for (int id : fired) {
      SimConfig t = c;
      t.faults.suppressed = suppressed;
      t.faults.suppressed.insert(id);
      if (Fails(trellara::sim::RunSimulation(t))) suppressed.insert(id);
    }
    SimConfig minimal = c;
    minimal.faults.suppressed = suppressed;
    SimOutcome m = trellara::sim::RunSimulation(minimal);
    std::cout << "FAIL random seed " << (base + i) << ": "
              << (!o.harness_error.empty() ? o.harness_error : o.violations.front().invariant + ": " + o.violations.front().message)
              << "\n  rerun: " << Exe() << " --random 1 --seed-base " << (base + i) << (defect.empty() ? "" : " --defect " + defect)
              << " --verbose\n  minimal trace (" << (fired.size() - suppressed.size()) << " of " << fired.size()
              << " faults kept; suppressed fault ids:";
    for (int id : suppressed) std::cout << " " << id;
    std::cout << "):\n";
    if (Fails(m)) {
      PrintTraceToFailure(m);
      std::cout << "  minimal run violation: "
                << (!m.harness_error.empty() ? m.harness_error : m.violations.front().invariant + ": " + m.violations.front().message)
                << "\n";
    } else {
      std::cout << "  (the shrunk schedule no longer fails; full trace of the original)\n";
      PrintTrace(o, 60);
    }
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  bool want_failures = !defect.empty();
  bool ok = want_failures ? failed > 0 : failed == 0;
  std::cout << (ok ? "PASS " : "FAIL ") << "random: " << count << " seeds from " << base << (defect.empty() ? "" : " with defect " + defect)
            << ", " << failed << " failed, " << faults << " faults injected, " << power_losses << " power losses, "
            << duplicates << " duplicates skipped (" << seconds << " s)\n";
  results.Write({{"kind", "simulation"}, {"name", defect.empty() ? "random_seeds" : "random_seeds__defect_" + defect},
                 {"suite", "simulation"}, {"script", "tests/sim"}, {"seed_rows", nlohmann::json::array()},
                 {"seed", base}, {"seeds", count}, {"status", ok ? "passed" : "failed"}, {"duration_s", seconds},
                 {"command", Exe() + " --random " + std::to_string(count) + " --seed-base " + std::to_string(base) +
                                 (defect.empty() ? "" : " --defect " + defect)},
                 {"fault_points", nlohmann::json::array()}, {"faults_fired", {{"random", faults}}},
                 {"defect", defect.empty() ? nlohmann::json(nullptr) : nlohmann::json(defect)},
                 {"pairs_with", defect.empty() ? nlohmann::json(nullptr) : nlohmann::json("random_seeds")},
                 {"defect_caught", defect.empty() ? nlohmann::json(nullptr) : nlohmann::json(ok)},
                 {"invariants", AllInvariants()},
                 {"error", ok ? nlohmann::json(nullptr)
                              : nlohmann::json(first_failure ? "first failing seed " + std::to_string(*first_failure)
                                                             : std::string("no seed failed with the defect on"))}});
  return ok ? 0 : 1;
}

int Usage(const std::string& message) {
  std::cerr << "trellara_sim: " << message
            << "\nusage: trellara_sim --list | --run NAME [--seed S] [--defect D] | --all | --random N [--seed-base S] "
               "[--defect D]  [--results-dir DIR] [--verbose]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string run, defect, results_dir;
  std::optional<uint64_t> seed, random_count;
  uint64_t seed_base = 1;
  bool list = false, all = false, verbose = false, clean_only = false;
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&](const std::string& flag) -> std::string {
      if (i + 1 >= args.size()) throw std::runtime_error(flag + " needs a value");
      return args[++i];
    };
    try {
      if (args[i] == "--list") list = true;
      else if (args[i] == "--all") all = true;
      else if (args[i] == "--verbose") verbose = true;
      else if (args[i] == "--clean-only") clean_only = true;
      else if (args[i] == "--run") run = value("--run");
      else if (args[i] == "--defect") defect = value("--defect");
      else if (args[i] == "--seed") seed = std::stoull(value("--seed"));
      else if (args[i] == "--seed-base") seed_base = std::stoull(value("--seed-base"));
      else if (args[i] == "--random") random_count = std::stoull(value("--random"));
      else if (args[i] == "--results-dir") results_dir = value("--results-dir");
      else return Usage("unknown argument '" + args[i] + "'");
    } catch (const std::exception& e) {
      return Usage(std::string("bad arguments: ") + e.what());
    }
  }
  if (!defect.empty()) {
    const auto& known = trellara::sim::AllDefects();
    if (std::find(known.begin(), known.end(), defect) == known.end())
      return Usage("unknown defect '" + defect + "' (see --list)");
  }
  Results results{results_dir};
  std::vector<Named> named = NamedSimulations();
  if (list) {
    std::cout << "named simulations (trellara_sim --run NAME [--seed S] [--defect D]):\n";
    for (const auto& n : named) {
      std::cout << "  " << n.name << "  seed " << n.seed << "  paired defect " << n.defect << "\n      " << n.what << "\n";
      if (!n.seed_rows.empty()) std::cout << "      seed 000 row: " << n.seed_rows.front() << "\n";
    }
    std::cout << "fault points:\n";
    for (const auto& p : trellara::sim::AllFaultPoints()) std::cout << "  " << p << "\n";
    std::cout << "defects:\n";
    for (const auto& d : trellara::sim::AllDefects()) std::cout << "  " << d << "\n";
    return 0;
  }
  if (!run.empty()) {
    for (const auto& n : named) {
      if (n.name != run) continue;
      uint64_t s = seed.value_or(n.seed);
      bool ok = defect.empty() ? RunNamed(n, s, "", true, !clean_only, results, verbose)
                               : RunNamed(n, s, defect, false, true, results, verbose);
      return ok ? 0 : 1;
    }
    return Usage("no named simulation '" + run + "' (see --list)");
  }
  if (all) {
    int failed = 0;
    for (const auto& n : named)
      if (!RunNamed(n, seed.value_or(n.seed), "", true, true, results, verbose)) failed++;
    std::cout << (failed == 0 ? "PASS" : "FAIL") << " all named simulations: " << named.size() << " run, " << failed
              << " failed\n";
    return failed == 0 ? 0 : 1;
  }
  if (random_count) return RunRandom(*random_count, seed_base, defect, results, verbose);
  return Usage("nothing to do");
}
