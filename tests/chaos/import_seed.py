#!/usr/bin/env python3
"""tests/chaos/import_seed.py — builds tests/chaos/matrix.json from seed 000's tables plus the
mapping below (which of our scenarios prove which row, the paired defect, or why a row is not
built). Run it after editing MAPPING; the matrix it writes is committed and is what
`trellara chaos report` reads. The seed's text (boundary, invariant, safety property, recovery,
its own proof command) is copied verbatim; nothing here decides a row's status — the report does,
from the results of a run.

Usage: python3 tests/chaos/import_seed.py SEED_000_FILE > tests/chaos/matrix.json
"""
import json
import sys

# ---- what proves each row ---------------------------------------------------------------------
# proof: the clean scenario(s), each {"kind": integration|ctest|pg_regress|simulation, "name", "script"?};
# every one must pass in the run. defect: the paired defect and the scenario that must catch it
# ("scenario": None = any result declaring pairs_with one of the proof scenarios). A row with no
# defect can at best be "unpaired" in the report, never "covered".

def it(name, script):
    return {"kind": "integration", "name": name, "script": script}


def ct(name):
    return {"kind": "ctest", "name": name}


def rg(name):
    return {"kind": "pg_regress", "name": name}


def paired_by_sim(entry, sim, defect):
    """A curated row paired through the deterministic simulator: the named simulation of the same
    boundary joins its proof (run clean) and its paired defect run is the row's defect scenario."""
    note = entry.get("note", "")
    return dict(entry, proof=entry["proof"] + [{"kind": "simulation", "name": sim}],
                defect={"name": defect, "scenario": {"kind": "simulation", "name": f"{sim}__defect_{defect}"}},
                note=(f"paired through the deterministic simulator: its named simulation {sim} (clean) and its "
                      f"paired defect {defect} run beside the real-process proof; {note}").strip().rstrip(";"))


FAIL_CLOSED = "test_apply_fail_closed.py"
BROKER_ACK = "test_broker_source_ack.py"
BROKER_REMOTE = "test_broker_remote_apply.py"
ROBUSTNESS = "test_apply_robustness.py"
COMMIT_FAILURE = "test_apply_commit_failure.py"
SNAPSHOT = "test_snapshot.py"
HANDOFF = "test_snapshot_handoff.py"
RESEED = "test_verify_reseed.py"
SCHEMA = "test_schema_apply.py"
STREAM = "test_stream_large_transactions.py"
SOAK = "test_soak.py"
CONTRACT = "test_contract_repair.py"
PARTITIONED = "test_partitioned.py"
LAKE = "test_lake_fanin.py"
FAILOVER = "test_failover.py"

NO_SIMULATOR = ("the deterministic simulator (tests/sim, DESIGN §8 layer 2) is not built yet; "
                "this row becomes a named seeded simulation there")
FAILOVER_NOTE = ("real processes on PostgreSQL 15: a primary with trellara and flow app (publication FOR ALL TABLES), a "
                 "pg_basebackup streaming standby with trellara.standby_slot_sync, a target; promotions with pg_ctl "
                 "promote after the primary's immediate (crash) or fast (planned) stop")
NO_BROKER = "the replicated broker hop (trellara forward → NATS JetStream, DESIGN §9) is not built"
FLEET_NOTE = ("the fleet world of the deterministic simulator drives core's epoch decisions (EpochLedger, DecideEpoch, "
              "SettlePendingCommit, CompleteHorizon) over 12 simulated stores, an object store and a catalog, its own "
              "paired defect caught there (the simulation suite's row); this row's paired defect is a real-process "
              "negative control; the real-process scenario runs `trellara lake fanin run` over four store clusters "
              "into an Iceberg lake (Parquet, Avro manifests, JDBC-catalog tables in PostgreSQL) read back by npm "
              "avsc, hyparquet and icebird")


def fleet_sim(sim, defect, real=(), real_defect=None):
    """A fleet row: its named simulation (clean) and real-process scenarios of test_lake_fanin.py as
    proof; the paired defect run of the simulation, or a real-process negative control, as its defect
    (the simulation's own defect run stays on the row of the simulation suite)."""
    scenario = (it(real_defect, LAKE) if real_defect else {"kind": "simulation", "name": f"{sim}__defect_{defect}"})
    return dict(proof=[{"kind": "simulation", "name": sim}] + [it(name, LAKE) for name in real],
                defect={"name": defect, "scenario": scenario}, note=FLEET_NOTE)


NO_STREAMING = ("protocol-v2 streaming of in-progress transactions with spill files (DESIGN §4) is not built "
                "yet (large-transaction issue)")
# The handoff's two paired defects: apply a change the chunk's copy already holds, and
# leave out one it does not. Rows whose failure they would not show stay unpaired (honest).
APPLY_IN_COPY = {"name": "snapshot_apply_in_copy",
                 "scenario": it("negative_control_snapshot_apply_in_copy_is_caught", HANDOFF)}
SKIP_AFTER_COPY = {"name": "snapshot_skip_after_copy",
                   "scenario": it("negative_control_snapshot_skip_after_copy_is_caught", HANDOFF)}
SNAPSHOT_UNPAIRED = ("the real-process scenario runs clean only; its copy-side defect (a completed chunk recopied, "
                     "a handoff before the copy completed) is caught in the simulator")

# Rows proven by a long qualification run outside CI: `make soak` appends its result to
# evidence/soak-<time>.jsonl, and the report counts a run of at least this long (24 hours).
SOAK_EVIDENCE = {"kind": "soak", "min_duration_s": 24 * 3600}

