#!/usr/bin/env python3
"""Integration (issue 41, first slice): a flow's slot kept on a physical standby survives an
unplanned promotion, and the relay on the promoted server starts a new log from it.

Real processes: a primary with trellara and flow `app` (table t), a streaming standby made with
pg_basebackup (physical slot, hot_standby_feedback, trellara preloaded, trellara.standby_slot_sync
= on), a workload of one-row transactions on the primary. The standby's slot sync worker creates
and advances trellara_app; the primary is stopped immediately (SIGQUIT) right after a last batch,
and the standby is promoted with pg_ctl promote.

Scenario:
  standby_slot_synced_then_promoted_relay_starts_new_log_from_it
    Before promotion: the standby holds logical slot trellara_app, confirmed at or past what the
    primary's slot had confirmed after the first workload and never past the standby's replay
    position; trellara.check('app') on the standby reports it synced. After the promotion: the
    relay runs on the promoted server from that slot; the standby's copy of the old log is moved
    aside (<log>.timeline1), never appended to; the new log's first frame is a start marker at the
    slot's confirmed position; every transaction the promoted server holds (rows of t, each with
    its xid) is in the old primary's durable log or in the new log (none missed), the new log holds
    no transaction twice, and commits made on the promoted server are captured in the new log.
    The applier continues across the promotion: the standby's replay is paused before the last
    batch (its slot, capped at replay, stays behind it), `trellara apply` applies the old primary's
    whole log (the last batch included) into a target, then, after the promotion, the new log at
    the same flow: it skips exactly the 100 redelivered transactions (dedup by commit LSN),
    applies the 50 new ones, and the target's table equals the promoted server's.
What it does not prove: a target ahead of what the standby received (failing closed), a standby
slot held at the target's position, a planned switchover, load during the promotion. It must never
leave a cluster running or signal a process it has not identified.
"""

import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from capture_support import (CaptureFailure, assert_no_backend_crashes, checks_fail_under_defect,  # noqa: E402
                             int_to_lsn, log_records, log_transactions, lsn_to_int, record_fault_fired, run_scenarios,
                             scenario, wait_caught_up, wait_for, worker_pid, write_flow_config)
from failover_support import (STANDBY_PHYSICAL_SLOT, Failover, Workload, skipped_duplicates,  # noqa: E402
                              start_daemon_applier, summary_line, wait_promoted_log_timeline)
from flow_pair import run_trellara, table_digest, wait_log_covers_source  # noqa: E402
from harness import Cluster  # noqa: E402

PRIMARY_SETTINGS = {"trellara.progress_interval": "'100ms'"}
STANDBY_SETTINGS = {"hot_standby_feedback": "on", "trellara.standby_slot_sync": "on",
                    "trellara.progress_interval": "'100ms'"}


def commit_rows(cluster, first, count, label):
    """`count` one-row transactions (ids first..first+count-1); returns {id: xid}."""
    sql = "".join(f"INSERT INTO t VALUES ({i}, '{label}') RETURNING id, pg_current_xact_id();\n"
                  for i in range(first, first + count))
    rows = {}
    for line in cluster.query(sql).splitlines():
        row_id, xid = line.split("|")
        rows[int(row_id)] = int(xid)
    return rows


def standby_slot(cluster):
    """(restart_lsn, confirmed_flush_lsn) of trellara_app on `cluster`, or None."""
    text = cluster.query("SELECT restart_lsn || ' ' || confirmed_flush_lsn FROM pg_replication_slots "
                         "WHERE slot_name = 'trellara_app' AND slot_type = 'logical'")
    if not text:
        return None
    restart, confirmed = text.split()
    return lsn_to_int(restart), lsn_to_int(confirmed)


@scenario(invariants=[
    "the standby's slot is synced from the primary's confirmed position, never past the standby's replay",
    "check() on the standby reports the slot synced",
    "after promotion the relay runs from the synced slot; the old log copy is set aside, not appended to",
    "every transaction on the promoted server is in the old durable log or the new log; none twice in the new log",
    "commits on the promoted server are captured in the new log",
    "the applier skips the redelivered transactions and the target equals the promoted server"])
def standby_slot_synced_then_promoted_relay_starts_new_log_from_it():
    standby = Cluster("failover-standby", settings=STANDBY_SETTINGS)  # started from a base backup below
    link_root = tempfile.mkdtemp(prefix="trellara-failover-link-")
    try:
        with Cluster("failover-primary", settings=PRIMARY_SETTINGS) as primary, \
                Cluster("failover-target", preload=False) as target:
            target.query("CREATE TABLE t (id int PRIMARY KEY, label text)")
            promote_and_check(primary, standby, target, link_root)
    except BaseException:
        if standby.base_dir:
            standby.print_log_tail(f"cluster {standby.name}: server log after failure")
        raise
    finally:
        standby.stop()
        shutil.rmtree(link_root, ignore_errors=True)


