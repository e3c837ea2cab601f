#!/usr/bin/env python3
"""Integration: kill -9 of the relay worker under load never loses or duplicates a transaction in
the log, and the slot is never confirmed past what the log holds durably.

Load: pgbench (4 clients, restarted after every crash) plus a side client that commits 3,000-row
inserts (chunked transactions: chunks + manifest + commit marker) into a published table. At
random moments the relay worker (PID from trellara.status(), identified by its command line) gets
SIGKILL; the postmaster then restarts the whole cluster, and the launcher starts the worker again.
TRELLARA_RELAY_KILLS (default 5) sets how many kills; TRELLARA_SEED reproduces the timing.

A sampler thread polls every ~50 ms, on its own connections: the slot's confirmed_flush_lsn (read
first), then the LSN the log covers on disk (commit LSN of the last durable envelope / commit marker
/ progress marker, read with `trellara log records`, read second). Since the log only grows, a
confirmed LSN above the later-read disk LSN proves the slot was confirmed past durable data. It
also checks status().log_durable_lsn, read after confirmed_flush_lsn, against it.

At the end the log's completed transactions (identical re-emitted chunks of a transaction cut by a
kill are allowed; a whole transaction twice is not) must equal the source's committed transactions
from a test_decoding truth slot created before the load: same xids, order and commit LSNs.
It must never leave a cluster running and never signal a process it has not identified.
"""

import os
import random
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import (CaptureFailure, LogFollower, PsqlSession, compare, int_to_lsn, log_records,  # noqa: E402
                             log_transactions, lsn_to_int, run_pgbench, truth_transactions,
                             wait_caught_up, wait_for, worker_pid)
from flow_pair import FlowPair  # noqa: E402

KILLS = int(os.environ.get("TRELLARA_RELAY_KILLS", "5"))
SAMPLE_INTERVAL_S = 0.05
MIN_SAMPLES = 50  # the sampler must have watched the run (taken while the load runs)
PUBLISHED_TABLES = ("pgbench_accounts", "pgbench_branches", "pgbench_tellers", "pgbench_history", "bulk")


class Kill9Capture(FlowPair):
    """A source (no target) with pgbench's tables and table bulk, a flow on them and a
    test_decoding truth slot created with it (no write to a published table between the slots)."""

    def __init__(self, name):
        super().__init__(name, source_sql="CREATE TABLE bulk (id bigserial PRIMARY KEY, v int)",
                         tables=PUBLISHED_TABLES, with_target=False, truth=True)

    def prepare(self):
        run_pgbench(self.source, ["-i", "-s", "1", "-q"])
        super().prepare()


class Sampler(threading.Thread):
    """Compares confirmed_flush_lsn with what the log durably covers, continuously."""

    def __init__(self, cluster, log_dir):
        super().__init__(daemon=True)
        self.session = PsqlSession(cluster)
        self.follower = LogFollower(log_dir)
        self.stop_event = threading.Event()
        self.samples = 0
        self.failed_polls = 0
        self.violations = []          # confirmed > disk-covered (read after it)
        self.board_violations = []    # confirmed > status().log_durable_lsn read after it
        self.same_row_skew = 0        # one status() row with confirmed_flush_lsn > log_durable_lsn
        self.max_confirmed = 0
        self.error = None

    def run(self):
        try:
            while not self.stop_event.is_set():
                self.sample()
                time.sleep(SAMPLE_INTERVAL_S)
        except Exception as error:  # reported by the main thread
            self.error = error
        finally:
            self.session.close()

    def sample(self):
        # Two statements, in this order: the slot's confirmed_flush_lsn first, then the board's
        # log_durable_lsn. Both only grow (the board is re-seeded from the log on disk after a
        # restart), so confirmed > a durable LSN read after it is a real violation. One status()
        # row is not used for this: it reads the slot and the board at different moments.
        output = self.session.query(
            "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'trellara_app'; "
            "SELECT coalesce(log_durable_lsn::text, '') || '|' || coalesce(confirmed_flush_lsn::text, '') "
            "FROM trellara.status() WHERE flow = 'app'")
        lines = output.splitlines() if output else []
        if len(lines) != 2 or lines[1].count("|") != 1:
            self.failed_polls += 1   # the cluster is restarting after a kill
            time.sleep(0.2)
            return
        confirmed = lsn_to_int(lines[0])
        board_durable, row_confirmed = lines[1].split("|")
        covered = self.follower.refresh()   # read after confirmed: the log only grows
        self.samples += 1
        self.max_confirmed = max(self.max_confirmed, confirmed)
        if confirmed > covered:
            self.violations.append((time.monotonic(), confirmed, covered))
            print(f"VIOLATION: slot confirmed at {int_to_lsn(confirmed)} but the log on disk covers only "
                  f"{int_to_lsn(covered)}", flush=True)
        if board_durable and confirmed > lsn_to_int(board_durable):
            self.board_violations.append((int_to_lsn(confirmed), board_durable))
        if board_durable and row_confirmed and lsn_to_int(row_confirmed) > lsn_to_int(board_durable):
            self.same_row_skew += 1   # reported, not failed: see the comment above


