#!/usr/bin/env python3
"""Integration: the source and the relay crash while `trellara snapshot` copies (seed
snapshot_source_crash_during_copy and snapshot_relay_crash_during_copy).

As a DBA onboards a live database: the source holds data and takes writes all along (a writer
that updates, inserts and deletes rows of every table and keeps going across the crash), the
applier runs as a daemon from before the snapshot starts, and `trellara snapshot` copies in
key-range chunks with two workers. Once both workers are inside a chunk's COPY (fault point
snapshot.during_table_copy, observed to fire: the COPYs are seen on the target), the source is
crashed:
  - snapshot_source_crash_during_copy: the source postmaster stops immediately and starts again;
  - snapshot_relay_crash_during_copy: the flow's relay worker gets SIGKILL, so the postmaster
    resets every backend (the snapshot's source sessions and the writer's included) and restarts.
The snapshot process either retries on fresh connections or exits non-zero; then a rerun with the
same run id must finish (exit 0, handoff_ready), skipping the chunks committed before the crash.
Then the writer stops, the log covers the source, `trellara verify` (beside the running applier)
must exit 0, and after the applier is stopped source and target must hold exactly the same rows.
No unresolved quarantine may remain (a transaction quarantined because the applier met a row the
copy had not brought yet is retried once the table's copy is handoff-ready).
The source/target pair is test_snapshot.Pair, a FlowPair subclass (tests/integration/flow_pair.py).
"""

import os
import random
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import (TRELLARA_BIN, record_fault_fired, run_scenarios, scenario, wait_for,  # noqa: E402
                             worker_pid)
from flow_pair import run_trellara  # noqa: E402
from test_snapshot import ITEMS, TABLES, Pair, expect, snapshot_json  # noqa: E402

EXTRA_ITEMS = 60_000
STALL_MS = 4000


class Writer(threading.Thread):
    """Writes to every published table until stopped; a failure (the crash) is retried after a
    pause, so the source keeps taking writes before, during and after the crash."""

    def __init__(self, pair):
        super().__init__(daemon=True)
        self.pair = pair
        self.stop_event = threading.Event()
        self.committed = 0
        self.failed = 0

    def run(self):
        rng = random.Random(5)
        next_id = 10_000_000
        while not self.stop_event.is_set():
            i = rng.randint(1, ITEMS)
            moved = rng.randint(ITEMS + 1_000_000, ITEMS + 1_000_000 + EXTRA_ITEMS - 1)
            result = self.pair.source.psql(
                f"BEGIN; UPDATE public.items SET n = n + 1, payload = 'w' || {i} WHERE id = {i}; "
                f"UPDATE public.items SET id = {next_id + 1} WHERE id = {moved}; "
                f"INSERT INTO public.items (id, n, payload) VALUES ({next_id}, 1, 'new'); "
                f"DELETE FROM public.items WHERE id = {rng.randint(1, ITEMS)}; "
                f"UPDATE public.textkey SET v = v + 1 WHERE k = 'k{rng.randint(1, 300)}'; "
                f"INSERT INTO public.nokey VALUES ('w', {next_id}); COMMIT;", check=False)
            next_id += 2
            if result.returncode == 0:
                self.committed += 1
            else:
                self.failed += 1
                time.sleep(0.2)

    def stop(self):
        self.stop_event.set()
        self.join(timeout=120)


def copies_in_flight(pair):
    return int(pair.target.query("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'COPY %FROM STDIN'"))