def promote_and_check(primary, standby, target, link_root):
    """The scenario's steps on a running primary and a standby not started yet."""
    # The flow's log_directory is an absolute path in trellara.flows, replicated to the standby.
    # On two machines with the same PGDATA path it names each server's own copy; on this one
    # machine a symlink plays that part: it points at the primary's data directory, then, from
    # the promotion on, at the standby's.
    os.chmod(link_root, 0o755)
    link = os.path.join(link_root, "pgdata")
    os.symlink(primary.data_dir, link)
    log_dir = os.path.join(link, "pg_trellara", "app")
    primary.query("CREATE TABLE t (id int PRIMARY KEY, label text)")
    primary.query("CREATE EXTENSION trellara")
    primary.query("CREATE PUBLICATION pub FOR TABLE t")
    primary.query(f"SELECT trellara.create_flow('app', 'pub', log_directory => '{log_dir}')")
    wait_for("the relay of flow app to run", lambda: worker_pid(primary), 60)
    xids = commit_rows(primary, 1, 100, "before the standby")

    standby.start_standby_of(primary, STANDBY_PHYSICAL_SLOT)
    xids.update(commit_rows(primary, 101, 200, "while streaming"))
    synced_through = lsn_to_int(primary.query("SELECT pg_current_wal_lsn()"))
    wait_caught_up(primary, synced_through)

    def slot_synced():
        primary.query("CHECKPOINT")  # logs running_xacts: the primary's restart_lsn moves on
        slot = standby_slot(standby)
        return slot is not None and slot[1] >= synced_through
    wait_for(f"the standby's slot trellara_app to be synced through {int_to_lsn(synced_through)}",
             slot_synced, 120, interval_s=0.5)
    replay = lsn_to_int(standby.query("SELECT pg_last_wal_replay_lsn()"))
    restart, confirmed = standby_slot(standby)
    primary_confirmed = lsn_to_int(primary.query(
        "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'trellara_app'"))
    if confirmed > replay or confirmed > primary_confirmed:
        raise CaptureFailure(f"the standby's slot is confirmed at {int_to_lsn(confirmed)}, past the standby's "
                             f"replay {int_to_lsn(replay)} or the primary slot's {int_to_lsn(primary_confirmed)}")
    check = standby.query("SELECT severity || ' ' || detail FROM trellara.check('app') "
                          "WHERE \"check\" = 'standby_slot'")
    if not check.startswith("ok slot synced"):
        raise CaptureFailure(f"check('app') on the standby does not report the slot synced: {check!r}")
    print(f"standby slot synced: restart {int_to_lsn(restart)}, confirmed {int_to_lsn(confirmed)}, "
          f"replay {int_to_lsn(replay)}; check: {check}")

    # A last batch, then the primary goes away at once; the standby keeps what it received.
    # The standby's replay pauses, so its slot (capped at replay) stays behind the last batch,
    # which the target then applies from the old primary's log: the new log redelivers it and dedup
    # by commit LSN must skip it. The standby still receives the WAL (walreceiver runs).
    standby.query("SELECT pg_wal_replay_pause()")
    wait_for("the standby's replay to pause", lambda: standby.query(
        "SELECT pg_get_wal_replay_pause_state()") == "paused", 30)
    xids.update(commit_rows(primary, 301, 100, "just before the crash"))
    wait_caught_up(primary, lsn_to_int(primary.query("SELECT pg_current_wal_lsn()")))
    config_old = write_flow_config(os.path.join(link_root, "old.toml"), "app", log_dir, target.conninfo())
    before = run_trellara(["apply", "--config", config_old, "--until-caught-up"], what="trellara apply (old log)")
    print("apply from the old primary's log: " + [l for l in before.stdout.splitlines() if l.startswith("apply flow=")][-1])
    received = lsn_to_int(primary.query("SELECT pg_current_wal_lsn()"))
    wait_for("the standby to receive the last batch", lambda: lsn_to_int(
        standby.query("SELECT pg_last_wal_receive_lsn()")) >= received, 60)
    primary.stop_immediate()
    standby.query("SELECT pg_wal_replay_resume()")
    old_log_dir = os.path.join(primary.data_dir, "pg_trellara", "app")
    os.symlink(standby.data_dir, link + ".new")
    os.replace(link + ".new", link)
    standby.promote()
    wait_for("the relay of flow app to run on the promoted server", lambda: worker_pid(standby), 60)
    promoted_slot = standby_slot(standby)
    if promoted_slot is None:
        raise CaptureFailure("slot trellara_app is missing on the promoted server")

    new_dir = os.path.join(standby.data_dir, "pg_trellara", "app")
    lines = wait_promoted_log_timeline(standby)
    aside = new_dir.rstrip("/") + ".timeline1"
    if not os.path.isdir(aside):
        raise CaptureFailure(f"the standby's copy of the old log was not moved aside to {aside}")
    timeline = lines[0] if lines else ""
    if timeline != "2" or len(lines) != 2 or not lines[1].startswith("branched_from 1 at "):
        raise CaptureFailure(f"the new log records {lines!r}, not the promoted server's timeline 2 and where it "
                             f"branched off timeline 1")
    branch = lsn_to_int(lines[1].split()[-1])
    if branch < received:
        raise CaptureFailure(f"the new log says timeline 2 branched at {int_to_lsn(branch)}, before the "
                             f"{int_to_lsn(received)} the standby had received")

    after = commit_rows(standby, 1001, 50, "after the promotion")
    wait_caught_up(standby, lsn_to_int(standby.query("SELECT pg_current_wal_lsn()")))

    new_records = log_records(new_dir)
    if not new_records or new_records[0]["type"] != "progress":
        raise CaptureFailure(f"the new log does not start with a start marker: {new_records[:1]}")
    start_lsn = lsn_to_int(new_records[0]["commit_lsn"])
    if start_lsn < confirmed:
        raise CaptureFailure(f"the new log starts at {int_to_lsn(start_lsn)}, before the synced slot's "
                             f"confirmed position {int_to_lsn(confirmed)}")
    new_tx, _ = log_transactions(new_records)  # raises if a transaction appears twice
    old_tx, _ = log_transactions(log_records(old_log_dir))
    logged_xids = {xid for xid, _ in new_tx} | {xid for xid, _ in old_tx}
    on_promoted = {int(i) for i in standby.query("SELECT id FROM t").split()}
    missing = sorted(i for i in on_promoted if xids.get(i, after.get(i)) not in logged_xids)
    if missing:
        raise CaptureFailure(f"{len(missing)} transaction(s) on the promoted server are in neither log "
                             f"(ids {missing[:10]}...)")
    new_xids = {xid for xid, _ in new_tx}
    not_captured = sorted(i for i, xid in after.items() if xid not in new_xids)
    if not_captured:
        raise CaptureFailure(f"commits on the promoted server missing from the new log: ids {not_captured[:10]}")
    redelivered = len(new_xids & {xid for xid, _ in old_tx})
    lost_with_primary = sorted(i for i in xids if i not in on_promoted)
    print(f"promoted (timeline {timeline}): new log from {int_to_lsn(start_lsn)} holds {len(new_tx)} transactions "
          f"({redelivered} also in the old primary's log, for downstream dedup); {len(on_promoted)} rows on the "
          f"promoted server all logged; {len(lost_with_primary)} commit(s) of the old primary never reached "
          f"the standby")
    config_new = write_flow_config(os.path.join(link_root, "new.toml"), "app", new_dir, target.conninfo())
    after_run = run_trellara(["apply", "--config", config_new, "--until-caught-up"], what="trellara apply (new log)")
    summary = [l for l in after_run.stdout.splitlines() if l.startswith("apply flow=")][-1]
    print("apply from the new log: " + summary)
    want, have = table_digest(standby, "t"), table_digest(target, "t")
    if want != have:
        raise CaptureFailure(f"after the promotion the target differs from the promoted server: {have} vs {want}")
    if redelivered != 100:
        raise CaptureFailure(f"the new log redelivers {redelivered} transactions of the old log, not the 100 of the "
                             f"last batch: the scenario did not put the target ahead of the standby's slot")
    if f"skipped_duplicates={redelivered}" not in summary:
        raise CaptureFailure(f"the applier did not skip exactly the {redelivered} redelivered transactions: {summary}")
    assert_no_backend_crashes(primary, standby, target)