class Load:
    """pgbench and a chunked-insert client, each restarted until stop() after a crash ends them."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.stop_event = threading.Event()
        self.pgbench_runs = 0
        self.bulk_commits = 0
        self.threads = [threading.Thread(target=self.pgbench_loop, daemon=True),
                        threading.Thread(target=self.bulk_loop, daemon=True)]

    def start(self):
        for thread in self.threads:
            thread.start()

    def stop(self):
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout=60)

    def pgbench_loop(self):
        while not self.stop_event.is_set():
            run_pgbench(self.cluster, ["-c", "4", "-j", "2", "-T", "3", "-n"], check=False)
            self.pgbench_runs += 1
            time.sleep(0.1)

    def bulk_loop(self):
        while not self.stop_event.is_set():
            result = self.cluster.psql("INSERT INTO bulk (v) SELECT g FROM generate_series(1, 3000) g",
                                       check=False)
            if result.returncode == 0:
                self.bulk_commits += 1
            time.sleep(0.4)


def postmaster_restarts(cluster):
    return cluster.server_log().count("all server processes terminated; reinitializing")


def relay_kill9_never_loses_duplicates_or_confirms_past_durable_log(seed):
    rng = random.Random(seed)
    with Kill9Capture("capture-kill9") as pair:
        cluster, log_dir = pair.source, pair.log_dir
        sampler = Sampler(cluster, log_dir)
        sampler.start()
        load = Load(cluster)
        load.start()
        kills = []
        try:
            for number in range(1, KILLS + 1):
                pid = wait_for("the relay worker to run", lambda: worker_pid(cluster), 90)
                delay = rng.uniform(1.0, 4.0)
                time.sleep(delay)
                pid = worker_pid(cluster)
                if pid is None:
                    raise CaptureFailure(f"kill {number}: the relay worker vanished before the kill")
                restarts_before = postmaster_restarts(cluster)
                covered = sampler.follower.covered_lsn
                os.kill(pid, signal.SIGKILL)
                killed_at = time.monotonic()
                wait_for(f"kill {number}: the postmaster to restart the cluster",
                         lambda: postmaster_restarts(cluster) > restarts_before, 60)
                new_pid = wait_for(f"kill {number}: the relay worker to come back",
                                   lambda: (p := worker_pid(cluster)) and p != pid and p, 90)
                back_s = time.monotonic() - killed_at
                kills.append((pid, new_pid, back_s))
                print(f"kill {number}: SIGKILL relay pid {pid} after {delay:.2f}s (log covered "
                      f"{int_to_lsn(covered)}, {len(sampler.follower.records)} records); cluster restarted; "
                      f"worker {new_pid} back after {back_s:.1f}s", flush=True)
            time.sleep(2.0)
            # The sampler watches the run while the load goes on: on a loaded machine its polls are
            # slower, so it is given the time to take its samples instead of failing on a count.
            wait_for(f"the sampler to take {MIN_SAMPLES} samples under load", lambda: sampler.samples >= MIN_SAMPLES
                     or sampler.error is not None, 300)
        finally:
            load.stop()
        if len(kills) != KILLS:
            raise CaptureFailure(f"only {len(kills)} of {KILLS} kills happened")
        truth = truth_transactions(cluster, "public.")
        wait_caught_up(cluster, truth[-1][1], timeout_s=120)
        time.sleep(0.5)
        sampler.stop_event.set()
        sampler.join(timeout=30)
        if sampler.error:
            raise CaptureFailure(f"the sampler failed: {sampler.error!r}")
        print(f"sampler: {sampler.samples} samples ({sampler.failed_polls} polls while the cluster restarted), "
              f"max confirmed {int_to_lsn(sampler.max_confirmed)}, confirmed past the disk log: "
              f"{len(sampler.violations)}, confirmed past status().log_durable_lsn: "
              f"{len(sampler.board_violations)}, status() rows showing confirmed past log_durable_lsn (read skew): "
              f"{sampler.same_row_skew}")
        print(f"load: {load.pgbench_runs} pgbench runs, {load.bulk_commits} chunked inserts acknowledged")
        if sampler.samples < MIN_SAMPLES:
            raise CaptureFailure(f"only {sampler.samples} samples: the sampler did not watch the run")
        if sampler.violations:
            first = sampler.violations[0]
            raise CaptureFailure(f"{len(sampler.violations)} samples saw confirmed_flush_lsn past the durable log, "
                                 f"first: confirmed {int_to_lsn(first[1])} > log {int_to_lsn(first[2])}")
        if sampler.board_violations:
            raise CaptureFailure(f"{len(sampler.board_violations)} status() rows showed confirmed_flush_lsn past "
                                 f"log_durable_lsn, first: {sampler.board_violations[0]}")
        records = log_records(log_dir)
        logged, chunks = log_transactions(records)
        print(f"log {log_dir}: {len(records)} records, {chunks}")
        if chunks["chunked_transactions"] == 0:
            raise CaptureFailure("no chunked transaction reached the log: the side load did not run")
        compare(truth, logged, f"after {len(kills)} relay kills")
        print(f"ok: relay_kill9_never_loses_duplicates_or_confirms_past_durable_log ({len(kills)} kills, seed {seed})")


def main():
    seed = int(os.environ.get("TRELLARA_SEED", random.SystemRandom().randrange(2**32)))
    print(f"test_capture_relay_kill9: seed {seed} (reproduce with TRELLARA_SEED={seed}), {KILLS} kills")
    relay_kill9_never_loses_duplicates_or_confirms_past_durable_log(seed)


if __name__ == "__main__":
    main()