MAPPING = {
    # ---- curated failure matrix ----
    "relay_before_broker_publish": dict(
        proof=[it("relay_failing_after_decoding_does_not_advance_the_slot",
                  "test_capture_standard_tools_and_failures.py"),
               it("forwarder_crash_around_publish_keeps_the_slot_behind_the_broker", BROKER_ACK)],
        defect={"name": "relay_confirm_decoded",
                "scenario": it("negative_control_a_relay_confirming_what_it_decoded_is_caught",
                               "test_capture_standard_tools_and_failures.py")},
        note="both hops: the relay failing before its log append (fault relay.before_log_append; paired defect "
             "defect.relay_confirm_decoded, the relay confirms the transaction it failed to append), and with "
             "source_ack = broker_quorum trellara forward crashing before it publishes (fault "
             "forward.before_publish on a real 3-node JetStream cluster): the slot never passes what the broker "
             "holds"),
    "relay_after_broker_publish_before_source_feedback": dict(
        proof=[ct("restart_resumes_after_last_completing_frame"), ct("torn_chunked_tail_is_redecoded_not_skipped"),
               it("forwarder_crash_around_publish_keeps_the_slot_behind_the_broker", BROKER_ACK)],
        note="relay restart rule (re-decode from the durable tail) at unit level; with source_ack = "
             "broker_quorum, trellara forward killed after the broker's acknowledgement and before its progress "
             "write (fault forward.after_ack_before_progress): it resumes after the stream's last record, the "
             "slot stays behind the broker, nothing is missed or published twice"),
    "source_failover_after_publish_before_ack": dict(
        proof=[it("unplanned_promotion_under_load_redelivers_and_dedup_keeps_exactly_once", FAILOVER),
               it("planned_switchover_under_load_keeps_exactly_once", FAILOVER),
               it("standby_slot_synced_then_promoted_relay_starts_new_log_from_it", FAILOVER)],
        defect={"name": "apply_ignore_dedup",
                "scenario": it("negative_control_dedup_skipped_after_promotion_is_caught", FAILOVER)},
        note=FAILOVER_NOTE + "; the primary crashes (and, planned, shuts down cleanly) under a running workload and "
             "daemon applier while the standby's slot is behind what the target applied: the promoted server's relay "
             "redelivers those transactions and dedup skips them (at least 20, counted); the target never passes the "
             "branch point (trellara.standby_slot_names). Paired defect: the applier ignoring its dedup rows after the "
             "promotion"),
    "source_failover_slot_unsynced": dict(
        proof=[it("unsynced_standby_slot_is_reported_before_promotion", FAILOVER)],
        defect={"name": "standby_reports_synced_while_waiting",
                "scenario": it("negative_control_standby_reporting_synced_while_waiting_is_caught", FAILOVER)},
        note=FAILOVER_NOTE + "; a standby whose slot sync cannot keep the slot (hot_standby_feedback off) reports it "
             "to the primary, whose `trellara source-safety` / `trellara check` warn `failover_slot` unsynced for that "
             "standby (and `failover_boundary` / `failover_hold` for source_ack = local without the hold); fixed, "
             "every failover row is ok. Paired defect: the standby reporting its waiting slot synced"),
    "source_failover_slot_disabled": dict(
        proof=[it("disabled_standby_slot_sync_is_reported_and_promotion_fails_closed", FAILOVER)],
        defect={"name": "failover_posture_unchecked",
                "scenario": it("negative_control_failover_posture_unchecked_is_caught", FAILOVER)},
        note=FAILOVER_NOTE + "; a standby without trellara.standby_slot_sync is reported `failover_slot` disabled by "
             "the primary's source-safety (per physical slot) and `standby_slot` not synced by its own check(); "
             "promoted, the flow fails closed (no slot, nothing captured, source-safety exit 2 naming the missing "
             "slot). Paired defect: check() not reading the standbys' reports"),
    "source_slot_abandoned_idle_timeout": dict(
        proof=[it("check_reports_an_inactive_slot_and_its_wal_cleanup_posture", "test_check_command.py")],
        defect={"name": "check_passes_abandoned_slot",
                "scenario": it("negative_control_check_passing_an_abandoned_slot_is_caught", "test_check_command.py")},
        note="PG15 form of the row: idle_replication_slot_timeout (PG18) and pg_replication_slots.inactive_since "
             "(PG17) do not exist here; the cleanup that can remove an abandoned slot's WAL on PG15 is "
             "max_slot_wal_keep_size. `trellara check --config F` (source rows of trellara.check()) reports the "
             "stopped flow's inactive slot as a warning naming the WAL it retains from, degrades the status, and "
             "says whether cleanup is disabled (-1: warning) or configured (the limit named). The paired defect "
             "is a mutated trellara.check() installed by the test (the verdict is PL/pgSQL, no fault seam "
             "reaches it)"),
    "broker_publish_failure": dict(
        proof=[ct("log_fsync_failure_recovery_never_trusts_page_cache_bytes"),
               ct("log_fsync_failure_in_a_writer_process_recovers_to_its_last_acknowledged_record"),
               it("source_feedback_is_withheld_during_quorum_loss", BROKER_ACK)],
        defect={"name": "log_trust_rescan_after_fsync_failure",
                "scenario": ct("log_fsync_failure_recovery_trusting_rescan_loses_records_negative_control")},
        note="both hops: the local log's fsync failure (fault log.fsync_fails) acknowledges nothing it could not "
             "make durable; with source_ack = broker_quorum, publishes the broker does not acknowledge (two of "
             "three JetStream nodes down) do not advance the source's slot"),
    "local_stream_index_rebuild": dict(
        proof=[ct("missing_index_is_rebuilt_for_offset_replay"),
               ct("stale_index_discovers_durable_tail_without_truncating"),
               ct("inspect_reports_corrupt_index_rebuild"),
               ct("inspect_reports_torn_tail_bytes_before_recovery_append")],
        defect={"name": "log_read_past_invalid_frame",
                "scenario": ct("torn_tail_indexed_as_durable_by_a_scan_reading_past_an_invalid_frame_negative_control")},
        note="paired defect defect.log_read_past_invalid_frame (the scan indexes an invalid frame and resynchronises "
             "on the next frame magic): the torn tail is published as a durable offset and a missing index is "
             "rebuilt over a damaged frame"),
    "local_stream_publish_ack_after_fsync_durability": dict(
        proof=[ct("log_power_loss_never_loses_acknowledged_records")],
        defect={"name": "acknowledge before fdatasync (simulated power loss)",
                "scenario": ct("log_power_loss_without_fsync_loses_acknowledged_records_negative_control")}),
    "applier_before_target_commit": dict(
        proof=[it("commit_failure_in_a_pipelined_batch_is_quarantined_without_origin_dedup_or_offset",
                  COMMIT_FAILURE)],
        defect={"name": "apply_skip_origin_reset",
                "scenario": it("negative_control_skipping_the_origin_reset_is_caught", COMMIT_FAILURE)}),
    "applier_after_target_commit_before_stream_ack": dict(
        proof=[it("apply_worker_replays_safely_when_ack_fails_after_apply", FAIL_CLOSED)],
        defect={"name": "apply_ignore_dedup",
                "scenario": it("negative_control_replay_after_ack_fault_without_dedup_is_caught", FAIL_CLOSED)},
        note="fault apply.after_commit_before_offset (crash and error); the paired defect apply_ignore_dedup runs "
             "the crash round's rerun applying committed transactions again"),
    "duplicate_transaction_replay": dict(
        proof=[it("rereading_the_log_skips_duplicates_and_its_negative_control", FAIL_CLOSED)],
        defect={"name": "apply_ignore_dedup",
                "scenario": it("rereading_the_log_skips_duplicates_and_its_negative_control", FAIL_CLOSED)},
        note="one scenario runs both halves: clean re-read, then the same re-read with the defect"),
    "target_schema_missing": dict(
        proof=[it("missing_target_table_fails_closed_without_checkpoint_or_dedup", FAIL_CLOSED)],
        defect={"name": "apply_skip_quarantined",
                "scenario": it("negative_control_moving_past_a_missing_table_is_caught", FAIL_CLOSED)},
        note="the paired defect moves past the missing_table quarantine instead of halting; the missing-table "
             "checks must fail"),
    "target_update_delete_zero_rows": dict(
        proof=[it("update_delete_zero_row_match_fails_closed", FAIL_CLOSED)],
        defect={"name": "apply_skip_quarantined",
                "scenario": it("negative_control_moving_past_a_quarantine_is_caught", FAIL_CLOSED)}),
    "filtered_reseed_preserves_out_of_scope_rows": dict(
        proof=[it("filtered_reseed_preserves_out_of_scope_rows", RESEED)],
        defect={"name": "reseed_delete_ignores_filter",
                "scenario": it("negative_control_reseed_delete_ignores_filter_is_caught", RESEED)},
        note="paired defect defect.reseed_delete_ignores_filter (the delete step of reseed --where without the "
             "filter): the rows outside the filter are deleted"),
    "pgoutput_schema_change_during_stream": dict(
        proof=[it("drift_without_ddl_record_is_quarantined_before_anything_applies", SCHEMA),
               ct("drift_verdicts_known_first_sight_drift_and_replay_ready")],
        defect={"name": "drift_accepted_as_known",
                "scenario": it("negative_control_drift_accepted_as_known_is_caught", SCHEMA)},
        note="paired defect defect.drift_accepted_as_known (an unexplained fingerprint of a relation known under "
             "the same name accepted as known): the drifted transaction is not stopped as schema_drift: its "
             "statements run on the target, which refuses the new column (missing_column)"),
    "pgoutput_row_without_relation_metadata": dict(
        proof=[ct("change_on_an_undescribed_relation_is_an_error")],
        defect={"name": "apply_skip_undescribed_relation",
                "scenario": ct("change_on_an_undescribed_relation_skipped_negative_control")},
        note="applier-side: a change on a relation without metadata fails closed; the paired defect passes it "
             "over as not applied"),
    "source_schema_handoff_recovery": dict(
        proof=[it("source_schema_change_recovered_by_following_the_repair_plan", CONTRACT)],
        defect={"name": "repair_plan_omits_resnapshot",
                "scenario": it("negative_control_repair_plan_omits_resnapshot_is_caught", CONTRACT)},
        note="paired defect defect.repair_plan_omits_resnapshot (the repair step without snapshot --force): "
             "following the plan as printed leaves the existing rows diverged and verify fails"),
    "pgoutput_dml_truncate_envelope_mapping": dict(
        proof=[rg("plugin_ops"), ct("plans_truncate_in_source_order")],
        defect={"name": "apply_truncate_cascade", "scenario": ct("truncate_replaying_cascade_negative_control")},
        note="the paired defect replays the source's CASCADE, truncating target tables the record does not list"),
    "pgoutput_ddl_only_boundary": dict(
        proof=[rg("plugin_ddl"), it("migration_under_load_converges_with_applier_killed", SCHEMA)],
        defect={"name": "ddl_record_dropped",
                "scenario": it("negative_control_ddl_record_dropped_is_caught", SCHEMA)}),
    "pgoutput_mixed_ddl_dml_boundary": dict(
        proof=[rg("plugin_ddl"), it("migration_under_load_converges_with_applier_killed", SCHEMA)],
        defect={"name": "ddl_dml_before_ddl",
                "scenario": it("negative_control_dml_before_ddl_is_caught", SCHEMA)}),
    "pgoutput_streamed_transaction_spills_until_commit": dict(
        proof=[it("streamed_transaction_spills_until_commit", STREAM),
               it("relay_kill9_while_streaming_applies_once", STREAM),
               it("relay_kill9_at_stream_commit_applies_once", STREAM),
               ct("pgoutput_streamed_transaction_spills_until_commit: replay logs the bytes of a transaction decoded at commit")],
        defect={"name": "stream_log_before_commit",
                "scenario": it("negative_control_stream_log_before_commit_is_caught", STREAM)},
        note="the paired defect makes the relay also log each streamed change as it arrives; the open-transaction "
             "check must fail"),
    "pgoutput_stream_abort_discards_partial_changes": dict(
        proof=[it("stream_abort_discards_top_transaction", STREAM),
               it("stream_abort_discards_exactly_the_rolled_back_subtransactions", STREAM)],
        defect={"name": "stream_subxact_abort_kept",
                "scenario": it("negative_control_subxact_abort_kept_is_caught", STREAM)}),
    "pgoutput_keepalive_reports_last_durable_ack": dict(
        proof=[ct("confirm_follows_last_fully_durable_transaction"), ct("confirmed_position_never_moves_backwards")],
        note="no walsender: the relay confirms the slot itself, only to the last fully durable transaction; the "
             "confirm-before-fsync defect is caught by the simulator's power loss (a kill -9 keeps the page cache)"),
    "missing_replica_identity": dict(
        proof=[it("check_reports_a_published_table_without_replica_identity_as_critical", "test_check_command.py"),
               ct("contract_requires_replica_identity_only_when_updates_or_deletes_are_published")],
        defect={"name": "contract_default_identity_without_key",
                "scenario": ct("contract_passes_a_keyless_default_identity_table_negative_control")},
        note="the preflight is `trellara check --config F` (source check() rows + target checks): exit 2 naming "
             "the keyless table; it does not stop a relay that is already running. The check's replica-identity "
             "verdict is decided in the extension's PL/pgSQL trellara.check(), which no fault seam reaches; the "
             "paired defect is in the other guard the row names, `trellara contract-test` (core "
             "CheckReplicaIdentity): defect.contract_default_identity_without_key takes REPLICA IDENTITY DEFAULT "
             "without a primary key as usable; caught at unit level"),
    "default_replica_identity_primary_key_apply": dict(
        proof=[ct("plans_update_with_key_predicate")],
        defect={"name": "apply_match_whole_new_row", "scenario": ct("update_matched_by_whole_new_row_negative_control")},
        note="planner level: the paired defect matches an UPDATE on every column of its new row instead of the key"),
    "default_replica_identity_key_change_apply": dict(
        proof=[ct("key_changing_update_sets_new_key_and_matches_old_key"),
               it("key_changing_update_sets_new_key_and_matches_old_key", FAIL_CLOSED)],
        defect={"name": "apply_match_new_key", "scenario": ct("key_changing_update_matched_by_new_key_negative_control")},
        note="the paired defect matches a key-changing UPDATE by its new key instead of the old key image "
             "(planner level; the real-process scenario runs clean)"),
    "unchanged_toast_columns_preserved": dict(
        proof=[ct("update_omits_absent_non_key_columns_for_unchanged_toast"),
               ct("update_omits_explicit_unchanged_toast_marker"),
               it("hostile_identifiers_and_values_replicate_exactly", ROBUSTNESS)],
        defect={"name": "unchanged_toast_as_null",
                "scenario": it("negative_control_unchanged_toast_as_null_is_caught", ROBUSTNESS)},
        note="the paired defect writes an unchanged-TOAST column as NULL; the hostile-values scenario must fail"),
    "snapshot_duplicate_copy_attempt": dict(proof=[it("snapshot_duplicate_copy_attempt", SNAPSHOT)],
                                            note=SNAPSHOT_UNPAIRED),
    "snapshot_incomplete_copy_resume": dict(proof=[it("snapshot_incomplete_copy_resume", SNAPSHOT)],
                                            note=SNAPSHOT_UNPAIRED),
    "snapshot_source_crash_during_copy": dict(proof=[it("snapshot_source_crash_during_copy", SNAPSHOT)],
                                              note=SNAPSHOT_UNPAIRED),
    "snapshot_relay_crash_during_copy": dict(proof=[it("snapshot_relay_crash_during_copy", SNAPSHOT)],
                                             note=SNAPSHOT_UNPAIRED),
    "snapshot_target_crash_during_copy": dict(proof=[it("snapshot_target_crash_during_copy", SNAPSHOT)],
                                              note=SNAPSHOT_UNPAIRED),
    "snapshot_copy_failure_marked_recoverable": dict(
        proof=[it("snapshot_copy_failure_marked_recoverable", SNAPSHOT)],
        defect={"name": "snapshot_failure_not_recorded",
                "scenario": it("negative_control_snapshot_failure_not_recorded_is_caught", SNAPSHOT)},
        note="paired defect defect.snapshot_failure_not_recorded (the copy failure is kept in the process's memory "
             "only: the table stays copying with no last_error); the failure checks must fail"),
    "snapshot_invalid_state_regression": dict(
        proof=[it("snapshot_invalid_state_regression", SNAPSHOT)],
        defect={"name": "snapshot_state_regression",
                "scenario": it("negative_control_snapshot_state_regression_is_caught", SNAPSHOT)},
        note="paired defect defect.snapshot_state_regression (core CheckSnapshotTransition lets a backward move "
             "through without --force: the handoff_ready table is copied again under another run); the refusal "
             "checks must fail"),
    "snapshot_exported_visibility_boundary": dict(proof=[it("snapshot_exported_visibility_boundary", HANDOFF)],
                                                  defect=APPLY_IN_COPY),
    "partition_manifest_missing_chunk": dict(
        proof=[ct("a_partitioned_transaction_missing_a_chunk_is_refused_before_apply"),
               it("the_watermark_holds_publication_until_every_listed_partition_has_evidence", PARTITIONED),
               {"kind": "simulation", "name": "partition_manifest_missing_chunk"}],
        defect={"name": "partition_publish_before_evidence",
                "scenario": it("negative_control_publish_before_evidence_is_caught", PARTITIONED)},
        note="the barrier (every applier of a partitioned flow reads through it) refuses a missing, repeated or "
             "re-sequenced chunk; a real publisher never applies a transaction while a listed partition has not "
             "staged its part (partition 1's applier not running); paired defect: a publisher that does not wait "
             "for every partition's evidence, caught by the reader seeing partial transactions; the partition world "
             "of the simulator (partition_manifest_missing_chunk) drops a chunk and holds a partition applier "
             "down, its paired defect caught by the no-partial-visibility invariant"),
    "partition_chunk_routing_header_mismatch": dict(
        proof=[ct("a_chunk_whose_rows_route_elsewhere_than_its_header_is_refused"),
               ct("a_partition_applier_accepts_only_listed_chunks_of_its_own_partition")],
        defect={"name": "partition_routing_unchecked",
                "scenario": ct("a_chunk_whose_rows_route_elsewhere_passes_an_unchecked_router_negative_control")},
        note="core CheckRowsRoute and CheckChunk, called by `trellara apply --partition K` before it stages a "
             "chunk; paired defect defect.partition_routing_unchecked trusts the routing header"),
    "partition_commit_marker_ack_ambiguous": dict(
        proof=[it("partitioned_relay_failing_before_the_manifest_does_not_advance_the_slot", PARTITIONED)],
        defect={"name": "relay_confirm_decoded",
                "scenario": it("negative_control_partitioned_relay_confirming_before_the_marker_is_caught",
                               PARTITIONED)},
        note="real relay of a partitioned flow failing at relay.after_chunks_before_manifest on every start: the "
             "slot stays before the transaction; after the fault the target is exact. Paired defect: the relay "
             "confirms the transaction it decoded before its manifest and commit marker were durable"),
    "partition_commit_marker_manifest_mismatch": dict(
        proof=[ct("a_partitioned_commit_marker_that_disagrees_with_its_manifest_is_refused")],
        defect={"name": "barrier_marker_unbound",
                "scenario": ct("a_commit_marker_of_another_manifest_passes_an_unbinding_barrier_negative_control")},
        note="barrier level, the same barrier every applier of a partitioned flow reads through; paired defect: a "
             "barrier that does not check the commit marker binds the manifest it received"),
    "strict_chunk_manifest_missing_chunk": dict(
        proof=[ct("strict_chunk_manifest_arrives_with_missing_chunk")],
        note="paired defect apply_before_manifest is not built yet"),
    "strict_chunk_out_of_order_arrival": dict(proof=[ct("strict_chunk_manifest_arrives_before_chunks")]),
    "strict_chunk_relay_crash_after_chunks_before_manifest": dict(
        proof=[ct("strict_chunk_relay_crash_after_chunks_before_manifest")],
        note="barrier level; the real-process fault relay.after_chunks_before_manifest is run on a partitioned "
             "flow (partitioned_relay_failing_before_the_manifest_does_not_advance_the_slot), not on a strict one"),
    "strict_chunk_partial_publish_failure": dict(proof=[ct("torn_chunked_tail_is_redecoded_not_skipped")]),
    "strict_chunk_relay_crash_after_manifest_before_source_ack": dict(
        proof=[ct("strict_chunk_relay_crash_after_manifest_before_marker_is_applied_once")]),
    "strict_chunk_target_crash_after_staging_before_commit": dict(
        proof=[it("chunked_transaction_applies_atomically_and_once", ROBUSTNESS)]),
    "protocol_property_chunk_manifest_reconstruction": dict(
        proof=[ct("barrier_property_generated_logs_yield_exactly_the_valid_transactions"),
               ct("a_partitioned_transaction_reconstructs_its_source_order_property")],
        defect={"name": "barrier_trust_manifest",
                "scenario": ct("barrier_property_with_a_barrier_that_trusts_the_manifest_negative_control")},
        note="the same 400 generated logs and seed with defect.barrier_trust_manifest must violate the property "
             "(the tamper_resealed shape yields a transaction); partitioned: 200 random transactions over 1-8 "
             "partitions pass the barrier and merge by position back into the source order and checksum"),
    "strict_chunk_checksum_tampering": dict(
        proof=[ct("tampered_chunk_fails_closed")],
        defect={"name": "barrier_trust_manifest",
                "scenario": ct("tampered_chunk_passes_a_barrier_that_trusts_the_manifest_negative_control")},
        note="paired defect defect.barrier_trust_manifest (the barrier trusts the manifest instead of checking "
             "the chunks against it): the tampered, re-sealed chunk passes as a ready transaction"),
    "barrier_conflicting_duplicate_messages": dict(
        proof=[ct("conflicting_duplicate_chunk_fails_closed")],
        defect={"name": "barrier_duplicate_by_seq",
                "scenario": ct("conflicting_duplicate_chunk_passes_a_barrier_matching_by_seq_negative_control")},
        note="the paired defect recognises a duplicate chunk by (transaction, seq) alone and keeps the first copy"),
    "partition_applier_before_ack": dict(
        proof=[it("partitioned_flow_survives_kills_with_nothing_partial_visible", PARTITIONED),
               it("the_watermark_holds_publication_until_every_listed_partition_has_evidence", PARTITIONED),
               {"kind": "simulation", "name": "partition_applier_before_ack"}],
        defect={"name": "partition_checkpoint_outside",
                "scenario": it("negative_control_partition_checkpoint_outside_the_staging_transaction_is_caught",
                               PARTITIONED)},
        note="real partition appliers and publisher killed (SIGKILL and at partition.before_commit / "
             "partition.after_commit) under transfers while a reader checks every snapshot of the target; paired "
             "defect: the checkpoint committed outside the staging transaction; the partition world of the "
             "simulator (partition_applier_before_ack) crashes partition appliers and the publisher at every "
             "boundary, its paired defect (partition_checkpoint_outside) caught by the evidence invariant"),
    "fleet_fanin_offline_stores_publish_with_gaps": fleet_sim("fleet_fanin_offline_stores_publish_with_gaps",
                                                              "lake_views_past_incomplete_epoch",
                                                              ["offline_store_publishes_with_gaps_then_late_store_completes"],
                                                              "negative_control_views_past_an_incomplete_epoch_are_caught"),
    "fleet_fanin_late_store_recovery": fleet_sim("fleet_fanin_late_store_recovery_completes_epoch",
                                                 "lake_count_by_increment",
                                                 ["offline_store_publishes_with_gaps_then_late_store_completes"],
                                                 "negative_control_late_store_counts_incremented_are_caught"),
    "fleet_fanin_duplicate_store_replay": fleet_sim("fleet_fanin_duplicate_store_transaction_replay",
                                                    "lake_count_by_increment",
                                                    ["replayed_store_is_skipped_and_a_conflicting_duplicate_quarantines"],
                                                    "negative_control_replay_counted_again_is_caught"),
    "fleet_fanin_conflicting_duplicate_quarantine": fleet_sim("fleet_fanin_conflicting_duplicate_quarantine",
                                                              "lake_publish_on_conflict",
                                                              ["replayed_store_is_skipped_and_a_conflicting_duplicate_quarantines"],
                                                              "negative_control_publishing_a_quarantined_epoch_is_caught"),
    "qualification_source_promotion_while_relay_disconnected": dict(
        proof=[it("promotion_while_relay_disconnected_replays_from_the_last_applied_position", FAILOVER),
               it("target_ahead_of_the_promoted_server_fails_closed", FAILOVER)],
        defect={"name": "standby_slot_past_downstream",
                "scenario": it("negative_control_standby_slot_past_downstream_is_caught", FAILOVER)},
        note=FAILOVER_NOTE + "; with source_ack = 'applied' the slot and its standby copy stay at what the target "
             "applied; the relay is stopped while the workload goes on (relay_metrics() and `trellara status "
             "--view diagnostics` show source_ack_lag_bytes growing), the primary crashes, the standby is promoted: "
             "the new log replays from the last applied position and the target equals the promoted server; a target "
             "that got ahead of a standby (no hold) makes the applier fail closed naming the range, repair-plan gives "
             "the reseed. Paired defect: the standby's slot synced to the primary's log-durable position"),
    "qualification_broker_outage_quorum_loss": dict(
        proof=[it("source_feedback_is_withheld_during_quorum_loss", BROKER_ACK),
               it("quorum_loss_under_remote_apply_resumes_exactly", BROKER_REMOTE)],
        defect={"name": "forward_progress_before_ack",
                "scenario": it("source_feedback_defect_progress_before_ack_is_caught", BROKER_ACK)},
        note="real 3-node JetStream cluster, two nodes killed under writes: with source_ack = broker_quorum the "
             "slot stays behind what the broker acknowledged, publish retries count, `trellara status --view "
             "alerts` fires broker_quorum_unavailable and /readyz answers 503 (forwarder and remote applier); "
             "after quorum returns the slot advances and the remote target is exact. Paired defect: the "
             "forwarder recording progress before the broker's acknowledgement"),
    "qualification_target_restart_during_apply": dict(
        proof=[it("target_immediate_restart_while_applying_converges", ROBUSTNESS)],
        defect={"name": "apply_offset_ignores_flush",
                "scenario": it("negative_control_offset_past_flush_is_caught", ROBUSTNESS)},
        note="the target stops immediately while the daemon applier commits (synchronous_commit = off) and loses "
             "committed transactions; before the rerun `trellara status --view diagnostics` (json and text) must "
             "name the replay boundary (the log consumer offset, the target's origin progress, the pending "
             "transactions' last commit LSN) and `trellara apply --config`; the rerun converges exactly once. "
             "The paired defect records the offset as far as the target committed rather than flushed"),
    "qualification_object_store_success_catalog_timeout": fleet_sim(
        "qualification_object_store_success_catalog_timeout", "lake_delete_files_on_unknown_commit",
        ["catalog_commit_outcomes_are_settled_by_reading_the_catalog"],
        "negative_control_deleting_files_of_an_unknown_commit_is_caught"),
    "qualification_twenty_four_hour_soak_large_transaction_memory_ceiling": dict(
        evidence=SOAK_EVIDENCE,
        reason="proven by a 24-hour `make soak` run outside CI (its memory ceiling, lag and convergence checks "
               "must pass): the report reads the committed evidence/soak-*.jsonl and names the longest run, its "
               "revision and when it finished; CI runs a 20-second window of the same command "
               "(test_soak.py soak_with_child_applier_passes_and_reports_memory_and_lag)"),
    "snapshot_ddl_during_copy": dict(
        proof=[it("ddl_during_snapshot_copy_withholds_handoff", SCHEMA)],
        note="no paired defect yet (a handoff that ignores the withheld state is not built as a negative control)"),
    "snapshot_handoff_recorded_before_stream_start": dict(
        proof=[it("snapshot_handoff_recorded_before_stream_start", HANDOFF)], defect=SKIP_AFTER_COPY),
    "repair_and_replay_ready": dict(
        proof=[it("update_delete_zero_row_match_fails_closed", FAIL_CLOSED),
               it("partitioned_quarantine_is_repaired_and_replayed_at_the_exact_boundary", PARTITIONED)],
        note="repair + replay-ready then apply, for a strict and for a partitioned transaction (quarantined whole "
             "by the publisher, its staged chunks kept for the replay)"),
    "quarantine_replay_ready_requires_exact_boundary": dict(
        proof=[it("update_delete_zero_row_match_fails_closed", FAIL_CLOSED),
               it("partitioned_quarantine_is_repaired_and_replayed_at_the_exact_boundary", PARTITIONED),
               ct("quarantine_replay_ready_refuses_unknown_transaction_boundary")],
        defect={"name": "replay_ready_xid_only",
                "scenario": ct("quarantine_replay_ready_matched_on_the_xid_alone_negative_control")},
        note="replay-ready with the quarantined xid at another commit LSN, or another xid at its commit LSN, is "
             "refused and marks nothing; a boundary quarantined in two flows needs the flow named. Two guards: "
             "the target's trellara.quarantine_replay_ready() (PL/pgSQL, the real-process proof; no fault seam "
             "can reach it) and core's DecideReplayReady (trellara quarantine replay-ready, the simulator), "
             "whose paired defect defect.replay_ready_xid_only matches the boundary on the xid alone: a "
             "mistyped commit LSN is marked; caught at unit level"),
}