# --- promotion under load, source_ack = 'applied' and the standby hold ------------------------------

def _promotion_under_load(name, how, apply_env=None, outputs=None):
    """The flow with source_ack = 'applied' and trellara.standby_slot_names naming the standby; a
    daemon applier and a workload running; the standby's replay paused (its slot, capped at replay,
    stays behind) while the applier applies at least 20 more transactions; then the primary goes away
    (`how`: immediate = a crash, fast = a planned switchover) with the workload still writing, the
    daemon applier is killed (its log is the old primary's), the standby is promoted, the workload
    goes on there, and `trellara apply` (with `apply_env`) applies the promoted server's new log.
    Returns (skipped duplicates, summary)."""
    with Failover(name, source_ack="applied", hold=True) as fo:
        fo.start_standby()
        fo.commit_rows(fo.primary, 50, "before")
        applier = start_daemon_applier(fo.config_old)
        try:
            wait_for("the target to apply the first 50 transactions",
                     lambda: int(fo.target.query("SELECT count(*) FROM t")) >= 50, 120)
            fo.wait_standby_synced()
            with Workload(fo.primary, "under load") as load:
                wait_for("the workload to commit", lambda: load.batches >= 5, 60)
                fo.standby.query("SELECT pg_wal_replay_pause()")
                wait_for("the standby's replay to pause", lambda: fo.standby.query(
                    "SELECT pg_get_wal_replay_pause_state()") == "paused", 30)
                paused_at = fo.target_applied_lsn()
                applied_before = int(fo.target.query("SELECT count(*) FROM trellara.applied_transactions"))
                wait_for("the applier to apply 20 more transactions while the standby's replay is paused",
                         lambda: int(fo.target.query("SELECT count(*) FROM trellara.applied_transactions"))
                         >= applied_before + 20, 120)
                slot = fo.standby_slot()
                if slot is None or slot[1] > fo.target_applied_lsn():
                    raise CaptureFailure(f"the standby's slot {slot} is not behind what the target applied")
                fo.primary_stopped = True
                if how == "fast":
                    fo.primary.stop_fast()
                else:
                    fo.primary.stop_immediate()
                applier.kill()
                applier.communicate(timeout=60)
                load.stop()
            fo.standby.query("SELECT pg_wal_replay_resume()")
            fo.switch_link_to_standby()
            fo.standby.promote()
        finally:
            if applier.poll() is None:
                applier.kill()
                applier.communicate(timeout=60)
        wait_for("the relay of flow app to run on the promoted server", lambda: worker_pid(fo.standby), 60)
        branch = lsn_to_int(wait_promoted_log_timeline(fo.standby)[1].split()[-1])
        applied = fo.target_applied_lsn()
        if applied > branch:
            raise CaptureFailure(f"the target applied through {int_to_lsn(applied)}, past {int_to_lsn(branch)} where "
                                 f"the promoted server branched: trellara.standby_slot_names did not hold capture")
        with Workload(fo.standby, "after the promotion") as load:
            wait_for("the workload to commit on the promoted server", lambda: load.batches >= 5, 60)
        wait_log_covers_source(fo.standby, timeout_s=120)
        result = fo.apply_new_log(expect=None, env=apply_env)
        if outputs is not None:
            outputs.append(result.stderr)
        if result.returncode != 0:
            raise CaptureFailure(f"trellara apply on the promoted server's log exited {result.returncode}: "
                                 f"{result.stderr[-1500:]}")
        fo.assert_target_equals_promoted(f"after a {how} promotion under load")
        skipped = skipped_duplicates(result)
        if skipped < 20:
            raise CaptureFailure(f"the promoted server's log redelivered {skipped} transaction(s) the target had; at "
                                 f"least the 20 applied while the standby's replay was paused must be redelivered")
        promotion = fo.relay_metric(fo.standby, "source_failover_promotion_detected")
        timeline = fo.relay_metric(fo.standby, "source_timeline")
        if promotion != 1 or timeline != 2:
            raise CaptureFailure(f"relay_metrics() on the promoted server: source_failover_promotion_detected "
                                 f"{promotion}, source_timeline {timeline} (want 1 and 2)")
        print(f"{how} promotion under load: target applied through {int_to_lsn(applied)} <= branch "
              f"{int_to_lsn(branch)} (paused at {int_to_lsn(paused_at)}); new log: {summary_line(result)}")
        assert_no_backend_crashes(fo.standby, fo.target)
        return skipped, summary_line(result)


