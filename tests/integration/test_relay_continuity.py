#!/usr/bin/env python3
"""Integration: the relay refuses to run when its log covers less than the slot's confirmed
position (DESIGN §2 "continuity"), with a real server and relay worker:

  1. log restored from an older copy: the directory is replaced, while the flow is stopped, by a
     copy taken earlier; the slot has since been confirmed past what the copy holds;
  2. log directory deleted while the flow is stopped;
  3. acknowledged frames lost: the last frames of the newest segment are cut off (and its
     index, which is derived data, removed), so recovery sees a shorter log;
  4. a left-over log: drop_flow keeps the directory, create_flow makes a new slot past its end.

Each time, after start_flow: state 'error' in status(), last_error naming the gap (or the empty
log) and the remedy, a critical relay_error row in check(), the slot not confirmed any further,
no relay process left, and nothing appended to the log. Between scenarios the good log is put
back and the flow runs again, which also proves that the refusal comes from the hole and not
from the copy itself. It must never leave a cluster running.
"""

import glob
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import (CaptureFailure, log_records, lsn_to_int, wait_caught_up, wait_for,  # noqa: E402
                             worker_pid)
from flow_pair import FlowPair  # noqa: E402


def confirmed(cluster):
    return cluster.query("SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'trellara_app'")


def write_and_catch_up(cluster, first_id, n):
    for i in range(first_id, first_id + n):
        cluster.query(f"INSERT INTO t VALUES ({i}, 'row {i}')")
    wait_caught_up(cluster, lsn_to_int(cluster.query("SELECT pg_current_wal_lsn()")))


def copy_log(log_dir, to):
    shutil.copytree(log_dir, to, symlinks=True, copy_function=shutil.copy2)
    stat = os.stat(log_dir)
    for root, dirs, files in os.walk(to):
        for name in [root] + [os.path.join(root, f) for f in dirs + files]:
            os.chown(name, stat.st_uid, stat.st_gid)


def replace_log(log_dir, with_copy):
    shutil.rmtree(log_dir)
    copy_log(with_copy, log_dir)


def expect_refusal(cluster, log_dir, label, needed, cut_from=None):
    """`cut_from`: the records the log held before frames were cut off (its index is gone, so it
    cannot be read until the relay's recovery rebuilds it): afterwards the log must be a strict
    prefix of them."""
    before_confirmed = confirmed(cluster)
    before_records = None if cut_from is not None else len(log_records(log_dir)) if os.path.isdir(log_dir) else 0
    cluster.query("SELECT trellara.start_flow('app')")
    wait_for(f"{label}: the flow to enter the error state",
             lambda: cluster.query("SELECT state FROM trellara.status() WHERE flow = 'app'") == "error", 60)
    error = cluster.query("SELECT last_error FROM trellara.status() WHERE flow = 'app'")
    print(f"{label}: last_error: {error}")
    for text in needed + ["reseed" if "left-over" not in label else "start_flow", "drop_flow('app', true)"]:
        if text not in error:
            raise CaptureFailure(f"{label}: last_error does not say {text!r}: {error}")
    check = cluster.query("SELECT severity || '|' || remedy FROM trellara.check('app') WHERE \"check\" = 'relay_error'")
    print(f"{label}: check(): {check}")
    if not check.startswith("critical|") or "drop_flow('app', true)" not in check:
        raise CaptureFailure(f"{label}: check() has no critical relay_error row with the remedy: {check!r}")
    # A write after the refusal must not move the slot: nothing is confirmed past the hole.
    cluster.query("INSERT INTO t VALUES (100000, 'after refusal'); DELETE FROM t WHERE id = 100000")
    after_confirmed = confirmed(cluster)
    if cut_from is not None:
        after = log_records(log_dir)
        if len(after) >= len(cut_from) or after != cut_from[:len(after)]:
            raise CaptureFailure(f"{label}: the log is not a strict prefix of what it held: {len(after)} records now, "
                                 f"{len(cut_from)} before the cut")
        before_records = after_records = len(after)
    else:
        after_records = len(log_records(log_dir)) if os.path.isdir(log_dir) else 0
    pid = cluster.query("SELECT coalesce(worker_pid::text, 'none') FROM trellara.status() WHERE flow = 'app'")
    print(f"{label}: slot confirmed {before_confirmed} -> {after_confirmed}; log records {before_records} -> "
          f"{after_records}; worker {pid}")
    if after_confirmed != before_confirmed:
        raise CaptureFailure(f"{label}: the slot moved from {before_confirmed} to {after_confirmed}")
    if after_records != before_records:
        raise CaptureFailure(f"{label}: the refused relay appended {after_records - before_records} records")
    if pid != "none":
        raise CaptureFailure(f"{label}: a relay process ({pid}) still holds the flow")
    cluster.query("SELECT trellara.stop_flow('app')")


def relay_refuses_a_log_behind_its_slot():
    with FlowPair("relay-continuity", "CREATE TABLE t (id int PRIMARY KEY, v text)", tables=("t",),
                  with_target=False) as pair:
        cluster, log_dir, work = pair.source, pair.log_dir, pair.work.name
        write_and_catch_up(cluster, 1, 5)
        cluster.query("SELECT trellara.stop_flow('app')")
        older = os.path.join(work, "older")
        copy_log(log_dir, older)
        cluster.query("SELECT trellara.start_flow('app')")
        wait_for("relay to run", lambda: worker_pid(cluster), 60)
        write_and_catch_up(cluster, 6, 5)
        cluster.query("SELECT trellara.stop_flow('app')")
        good = os.path.join(work, "good")
        copy_log(log_dir, good)

        # 1. An older copy of the log.
        replace_log(log_dir, older)
        expect_refusal(cluster, log_dir, "older copy", ["covers the source only through", "confirmed to"])

        # 2. The directory deleted.
        shutil.rmtree(log_dir)
        expect_refusal(cluster, log_dir, "deleted directory", ["holds no records", "deleted or emptied"])

        # The good log back: the relay runs again and captures more.
        replace_log(log_dir, good)
        cluster.query("SELECT trellara.start_flow('app')")
        wait_for("relay to run on the good log", lambda: worker_pid(cluster), 60)
        write_and_catch_up(cluster, 11, 5)
        cluster.query("SELECT trellara.stop_flow('app')")

        # 3. Acknowledged frames lost: cut the newest segment in the middle of its last frames.
        records = log_records(log_dir)
        segment = sorted(glob.glob(os.path.join(log_dir, "segment-*.log")))[-1]
        size = os.path.getsize(segment)
        cut = size - 300 if size > 600 else size // 2
        with open(segment, "r+b") as f:
            f.truncate(cut)
        index = segment.replace("segment-", "index-").replace(".log", ".idx")
        if os.path.exists(index):
            os.unlink(index)
        print(f"acknowledged frames lost: {segment} cut from {size} to {cut} bytes ({len(records)} records before), "
              f"index removed")
        expect_refusal(cluster, log_dir, "lost frames", ["covers the source only through", "confirmed to"],
                       cut_from=records)

        # 4. A left-over log: the flow is dropped (its directory is kept) and created again with
        # a new slot; the old log ends before the new slot's position.
        cluster.query("SELECT trellara.drop_flow('app')")
        cluster.query("SELECT trellara.create_flow('app', 'pub')")
        expect_refusal(cluster, log_dir, "left-over log", ["that this flow did not write", "drop_flow('app', true)"])
        pair.check_no_crashes()
    print("OK relay_refuses_a_log_behind_its_slot")


if __name__ == "__main__":
    relay_refuses_a_log_behind_its_slot()