# Curated rows paired through the simulator: the named simulation of the same boundary (clean) and
# its paired defect, beside the row's real-process proof.
for _row, (_sim, _defect) in {
        "strict_chunk_manifest_missing_chunk": ("strict_chunk_manifest_arrives_with_missing_chunk",
                                                "apply_ignore_barrier_failure"),
        "strict_chunk_out_of_order_arrival": ("strict_chunk_manifest_arrives_before_chunks",
                                              "apply_chunks_before_commit_marker"),
        "strict_chunk_relay_crash_after_chunks_before_manifest": (
            "strict_chunk_relay_crash_after_chunks_before_manifest", "apply_chunks_before_commit_marker"),
        "strict_chunk_relay_crash_after_manifest_before_source_ack": (
            "strict_chunk_relay_crash_after_manifest_before_source_ack", "relay_confirm_at_manifest"),
        "strict_chunk_target_crash_after_staging_before_commit": (
            "strict_chunk_target_crash_after_staging_before_commit", "apply_rows_autocommit"),
        "snapshot_source_crash_during_copy": ("snapshot_source_crash_during_table_copy",
                                              "snapshot_recopy_completed_chunk"),
        "snapshot_relay_crash_during_copy": ("snapshot_relay_crash_during_table_copy",
                                             "snapshot_handoff_before_complete"),
        "snapshot_target_crash_during_copy": ("snapshot_target_crash_during_table_copy",
                                              "snapshot_handoff_before_complete"),
        "snapshot_duplicate_copy_attempt": ("snapshot_duplicate_copy_attempt", "snapshot_recopy_completed_chunk"),
        "snapshot_ddl_during_copy": ("snapshot_ddl_during_table_copy", "snapshot_handoff_ignores_contract"),
        "relay_after_broker_publish_before_source_feedback": ("publish_ack_loss", "relay_confirm_before_fsync"),
        "snapshot_incomplete_copy_resume": ("snapshot_target_crash_during_table_copy",
                                            "snapshot_handoff_before_complete"),
        "strict_chunk_partial_publish_failure": ("strict_chunk_relay_crash_after_manifest_before_source_ack",
                                                 "relay_confirm_at_manifest"),
        "repair_and_replay_ready": ("target_quarantine_repair_replay", "apply_skip_quarantined"),
        "pgoutput_keepalive_reports_last_durable_ack": ("publish_ack_loss", "relay_confirm_before_fsync"),
}.items():
    MAPPING[_row] = paired_by_sim(MAPPING[_row], _sim, _defect)