@scenario(seed_rows=("source_failover_after_publish_before_ack",), suite="failover",
          invariants=("with source_ack = 'applied' and trellara.standby_slot_names, the target never gets past the "
                      "promoted server's branch point",
                      "the promoted server's relay redelivers what the old primary had published but not acknowledged",
                      "dedup skips every redelivered transaction; the target equals the promoted server",
                      "relay_metrics() reports the promotion (source_failover_promotion_detected, source_timeline)"))
def unplanned_promotion_under_load_redelivers_and_dedup_keeps_exactly_once():
    _promotion_under_load("failover-crash", "immediate")


@scenario(suite="failover",
          invariants=("a planned switchover (clean shutdown of the primary) under load: the flow resumes on the "
                      "promoted server, redelivered transactions skipped, the target equals it"))
def planned_switchover_under_load_keeps_exactly_once():
    _promotion_under_load("failover-planned", "fast")


@scenario(suite="failover", defect="apply_ignore_dedup",
          pairs_with="unplanned_promotion_under_load_redelivers_and_dedup_keeps_exactly_once",
          fault_points=("defect.apply_ignore_dedup",),
          invariants=("the promotion scenario's checks fail when the applier skips its dedup check on the promoted "
                      "server's redelivered transactions",))
def negative_control_dedup_skipped_after_promotion_is_caught():
    caught = checks_fail_under_defect(
        "defect.apply_ignore_dedup", "promotion under load",
        lambda env, outputs: _promotion_under_load("failover-nodedup", "immediate", apply_env=env, outputs=outputs))
    print(f"caught: {str(caught)[:300]}")


