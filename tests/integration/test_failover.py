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

import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from capture_support import (CaptureFailure, assert_no_backend_crashes, int_to_lsn, log_records,  # noqa: E402
                             log_transactions, lsn_to_int, run_scenarios, scenario, wait_caught_up,
                             wait_for, worker_pid, write_flow_config)
from flow_pair import run_trellara, table_digest  # noqa: E402
from harness import Cluster  # noqa: E402

PRIMARY_SETTINGS = {"trellara.progress_interval": "'100ms'"}
STANDBY_SETTINGS = {"hot_standby_feedback": "on", "trellara.standby_slot_sync": "on",
                    "trellara.progress_interval": "'100ms'"}
STANDBY_PHYSICAL_SLOT = "failover_standby"


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
    aside = new_dir.rstrip("/") + ".timeline1"
    if not os.path.isdir(aside):
        raise CaptureFailure(f"the standby's copy of the old log was not moved aside to {aside}")
    with open(os.path.join(new_dir, "TIMELINE")) as recorded:
        timeline = recorded.read().strip()
    if timeline != "2":
        raise CaptureFailure(f"the new log records timeline {timeline!r}, not the promoted server's 2")

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


if __name__ == "__main__":
    run_scenarios([standby_slot_synced_then_promoted_relay_starts_new_log_from_it])