# Simulation rows: every one waits for the simulator. Boundary/invariant/safety/recovery come
# from the curated row of the same scenario where the seed has one.
SIM_TO_CURATED = {
    "publish_ack_loss": "relay_after_broker_publish_before_source_feedback",
    "crash_after_publish_before_source_ack": "relay_after_broker_publish_before_source_feedback",
    "source_failover_after_publish_before_ack": "source_failover_after_publish_before_ack",
    "duplicate_delivery": "duplicate_transaction_replay",
    "target_failure_before_commit": "applier_before_target_commit",
    "target_quarantine_repair_replay": "repair_and_replay_ready",
    "checkpoint_failure_during_apply": "applier_before_target_commit",
    "stream_ack_loss_after_apply": "applier_after_target_commit_before_stream_ack",
    "snapshot_source_crash_during_table_copy": "snapshot_source_crash_during_copy",
    "snapshot_relay_crash_during_table_copy": "snapshot_relay_crash_during_copy",
    "snapshot_target_crash_during_table_copy": "snapshot_target_crash_during_copy",
    "snapshot_duplicate_copy_attempt": "snapshot_duplicate_copy_attempt",
    "snapshot_ddl_during_table_copy": "snapshot_ddl_during_copy",
    "snapshot_handoff_recorded_before_stream_start": "snapshot_handoff_recorded_before_stream_start",
    "strict_chunk_manifest_arrives_with_missing_chunk": "strict_chunk_manifest_missing_chunk",
    "strict_chunk_manifest_arrives_before_chunks": "strict_chunk_out_of_order_arrival",
    "fleet_fanin_late_store_recovery_completes_epoch": "fleet_fanin_late_store_recovery",
    "fleet_fanin_duplicate_store_transaction_replay": "fleet_fanin_duplicate_store_replay",
}
SIM_SUITES = {
    "Replayable Simulation Suite": "simulation_replayable",
    "Snapshot Handoff Simulation Suite": "simulation_snapshot_handoff",
    "Strict Chunk Simulation Suite": "simulation_strict_chunk",
    "Fleet Fan-In Lake Simulation Suite": "simulation_fleet_fanin",
    "Lane D Qualification Suite": "simulation_qualification",
}
SIM_NOT_BUILT_EXTRA = {}