# --- promotion while the relay is disconnected ---------------------------------------------------

def _promotion_while_relay_disconnected(name, standby_env=None):
    """source_ack = 'applied', hold on. Batch A is applied (the slot, and the standby's copy, move
    past it); the applier stops; batch B is logged but not applied; the relay is stopped
    (disconnected) and batch C is committed: the acknowledgement lag is visible in relay_metrics()
    and `trellara status`. The primary crashes, the standby is promoted, the flow started there:
    the new log replays from the last applied position (B and C), and the target equals the
    promoted server. Returns how far past the target's position the standby's slot was synced."""
    with Failover(name, source_ack="applied", hold=True, standby_env=standby_env) as fo:
        fo.start_standby()
        fo.commit_rows(fo.primary, 20, "A")
        wait_log_covers_source(fo.primary, timeout_s=120)
        run_trellara(["apply", "--config", fo.config_old, "--until-caught-up"], what="trellara apply (batch A)")
        applied_a = fo.target_applied_lsn()
        wait_for("the slot to be confirmed past batch A (source_ack = 'applied')",
                 lambda: fo.primary_confirmed() >= applied_a, 60)
        fo.commit_rows(fo.primary, 30, "B")
        wait_log_covers_source(fo.primary, timeout_s=120)
        durable_b = lsn_to_int(fo.primary.query("SELECT log_durable_lsn FROM trellara.status() WHERE flow = 'app'"))
        if fo.primary_confirmed() > applied_a:
            raise CaptureFailure(f"with source_ack = 'applied' the slot moved to {int_to_lsn(fo.primary_confirmed())}, "
                                 f"past what the target applied ({int_to_lsn(applied_a)})")
        defect = "defect.standby_slot_past_downstream" in (standby_env or {}).get("TRELLARA_FAULTS", "")
        fo.wait_standby_synced(at_least=durable_b if defect else applied_a)
        synced = fo.standby_slot()[1]
        if synced > applied_a:
            record_fault_fired("defect.standby_slot_past_downstream")
        fo.primary.query("SELECT trellara.stop_flow('app')")
        wait_for("the relay to stop (disconnected)", lambda: not worker_pid(fo.primary), 60)
        lag_before = fo.relay_metric(fo.primary, "source_ack_lag_bytes")
        fo.commit_rows(fo.primary, 25, "C while the relay is disconnected")
        lag_after = fo.relay_metric(fo.primary, "source_ack_lag_bytes")
        if lag_before is None or lag_after is None or lag_after <= lag_before:
            raise CaptureFailure(f"source_ack_lag_bytes does not grow while the relay is disconnected: "
                                 f"{lag_before} -> {lag_after}")
        status = run_trellara(["status", "--config", fo.config_old, "--view", "diagnostics", "--format", "json"],
                              expect=None)
        metrics = json.loads(status.stdout).get("source", {}).get("relay_metrics") or {}
        if float(metrics.get("source_ack_lag_bytes", 0)) <= 0:
            raise CaptureFailure(f"trellara status does not show source_ack_lag_bytes while the relay is "
                                 f"disconnected: {status.stdout[-800:]}")
        received = lsn_to_int(fo.primary.query("SELECT pg_current_wal_lsn()"))
        wait_for("the standby to receive batch C", lambda: lsn_to_int(
            fo.standby.query("SELECT pg_last_wal_replay_lsn()")) >= received, 60)
        fo.promote("immediate")
        fo.standby.query("SELECT trellara.start_flow('app')")
        wait_for("the relay of flow app to run on the promoted server", lambda: worker_pid(fo.standby), 60)
        wait_log_covers_source(fo.standby, timeout_s=120)
        result = fo.apply_new_log()
        fo.assert_target_equals_promoted("after a promotion while the relay was disconnected")
        print(f"lag while disconnected {lag_before:.0f} -> {lag_after:.0f} bytes; standby slot at "
              f"{int_to_lsn(synced)} (target applied {int_to_lsn(applied_a)}); new log: {summary_line(result)}")
        assert_no_backend_crashes(fo.standby, fo.target)
        return synced - applied_a