def crash_during_copy(kind):
    with Pair(f"snap-{kind}-crash", extra_items=EXTRA_ITEMS) as p:
        applier_log = open(os.path.join(p.work.name, "apply.log"), "w")
        applier = subprocess.Popen([TRELLARA_BIN, "apply", "--config", p.config], stdout=applier_log,
                                   stderr=subprocess.STDOUT)
        writer = Writer(p)
        writer.start()
        try:
            wait_for("the writer to commit", lambda: writer.committed >= 20, 60)
            env = dict(os.environ, TRELLARA_FAULTS="snapshot.during_table_copy:3:stall,snapshot.during_table_copy:4:stall",
                       TRELLARA_FAULT_STALL_MS=str(STALL_MS))
            snap = subprocess.Popen([TRELLARA_BIN, "snapshot", "--config", p.config, "--jobs", "2", "--chunk-rows",
                                     "4000", "--run-id", "crash", "--format", "json"], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, env=env)
            wait_for("both workers inside a chunk's COPY (stalled at snapshot.during_table_copy)",
                     lambda: copies_in_flight(p) == 2 or snap.poll() is not None, 120, 0.05)
            expect(snap.poll() is None, f"the snapshot ended before the fault fired: {snap.communicate()}")
            record_fault_fired("snapshot.during_table_copy", 2)
            copied_before = int(p.target.query("SELECT count(*) FROM trellara.snapshot_chunks WHERE state = 'copied'"))
            if kind == "source":
                old = p.source.restart_immediate()
                print(f"source postmaster {old} stopped immediately and started again; "
                      f"{copied_before} chunks were committed before")
            else:
                pid = worker_pid(p.source)
                expect(pid is not None, "the relay worker is running")
                p.expected_crash = f"(PID {pid}) was terminated by signal 9"  # the only crash the log may report
                os.kill(pid, signal.SIGKILL)  # the relay: a process of the cluster this test started
                wait_for("the relay to run again after the postmaster's reset",
                         lambda: (worker_pid(p.source) or pid) != pid, 120)
                print(f"relay worker {pid} killed with SIGKILL; the postmaster reset every backend; "
                      f"{copied_before} chunks were committed before")
            out, err = snap.communicate(timeout=600)
            print(f"the interrupted snapshot exited {snap.returncode}: {err.strip()[-400:]}")
            summary, _ = snapshot_json(p.config, "--jobs", "2", "--run-id", "crash")
            expect(summary["state"] == "handoff_ready", f"the rerun finishes: {summary}")
            if snap.returncode != 0:
                expect(sum(t["chunks_skipped"] for t in summary["tables"]) >= copied_before,
                       f"the rerun skipped the chunks committed before the crash ({copied_before}): {summary}")
            wait_for("the writer to commit after the crash", lambda: writer.committed >= 40, 120)
        finally:
            writer.stop()
        print(f"writer: {writer.committed} transactions committed, {writer.failed} failed around the crash")
        try:
            p.wait_log_covers_source()
            verify = run_trellara(["verify", "--config", p.config], expect=None)
            print(verify.stdout.strip()[-1500:])
            expect(verify.returncode == 0, f"verify beside the running applier exits 0, got {verify.returncode}: "
                                           f"{verify.stdout[-1500:]} {verify.stderr[-1500:]}")
        finally:
            if applier.poll() is None:
                applier.send_signal(signal.SIGTERM)
            try:
                applier.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                applier.kill()
                applier.communicate()
            applier_log.close()
        p.expect_same(f"after the {kind} crash", TABLES)
        open_quarantines = p.target.query("SELECT count(*) FROM trellara.quarantine WHERE state <> 'resolved'")
        expect(open_quarantines == "0", "no open quarantine remains: " + p.target.query(
            "SELECT xid, reason, state, detail FROM trellara.quarantine"))


@scenario(seed_rows=["snapshot_source_crash_during_copy"], suite="snapshot",
          fault_points=["snapshot.during_table_copy"],
          invariants=["a source crash inside a COPY loses only the chunks in flight",
                      "the rerun with the same run id skips the committed chunks and finishes",
                      "verify exits 0 beside the running applier; target equals source"])
def snapshot_source_crash_during_copy():
    crash_during_copy("source")


@scenario(seed_rows=["snapshot_relay_crash_during_copy"], suite="snapshot",
          fault_points=["snapshot.during_table_copy"],
          invariants=["a relay SIGKILL (postmaster reset) inside a COPY loses only the chunks in flight",
                      "the rerun with the same run id skips the committed chunks and finishes",
                      "verify exits 0 beside the running applier; target equals source"])
def snapshot_relay_crash_during_copy():
    crash_during_copy("relay")


if __name__ == "__main__":
    run_scenarios([snapshot_source_crash_during_copy, snapshot_relay_crash_during_copy])