def sim_ref(name):
    return {"kind": "simulation", "name": name}


# Rows the deterministic simulator (tests/sim, docs/simulator.md) proves: the named simulation of
# the same name (run clean) and its paired defect run (NAME__defect_D), both written to sim.jsonl.
SIM_BOUND = {
    "publish_ack_loss": "relay_confirm_before_fsync",
    "crash_after_publish_before_source_ack": "relay_confirm_before_fsync",
    "duplicate_delivery": "apply_skip_dedup_check",
    "target_failure_before_commit": "apply_rows_autocommit",
    "target_quarantine_repair_replay": "apply_skip_quarantined",
    "checkpoint_failure_during_apply": "apply_checkpoint_outside_transaction",
    "stream_ack_loss_after_apply": "apply_ack_before_commit",
    "strict_chunk_relay_crash_after_chunks_before_manifest": "apply_chunks_before_commit_marker",
    "strict_chunk_relay_crash_after_manifest_before_source_ack": "relay_confirm_at_manifest",
    "strict_chunk_manifest_arrives_with_missing_chunk": "apply_ignore_barrier_failure",
    "strict_chunk_manifest_arrives_before_chunks": "apply_chunks_before_commit_marker",
    "strict_chunk_target_crash_after_staging_before_commit": "apply_rows_autocommit",
    "qualification_target_restart_during_apply": "apply_offset_ignores_flush",
    # through the broker hop (tests/sim/broker_hop.cpp)
    "qualification_broker_outage_quorum_loss": "forward_progress_before_ack",
    # the fleet world (tests/sim/fleet_world.cpp)
    "fleet_fanin_offline_stores_publish_with_gaps": "lake_complete_ignores_missing",
    "fleet_fanin_late_store_recovery_completes_epoch": "lake_count_by_increment",
    "fleet_fanin_duplicate_store_transaction_replay": "lake_count_by_increment",
    "fleet_fanin_conflicting_duplicate_quarantine": "lake_publish_on_conflict",
    "qualification_object_store_success_catalog_timeout": "lake_delete_files_on_unknown_commit",
    # the failover world (tests/sim/failover_world.cpp)
    "source_failover_after_publish_before_ack": "failover_dedup_skipped",
    "qualification_source_promotion_while_relay_disconnected": "standby_slot_past_downstream",
    # the snapshot world (tests/sim/snapshot_world.cpp)
    "snapshot_source_crash_during_table_copy": "snapshot_recopy_completed_chunk",
    "snapshot_relay_crash_during_table_copy": "snapshot_handoff_before_complete",
    "snapshot_target_crash_during_table_copy": "snapshot_handoff_before_complete",
    "snapshot_duplicate_copy_attempt": "snapshot_recopy_completed_chunk",
    "snapshot_ddl_during_table_copy": "snapshot_handoff_ignores_contract",
    "snapshot_handoff_recorded_before_stream_start": "snapshot_handoff_drops_chunk_rule",
}
SIM_NOT_BUILT_ROWS = {}
SIM_UNTESTED_ROWS = {}
# A 24-hour soak with a memory ceiling is a real-process measurement, not a simulation: the row is
# decided by the committed evidence of `make soak` (scripts/soak), which must have lasted 24 hours.
SIM_EVIDENCE_ROWS = {
    "qualification_twenty_four_hour_soak_large_transaction_memory_ceiling": (
        "proven by a 24-hour `make soak` run (real processes, not a simulation): the report reads the "
        "committed evidence/soak-*.jsonl and names the longest run, its revision and when it finished"),
}