@scenario(seed_rows=("qualification_source_promotion_while_relay_disconnected",), suite="failover",
          invariants=("with source_ack = 'applied' the slot and its standby copy stay at what the target applied",
                      "source_ack_lag_bytes is visible and grows while the relay is disconnected (SQL and "
                      "trellara status)",
                      "the promoted server replays from the last applied position; the target equals it"))
def promotion_while_relay_disconnected_replays_from_the_last_applied_position():
    _promotion_while_relay_disconnected("failover-disconnected")


@scenario(suite="failover", defect="standby_slot_past_downstream",
          pairs_with="promotion_while_relay_disconnected_replays_from_the_last_applied_position",
          fault_points=("defect.standby_slot_past_downstream",),
          invariants=("the scenario's target check fails when the standby's slot is synced to the primary's "
                      "log-durable position instead of what the target applied",))
def negative_control_standby_slot_past_downstream_is_caught():
    env = {"TRELLARA_FAULTS": "defect.standby_slot_past_downstream:1:defect"}
    try:
        _promotion_while_relay_disconnected("failover-past-downstream", standby_env=env)
    except CaptureFailure as caught:
        if "differs from the promoted server" not in str(caught):
            raise
        print(f"caught: {str(caught)[:300]}")
        return
    raise CaptureFailure("with defect.standby_slot_past_downstream the promoted target still equals the source: "
                         "the scenario cannot catch a standby slot past downstream durability")


# --- posture before a promotion -----------------------------------------------------------------

def failover_findings(config, command="source-safety"):
    """{(check, subject): (severity, detail)} of `trellara <command> --format json`, source side."""
    result = run_trellara([command, "--config", config, "--format", "json"], expect=None)
    if result.returncode not in (0, 2):
        raise CaptureFailure(f"trellara {command} exited {result.returncode}: {result.stderr[-800:]}")
    report = json.loads(result.stdout)
    return {(f["check"], f["subject"]): (f["severity"], f["detail"]) for f in report["source"]["findings"]}


def _unsynced_standby_is_reported(standby_env=None):
    with Failover("failover-unsynced", standby_feedback=False, standby_env=standby_env) as fo:
        fo.start_standby()
        fo.commit_rows(fo.primary, 10, "x")
        wait_for("the standby's report to reach the primary", lambda: fo.primary.query(
            "SELECT state FROM trellara.standby_slots WHERE flow_slot = 'trellara_app'"), 60)
        if fo.standby_slot() is not None and "defect." not in (standby_env or {}).get("TRELLARA_FAULTS", ""):
            raise CaptureFailure("the standby keeps a slot without hot_standby_feedback")
        findings = failover_findings(fo.config_old)
        severity, detail = findings.get(("failover_slot", STANDBY_PHYSICAL_SLOT), ("missing", ""))
        print(f"hot_standby_feedback off: failover_slot {severity}: {detail[:160]}")
        if severity != "warning" or not detail.startswith("unsynced"):
            if "defect." in (standby_env or {}).get("TRELLARA_FAULTS", ""):
                record_fault_fired("defect.standby_reports_synced_while_waiting")
            raise CaptureFailure(f"source-safety does not warn that the standby's slot is unsynced: {severity} {detail}")
        for check in ("failover_boundary", "failover_hold"):
            if not any(key[0] == check and value[0] == "warning" for key, value in findings.items()):
                raise CaptureFailure(f"source-safety has no {check} warning with source_ack = local and no hold: "
                                     f"{sorted(findings)}")
        text = run_trellara(["check", "--config", fo.config_old], expect=None)
        if "unsynced: the standby on physical slot " + STANDBY_PHYSICAL_SLOT not in text.stdout:
            raise CaptureFailure(f"trellara check (text) does not show the unsynced standby: {text.stdout[-1500:]}")
        # Fixed on the standby: feedback on, a reload; then the flow's posture on the primary.
        fo.standby.query("ALTER SYSTEM SET hot_standby_feedback = on")
        fo.standby.query("SELECT pg_reload_conf()")
        fo.wait_standby_synced()
        fo.primary.query("SELECT trellara.set_source_ack('app', 'applied')")
        fo.primary.query(f"ALTER SYSTEM SET trellara.standby_slot_names = '{STANDBY_PHYSICAL_SLOT}'")
        fo.primary.query("SELECT pg_reload_conf()")

        def all_ok():
            found = failover_findings(fo.config_old)
            bad = {k: v for k, v in found.items() if k[0].startswith("failover") and v[0] != "ok"}
            return found if not bad else None
        found = wait_for("every failover finding to be ok once the standby is fixed and the flow set to "
                         "source_ack = 'applied' with the hold", all_ok, 60, interval_s=1)
        print("fixed: " + "; ".join(f"{k[0]} {v[0]}: {v[1][:80]}" for k, v in sorted(found.items())
                                    if k[0].startswith("failover")))
        # The flow dropped on the primary: the standby drops its copy of the slot (else it holds WAL
        # there and, through hot_standby_feedback, the catalog horizon on the primary).
        fo.primary.query("SELECT trellara.drop_flow('app')")
        wait_for("the standby to drop its slot of the dropped flow", lambda: fo.standby_slot() is None, 60)


