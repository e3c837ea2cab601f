#!/usr/bin/env python3
"""Integration: what an operator sees of a snapshot.

- the target's trellara.snapshot_status() and `trellara status` (text and JSON) show each table's
  copy: state, chunks copied of chunks, rows; a killed run shows exactly the chunks that survived;
- the source's trellara.check() warns (snapshot_holding) about a snapshot/verify/reseed session of
  the flow that has held a source snapshot for longer than trellara.snapshot_hold_warning, and
  says nothing about one that has not, or about a session of another application.
The source/target pair is test_snapshot.Pair, a FlowPair subclass (tests/integration/flow_pair.py).
"""

import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import PsqlSession, TRELLARA_BIN, run_scenarios, wait_for  # noqa: E402
from flow_pair import run_trellara  # noqa: E402
from test_snapshot import Pair, expect, snapshot_json  # noqa: E402


def status_json(p):
    result = run_trellara(["status", "--config", p.config, "--format", "json"], expect=None, timeout_s=120)
    return json.loads(result.stdout), result


def status_text(p):
    return run_trellara(["status", "--config", p.config], expect=None).stdout


def snapshot_progress_shows_in_status_and_snapshot_status():
    with Pair("snap-surfaces") as p:
        # A run killed inside its third chunk: status shows exactly what survived.
        env = dict(os.environ, TRELLARA_FAULTS="snapshot.during_table_copy:3:stall", TRELLARA_FAULT_STALL_MS="300000")
        proc = subprocess.Popen([TRELLARA_BIN, "snapshot", "--config", p.config, "--jobs", "1", "--chunk-rows", "500",
                                 "--run-id", "s1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        # The third chunk's COPY, stalled: two chunks committed and a COPY in flight (waiting for a
        # COPY alone could be met by the first chunk's on a slow machine, and kill too early).
        wait_for("two chunks copied and the third chunk's COPY in flight", lambda: p.target.query(
            "SELECT (SELECT count(*) FROM trellara.snapshot_chunks WHERE state = 'copied') = 2 AND "
            "(SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'COPY %FROM STDIN') = 1") == "t", 120)
        os.kill(proc.pid, signal.SIGKILL)  # our own child
        proc.communicate()
        rows = p.target.query("SELECT table_name, state, chunks, chunks_copied, rows_copied FROM "
                              "trellara.snapshot_status() WHERE flow = 'app' ORDER BY 1")
        print(f"snapshot_status() after the kill:\n{rows}")
        copied = int(p.target.query("SELECT count(*) FROM trellara.snapshot_chunks WHERE state = 'copied'"))
        expect(copied == 2, f"two chunks survived the kill, {copied} recorded")
        total = sum(int(line.split("|")[3]) for line in rows.splitlines())
        expect(total == copied, f"snapshot_status() counts the copied chunks: {rows}")
        status, result = status_json(p)
        snap = {t["table"]: t for t in status["snapshot"]}
        expect(set(snap) == {"public.items", "public.nokey", "public.textkey"}, f"status lists every table: {status}")
        expect(sum(t["chunks_copied"] for t in snap.values()) == 2 and
               all(t["state"] != "handoff_ready" for t in snap.values()), f"status shows the partial copy: {snap}")
        text = status_text(p)
        expect("snapshot:            public.items" in text, f"the text view shows the copy: {text}")
        summary, _ = snapshot_json(p.config, "--run-id", "s1")
        expect(summary["state"] == "handoff_ready", f"{summary}")
        status, _ = status_json(p)
        expect(all(t["state"] == "handoff_ready" and t["chunks_copied"] == t["chunks"] for t in status["snapshot"]),
               f"status after the rerun: {status['snapshot']}")
        print("trellara status:\n" + status_text(p))


def check_warns_about_a_long_held_snapshot():
    with Pair("snap-check") as p:
        check = ("SET trellara.snapshot_hold_warning = '{}'; SELECT severity || ' ' || subject || ': ' || detail "
                 "FROM trellara.check('app') WHERE \"check\" = 'snapshot_holding'")
        holders = []
        try:
            for app in ("trellara-snapshot/app/1", "trellara-verify/app", "someone-else/app"):
                s = PsqlSession(p.source)
                s.query(f"SET application_name = '{app}'")
                s.query("BEGIN ISOLATION LEVEL REPEATABLE READ")
                s.query("SELECT count(*) FROM public.items")  # takes the snapshot: backend_xmin is set
                holders.append(s)
            time.sleep(1.2)
            long_held = p.source.query(check.format("1 second"))
            print(f"check() with snapshot_hold_warning = 1 second:\n{long_held}")
            lines = long_held.splitlines()
            expect(len(lines) == 2 and all(line.startswith("warning ") for line in lines),
                   f"the snapshot and verify sessions of flow app are reported, nobody else: {long_held}")
            expect(any("trellara-snapshot/app/1" in line for line in lines) and
                   any("trellara-verify/app" in line for line in lines), long_held)
            expect(p.source.query(check.format("1 hour")) == "", "nothing is reported before the threshold")
        finally:
            for s in holders:
                s.close()
        expect(p.source.query(check.format("0")) == "", "nothing is reported once the sessions ended")


if __name__ == "__main__":
    run_scenarios([snapshot_progress_shows_in_status_and_snapshot_status, check_warns_about_a_long_held_snapshot])