# Rows of our own: DESIGN §2 boundaries the seed has no row for, proven by real-process pairs.
CONTINUITY = "test_apply_continuity.py"
TRANSIENT = "test_apply_transient_retry.py"
SUPERSEDED = "test_apply_superseded.py"
UPDATE_BATCHES = "test_apply_update_batches.py"
EARLY = "test_apply_early.py"
TYPE_MODIFIERS = "test_apply_type_modifiers.py"
IDENTITY = "test_apply_identity_columns.py"
SETTINGS = "test_apply_server_settings.py"
BROKER_FAILOVER = "test_broker_failover.py"
DESIGN_ROWS = [
    dict(name="broker_lost_record_is_refilled",
         boundary="broker → remote applier (docs/broker.md \"Remote apply\"; issue 38)",
         invariant="the remote applier's replica holds every offset below its expected one, in order; a record "
                   "above it is a hole, never skipped: the forwarder publishes again from the source's log",
         safety_property="a message the broker acknowledged and then lost never leaves a transaction out of the "
                         "remote target: the target ends equal to the source",
         recovery="automatic: the applier asks the forwarder for a refill until it arrives",
         proof=[it("lost_message_is_a_hole_refilled_by_the_forwarder", BROKER_REMOTE),
                it("remote_applier_applies_through_the_stream_exactly_once", BROKER_REMOTE),
                it("remote_applier_killed_at_each_receiver_boundary_converges", BROKER_REMOTE),
                it("lost_tail_is_republished_by_the_forwarder", BROKER_REMOTE),
                ct("the_forwarder_republishes_a_tail_the_broker_lost"),
                ct("a_remote_applier_appends_only_the_next_offset_and_never_skips_a_hole"),
                ct("a_hole_is_asked_once_passed_over_asked_again_later_and_closed_only_by_its_own_offset"),
                sim_ref("broker_lost_record_is_refilled"),
                sim_ref("broker_lost_record_is_refilled__defect_apply_hole_check_skipped")],
         defect={"name": "apply_hole_check_skipped",
                 "scenario": it("lost_message_defect_hole_check_skipped_is_caught", BROKER_REMOTE)}),
    dict(name="broker_retention_by_remote_appliers",
         boundary="source log → broker → remote applier: what the source's log keeps (docs/broker.md "
                  "\"Positions and retention\"; issue 38)",
         invariant="the source's log keeps every segment until each remote applier named in [transport] "
                   "remote_appliers has reported its durable position past it",
         safety_property="whatever the broker loses can be published again from the source's log: a lost "
                         "record is refilled, the remote target ends exact",
         recovery="automatic; if the records are gone on both sides the applier stops (exit 3) and says to re-seed",
         proof=[it("the_source_log_is_kept_until_the_remote_applier_reports", BROKER_REMOTE),
                ct("the_forwarder_refills_from_its_own_log_up_to_what_the_broker_acknowledged"),
                sim_ref("broker_retention_by_remote_appliers"),
                sim_ref("broker_retention_by_remote_appliers__defect_forward_retention_by_forwarder")],
         defect={"name": "forward_retention_by_forwarder",
                 "scenario": it("retention_defect_by_forwarder_is_caught", BROKER_REMOTE)}),
    dict(name="partitioned_retention_through_the_broker",
         boundary="source log → broker → the applier host's replica → partition appliers and publisher "
                  "(docs/partitioned.md \"Through a broker\"; issues 38, 39)",
         invariant="the position the applier's host reports to the source is the least next offset of the "
                   "replica's consumers: the publisher's and every partition applier's checkpoint",
         safety_property="the source keeps its log for the slowest partition, also while its applier is stopped and "
                         "the publisher moves past it: a replica lost with the host can be refilled for every "
                         "consumer of it",
         recovery="automatic: the position follows the slowest partition as it catches up",
         proof=[it("partition_appliers_through_the_broker_apply_exactly_once", PARTITIONED)],
         defect={"name": "receive_position_ignores_partitions",
                 "scenario": it("negative_control_position_past_a_partition_checkpoint_is_caught", PARTITIONED)}),
    dict(name="statement_types_from_one_place",
         boundary="log → target, every statement the applier builds (core value_types.h; issue 35)",
         invariant="a value of every capturable type, with its modifier, reaches the target column unchanged on "
                   "every apply path, and a full-row match changes the row the source changed",
         safety_property="the target ends equal to the source row by row (each row's text): no modifier cut by a "
                         "cast, no row taken for another because its type's `=` is looser than identity",
         recovery="none needed: a value that does not fit the target column fails its transaction (quarantined)",
         proof=[it("every_capturable_type_survives_every_apply_path", TYPE_MODIFIERS),
                it("merged_updates_keep_type_modifiers", TYPE_MODIFIERS),
                it("batched_updates_keep_type_modifiers", TYPE_MODIFIERS),
                ct("every_postgres_type_spelling_loses_only_its_modifier"),
                ct("a_batched_update_casts_each_value_to_the_unmodified_type"),
                ct("a_full_row_match_compares_by_equality_only_where_it_is_identity")],
         defect={"name": "apply_full_row_match_by_equality",
                 "scenario": it("negative_control_full_row_match_by_equality_is_caught", TYPE_MODIFIERS)}),
    dict(name="identity_columns_on_the_target",
         boundary="log → target, UPDATEs of a table whose target column is GENERATED ALWAYS AS IDENTITY (a target "
                  "restored with pg_dump --schema-only; docs/apply.md \"Identity columns\")",
         invariant="an UPDATE never writes an ALWAYS identity column (the server refuses it) and never applies a "
                   "source UPDATE without the value it gave that column",
         safety_property="the target ends equal to the source; a source UPDATE that set the column to DEFAULT is "
                         "quarantined, its message naming the column and the remedy",
         recovery="make the target column GENERATED BY DEFAULT, then trellara.quarantine_replay_ready",
         proof=[it("identity_columns_apply_on_a_pg_dump_target", IDENTITY),
                it("identity_set_to_default_is_quarantined_until_the_target_can_take_it", IDENTITY),
                ct("update_checks_instead_of_writing_a_column_generated_always_as_identity_on_the_target")],
         defect={"name": "apply_identity_unchecked",
                 "scenario": it("negative_control_identity_unchecked_is_caught", IDENTITY)}),
    dict(name="output_settings_of_source_and_target",
         boundary="source → log → target, values as text under the servers' own DateStyle, IntervalStyle, "
                  "extra_float_digits, bytea_output and TimeZone (docs/apply.md \"Server settings of source and "
                  "target\")",
         invariant="no server setting of the source or the target changes a value on its way: the plugin and every "
                   "applier session pin the settings that shape type text",
         safety_property="the target ends equal to the source row by row, streamed and copied by a snapshot, with "
                         "other settings on each side",
         recovery="none needed",
         proof=[it("awkward_values_stream_between_servers_with_other_settings", SETTINGS),
                it("awkward_values_snapshot_between_servers_with_other_settings", SETTINGS)],
         defect={"name": "plugin_output_settings_unpinned",
                 "scenario": it("negative_control_unpinned_plugin_settings_are_caught", SETTINGS)}),
    dict(name="remote_applier_after_a_promotion",
         boundary="source promotion → broker → remote applier: the promoted server's new log reaches the target "
                  "through the stream (docs/broker.md \"After a promotion\")",
         invariant="a remote applier checks the target against the source timeline of the log it reads, as one "
                   "reading the local log does: the forwarder sends the log's TIMELINE with every message, the "
                   "replica records it before the first record that came with it",
         safety_property="a target holding transactions the promoted server never had is never applied to: the "
                         "remote applier exits 3 (blocked) naming them, before changing the target",
         recovery="trellara repair-plan: reseed from the promoted server, or remove those transactions' effects",
         proof=[it("remote_applier_on_a_target_ahead_of_the_promoted_server_fails_closed", BROKER_FAILOVER),
                ct("a_replica_takes_the_timeline_of_its_log_once_and_refuses_another")],
         defect={"name": "receive_timeline_ignored",
                 "scenario": it("negative_control_remote_timeline_ignored_is_caught", BROKER_FAILOVER)}),
    dict(name="chunked_transaction_applied_early",
         boundary="log → target, a chunked transaction applied while the relay writes it (docs/apply.md)",
         invariant="the target transaction staged from a transaction's first chunk commits only when the barrier "
                   "yields the transaction and every chunk it lists was staged; anything else rolls it back",
         safety_property="each source transaction lands whole and once: a kill -9 of the applier or the relay "
                         "in the middle leaves nothing of it visible, a late failure quarantines it whole",
         recovery="automatic: an abandoned early attempt is applied (or quarantined) at its commit marker",
         proof=[it("chunked_transactions_are_applied_while_the_relay_writes_them", EARLY),
                it("a_failed_early_transaction_is_quarantined_whole", EARLY),
                it("applier_kill9_during_early_apply_converges_exactly_once", EARLY),
                it("relay_kill9_while_the_applier_applies_early_converges_exactly_once", EARLY)],
         defect={"name": "apply_early_commit_per_chunk",
                 "scenario": it("negative_control_early_commit_per_chunk_is_caught", EARLY)}),
    dict(name="chunked_update_batches", boundary="log → target, a chunked transaction's UPDATE runs (docs/apply.md)",
         invariant="a run of key-preserving UPDATEs sent as one statement changes each of its rows exactly once, "
                   "and only where the target cannot observe the order",
         safety_property="the target ends equal to the source; an UPDATE whose row is missing quarantines exactly "
                         "its transaction naming that row, nothing of it visible",
         recovery="repair the target row, then trellara.quarantine_replay_ready",
         proof=[it("chunked_updates_are_batched_and_applied_exactly", UPDATE_BATCHES),
                it("a_batched_update_that_matches_no_row_quarantines_its_transaction", UPDATE_BATCHES),
                it("updates_go_one_at_a_time_where_the_target_could_see_their_order", UPDATE_BATCHES)],
         defect={"name": "apply_update_batch_unchecked",
                 "scenario": it("negative_control_batch_without_its_row_check_is_caught", UPDATE_BATCHES)}),
    dict(name="grouped_batch_superseded_updates", boundary="log → target, grouped batches (docs/apply.md)",
         invariant="an UPDATE is left out of a grouped batch only when a later UPDATE of the same group "
                   "overwrites the same row and nothing else wrote its table in between",
         safety_property="the target ends equal to the source, each transaction applied once; a trigger or rule "
                         "that fires for replicated UPDATEs sees every one (the guard refuses the group)",
         recovery="automatic: a refused group goes again one transaction each, nothing left out",
         proof=[it("superseded_updates_are_left_out_and_the_target_matches_the_source", SUPERSEDED),
                it("a_target_update_trigger_sees_every_replicated_update", SUPERSEDED),
                it("a_trigger_on_one_target_partition_sees_every_replicated_update", SUPERSEDED)],
         defect={"name": "apply_superseded_unguarded",
                 "scenario": it("negative_control_an_unguarded_group_is_caught", SUPERSEDED)}),
    dict(name="grouped_batch_merged_statements", boundary="log → target, grouped batches (docs/apply.md)",
         invariant="a table's consecutive INSERTs, or key-preserving UPDATEs of one shape, of several transactions "
                   "of a group go as one statement sent before the table's next other write, so each table's "
                   "writes keep their order",
         safety_property="the target ends equal to the source, each transaction applied once; a trigger or rule "
                         "that fires for replicated changes reads every row as in-order apply leaves it (the "
                         "guard refuses the group)",
         recovery="automatic: a refused group goes again one transaction each, nothing merged",
         proof=[it("superseded_updates_are_left_out_and_the_target_matches_the_source", SUPERSEDED),
                it("a_target_trigger_of_another_table_reads_rows_as_applied_in_order", SUPERSEDED),
                it("merged_inserts_never_move_across_a_write_a_target_trigger_reads", SUPERSEDED),
                it("target_guard_refuses_tables_that_share_storage", SUPERSEDED)],
         defect={"name": "apply_merge_unguarded",
                 "scenario": it("negative_control_an_unguarded_merge_is_caught", SUPERSEDED)}),
    dict(name="applier_kill9_at_random_moments", boundary="log → target (DESIGN §2)",
         invariant="changes, dedup row and checkpoint commit in one target transaction",
         safety_property="a kill -9 of the applier at any moment loses nothing and applies nothing twice; the "
                         "consumer offset never passes an uncommitted transaction",
         recovery="trellara apply --config <flow>",
         proof=[it("applier_kill9_at_random_moments_converges_exactly_once", ROBUSTNESS)],
         defect={"name": "apply_ack_before_commit",
                 "scenario": it("negative_control_ack_before_commit_is_caught", ROBUSTNESS)}),
    dict(name="target_crash_loses_asynchronous_commits", boundary="log → target with synchronous_commit = off",
         invariant="consumer offset advances only to the origin's flushed progress",
         safety_property="a target crash that loses asynchronously committed transactions never leaves them "
                         "below the consumer offset; a rerun converges",
         recovery="trellara apply --config <flow>",
         proof=[it("target_immediate_restart_while_applying_converges", ROBUSTNESS)],
         defect={"name": "apply_offset_ignores_flush",
                 "scenario": it("negative_control_offset_past_flush_is_caught", ROBUSTNESS)}),
    dict(name="target_restored_from_older_backup", boundary="continuity (DESIGN §2)",
         invariant="the applier runs only when origin progress is not behind its consumer offset",
         safety_property="a target restored from an older backup rewinds while the log holds the gap and "
                         "converges exactly once",
         recovery="automatic rewind; otherwise trellara reseed",
         proof=[it("target_restored_from_an_older_backup_rewinds_and_converges", CONTINUITY)],
         defect={"name": "apply_continuity_unchecked",
                 "scenario": it("negative_control_continuity_unchecked_is_caught", CONTINUITY)}),
    dict(name="transient_target_error_retried", boundary="transient target errors (DESIGN §2)",
         invariant="serialization failure, deadlock, timeouts, lost connection are retried, never quarantined",
         safety_property="a deadlock with a local target transaction is retried and applied exactly once",
         recovery="automatic",
         proof=[it("deadlock_with_a_local_target_transaction_is_retried_and_applied", TRANSIENT)],
         defect={"name": "apply_transient_quarantined",
                 "scenario": it("negative_control_transient_failure_quarantined_is_caught", TRANSIENT)}),
    dict(name="log_retention_keeps_what_consumers_need", boundary="log retention (DESIGN §2)",
         invariant="a segment is deleted only when every registered consumer's durable offset is past it",
         safety_property="retention never deletes an offset a registered consumer still needs; a size ceiling "
                         "marks the overtaken consumer lost instead",
         recovery="a lost consumer refuses to continue: trellara reseed",
         proof=[ct("retention_keeps_every_offset_a_consumer_needs_and_the_defect_is_caught")],
         defect={"name": "log_reclaim_past_consumer",
                 "scenario": ct("retention_keeps_every_offset_a_consumer_needs_and_the_defect_is_caught")},
         note="one property test runs both halves: clean, then with defect.log_reclaim_past_consumer"),
    dict(name="failed_target_commit_resets_origin", boundary="failed target transaction (DESIGN §2)",
         invariant="a failed COMMIT rolls back and resets the session's replication-origin state",
         safety_property="origin progress, dedup and consumer offset stay where they were; the quarantine "
                         "record does not carry the failed transaction's origin LSN",
         recovery="trellara quarantine replay-ready --config <flow> ...",
         proof=[it("commit_failure_in_a_pipelined_batch_is_quarantined_without_origin_dedup_or_offset",
                   COMMIT_FAILURE),
                it("commit_failure_of_a_chunked_transaction_is_quarantined_without_origin_dedup_or_offset",
                   COMMIT_FAILURE)],
         defect={"name": "apply_skip_origin_reset",
                 "scenario": it("negative_control_skipping_the_origin_reset_is_caught", COMMIT_FAILURE)}),
]


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse(seed_text):
    sims, curated = [], []
    section = None
    for line in seed_text.splitlines():
        stripped = line.strip()
        if stripped in SIM_SUITES or stripped == "Curated Failure Matrix":
            section = stripped
            continue
        if section is None or not stripped or stripped.startswith("| Failure point") \
                or stripped.startswith("| Scenario") or stripped.startswith("|---"):
            continue
        if section == "Curated Failure Matrix":
            if not stripped.startswith("| "):
                section = None
                continue
            c = cells(stripped)
            curated.append({"name": c[0], "boundary": c[2], "invariant": c[3], "safety_property": c[4],
                            "seed_proof": c[5], "recovery": c[6]})
        else:
            c = cells(stripped)
            if not c or not c[0] or " " in c[0]:
                section = None if not stripped.startswith(("|", c[0])) else section
                continue
            sims.append({"name": c[0], "suite": SIM_SUITES[section], "seed_proof": c[-1]})
    return sims, curated