@scenario(seed_rows=("source_failover_slot_unsynced",), suite="failover",
          invariants=("a standby whose slot sync waits (no hot_standby_feedback) is reported unsynced by "
                      "`trellara source-safety` and `trellara check` on the primary, per standby",
                      "source_ack = local and no trellara.standby_slot_names are each a warning",
                      "fixed (feedback on, source_ack = 'applied', the hold), every failover row is ok",
                      "a flow dropped on the primary: the standby drops its copy of the slot"))
def unsynced_standby_slot_is_reported_before_promotion():
    _unsynced_standby_is_reported()


@scenario(suite="failover", defect="standby_reports_synced_while_waiting",
          pairs_with="unsynced_standby_slot_is_reported_before_promotion",
          fault_points=("defect.standby_reports_synced_while_waiting",),
          invariants=("the unsynced warning is missing when the standby reports its waiting slot synced",))
def negative_control_standby_reporting_synced_while_waiting_is_caught():
    env = {"TRELLARA_FAULTS": "defect.standby_reports_synced_while_waiting:1:defect"}
    try:
        _unsynced_standby_is_reported(standby_env=env)
    except CaptureFailure as caught:
        if "does not warn that the standby's slot is unsynced" not in str(caught):
            raise
        print(f"caught: {str(caught)[:300]}")
        return
    raise CaptureFailure("with defect.standby_reports_synced_while_waiting source-safety still warned")


def _disabled_standby_is_reported_and_promotion_fails_closed(primary_env=None):
    with Failover("failover-disabled", standby_sync=False, primary_env=primary_env) as fo:
        fo.start_standby()
        fo.commit_rows(fo.primary, 10, "x")
        wait_log_covers_source(fo.primary, timeout_s=120)
        findings = failover_findings(fo.config_old)
        severity, detail = findings.get(("failover_slot", STANDBY_PHYSICAL_SLOT), ("missing", ""))
        print(f"standby_slot_sync off: failover_slot {severity}: {detail[:160]}")
        if severity != "warning" or not detail.startswith("disabled"):
            if primary_env:
                record_fault_fired("defect.failover_posture_unchecked")
            raise CaptureFailure(f"source-safety does not report the standby's disabled slot sync: {severity} {detail}")
        own = fo.standby.query("SELECT severity || ' ' || detail FROM trellara.check('app') WHERE \"check\" = "
                               "'standby_slot'")
        if not own.startswith("warning not synced"):
            raise CaptureFailure(f"check('app') on the standby does not warn: {own!r}")
        run_trellara(["apply", "--config", fo.config_old, "--until-caught-up"], what="trellara apply (old log)")
        received = lsn_to_int(fo.primary.query("SELECT pg_current_wal_lsn()"))
        wait_for("the standby to receive everything", lambda: lsn_to_int(
            fo.standby.query("SELECT pg_last_wal_replay_lsn()")) >= received, 60)
        fo.promote("immediate")
        fo.commit_rows(fo.standby, 10, "after the promotion")
        # Fails closed: no slot, nothing captured, check() critical, source-safety exits 2.
        result = run_trellara(["source-safety", "--config", fo.new_config()], expect=None)
        if result.returncode != 2 or "replication slot is missing" not in result.stdout:
            raise CaptureFailure(f"after the promotion source-safety does not fail (exit {result.returncode}) on the "
                                 f"missing slot: {result.stdout[-1200:]}")
        if fo.standby.query("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'trellara_app'") != "0":
            raise CaptureFailure("a slot trellara_app exists on the promoted server although nothing synced it")
        print("promoted without a synced slot: source-safety exit 2, " +
              [l for l in result.stdout.splitlines() if "replication slot is missing" in l][0].strip()[:160])
        assert_no_backend_crashes(fo.standby, fo.target)


@scenario(seed_rows=("source_failover_slot_disabled",), suite="failover",
          invariants=("a standby without trellara.standby_slot_sync is reported disabled on the primary "
                      "(source-safety, per standby) and on itself (check())",
                      "after its promotion the flow fails closed: no slot, source-safety exits 2 naming it"))
def disabled_standby_slot_sync_is_reported_and_promotion_fails_closed():
    _disabled_standby_is_reported_and_promotion_fails_closed()


@scenario(suite="failover", defect="failover_posture_unchecked",
          pairs_with="disabled_standby_slot_sync_is_reported_and_promotion_fails_closed",
          fault_points=("defect.failover_posture_unchecked",),
          invariants=("the disabled warning is missing when check() does not read the standbys' reports",))
def negative_control_failover_posture_unchecked_is_caught():
    env = {"TRELLARA_FAULTS": "defect.failover_posture_unchecked:1:defect"}
    try:
        _disabled_standby_is_reported_and_promotion_fails_closed(primary_env=env)
    except CaptureFailure as caught:
        if "does not report the standby's disabled slot sync" not in str(caught):
            raise
        print(f"caught: {str(caught)[:300]}")
        return
    raise CaptureFailure("with defect.failover_posture_unchecked source-safety still reported the disabled standby")


# --- a target ahead of the promoted server ---------------------------------------------------------

@scenario(suite="failover",
          invariants=("without the hold, transactions the standby never received can reach the target",
                      "the applier on the promoted server's log fails closed (exit 3, blocked) naming their count "
                      "and commit LSN range, before applying anything",
                      "trellara repair-plan gives the reseed steps"))
def target_ahead_of_the_promoted_server_fails_closed():
    with Failover("failover-ahead") as fo:
        fo.promote_a_cut_off_standby(lambda: run_trellara(["apply", "--config", fo.config_old, "--until-caught-up"],
                                                          what="trellara apply (old log)"))
        before = table_digest(fo.target, "t")
        result = fo.apply_new_log(expect=3)
        message = result.stderr
        if "15 transaction(s)" not in message or "never had them" not in message:
            raise CaptureFailure(f"the applier did not fail closed naming the 15 transactions: {message[-1500:]}")
        if table_digest(fo.target, "t") != before:
            raise CaptureFailure("the applier changed the target before failing closed")
        state = fo.target.query("SELECT state FROM trellara.apply_status WHERE flow = 'app'")
        if state != "blocked":
            raise CaptureFailure(f"trellara.apply_status says {state!r}, not blocked")
        plan = run_trellara(["repair-plan", "--config", fo.new_config()], expect=None)
        if plan.returncode != 0 or "reseed" not in plan.stdout or "source timeline" not in plan.stdout:
            raise CaptureFailure(f"repair-plan does not give the reseed steps (exit {plan.returncode}): "
                                 f"{plan.stdout[-1500:]} {plan.stderr[-500:]}")
        print("failed closed: " + [l for l in message.splitlines() if "never had them" in l][0][:300])
        assert_no_backend_crashes(fo.target)


if __name__ == "__main__":
    run_scenarios([standby_slot_synced_then_promoted_relay_starts_new_log_from_it,
                   unplanned_promotion_under_load_redelivers_and_dedup_keeps_exactly_once,
                   planned_switchover_under_load_keeps_exactly_once,
                   negative_control_dedup_skipped_after_promotion_is_caught,
                   promotion_while_relay_disconnected_replays_from_the_last_applied_position,
                   negative_control_standby_slot_past_downstream_is_caught,
                   unsynced_standby_slot_is_reported_before_promotion,
                   negative_control_standby_reporting_synced_while_waiting_is_caught,
                   disabled_standby_slot_sync_is_reported_and_promotion_fails_closed,
                   negative_control_failover_posture_unchecked_is_caught,
                   target_ahead_of_the_promoted_server_fails_closed])