def main():
    with open(sys.argv[1]) as seed:
        sims, curated = parse(seed.read())
    by_name = {row["name"]: row for row in curated}
    assert len(curated) == 63, len(curated)
    assert len(sims) == 28, len(sims)
    assert set(MAPPING) == set(by_name), set(MAPPING) ^ set(by_name)
    sim_names = {row["name"] for row in sims}
    for table in (SIM_BOUND, SIM_NOT_BUILT_ROWS, SIM_UNTESTED_ROWS):
        assert set(table) <= sim_names, set(table) - sim_names
    rows = []
    for sim in sims:
        twin = by_name.get(SIM_TO_CURATED.get(sim["name"], sim["name"]))
        reason = SIM_NOT_BUILT_EXTRA.get(sim["suite"], NO_SIMULATOR)
        row = {
            "name": sim["name"], "suite": sim["suite"], "failure_point": sim["name"],
            "boundary": twin["boundary"] if twin else "", "invariant": twin["invariant"] if twin else "",
            "safety_property": twin["safety_property"] if twin else "",
            "recovery": twin["recovery"] if twin else "", "seed_proof": sim["seed_proof"],
            "status": "not_built", "reason": reason, "proof": [], "defect": None,
            "note": f"text from the curated row {twin['name']}" if twin else "the seed gives no boundary text"}
        name = sim["name"]
        if name in SIM_BOUND:
            defect = SIM_BOUND[name]
            row.update(status="planned", reason="", proof=[sim_ref(name)],
                       defect={"name": defect, "scenario": sim_ref(f"{name}__defect_{defect}")})
        elif name in SIM_NOT_BUILT_ROWS:
            row.update(reason=SIM_NOT_BUILT_ROWS[name])
        elif name in SIM_UNTESTED_ROWS:
            row.update(status="untested", reason=SIM_UNTESTED_ROWS[name])
        elif name in SIM_EVIDENCE_ROWS:
            row.update(status="evidence", reason=SIM_EVIDENCE_ROWS[name], evidence=SOAK_EVIDENCE)
        rows.append(row)
    for row in curated:
        m = MAPPING[row["name"]]
        entry = {"name": row["name"], "suite": "curated", "failure_point": row["name"],
                 "boundary": row["boundary"], "invariant": row["invariant"],
                 "safety_property": row["safety_property"], "recovery": row["recovery"],
                 "seed_proof": row["seed_proof"], "proof": m.get("proof", []), "defect": m.get("defect"),
                 "note": m.get("note", "")}
        if "not_built" in m:
            entry.update(status="not_built", reason=m["not_built"])
        elif "untested" in m:
            entry.update(status="untested", reason=m["untested"])
        elif "evidence" in m:
            entry.update(status="evidence", reason=m["reason"], evidence=m["evidence"])
        else:
            entry.update(status="planned", reason="")
        rows.append(entry)
    for extra in DESIGN_ROWS:
        rows.append({"suite": "design", "failure_point": extra["name"], "seed_proof": "",
                     "status": "planned", "reason": "", "note": "Trellara row (DESIGN §2), not in seed 000",
                     **extra})
    json.dump({"version": 1, "seed": "000_5ae7062de3ff6f0a", "rows": rows}, sys.stdout, indent=2,
              ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
