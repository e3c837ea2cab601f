#!/usr/bin/env python3
"""Integration: the relay worker survives an everyday SQL mix — it never dies by a signal, never
restarts, and the server never restarts its backends (docs/relay.md "Memory contexts").

  varied_wal_records_never_crash_the_relay
      three concurrent sessions run tests/integration/sql_mix.py against a source whose flow
      publishes the mix's tables: many small transactions per relay pass, then WAL records above
      the reader's buffers (logical messages of 50 KiB - 1 MiB, SP-GiST/GiST index builds logging
      whole relations, commit records with thousands of invalidations), geometric, array, wide and
      TOASTed rows, DDL between them. Checks: the relay worker has the PID it started with and
      the server log shows it started once; no line of the server log reports a process
      terminated by a signal, a memory-context error or a WAL read error; the log holds exactly
      the source's committed transactions on the published tables, in commit order with their
      commit LSNs (test_decoding truth slot); the applier applies the log and every published
      table on the target equals the source's.
  long_varied_workload_with_live_flow_and_applier
      the standing check: the same mix, longer and with the daemon applier running the whole
      time; zero relay restarts, zero server restarts, and the target equals the source.

The first scenario guards against a relay crash (signal 11 / "could not find block containing
chunk") when the reader allocates its buffers in the context a replay left current, which the end
of the relay's pass transaction frees.

TRELLARA_MIX_ROUNDS / TRELLARA_MIX_SEED change the length and the seed. It must never signal a
process it did not start and never leave a cluster running.
"""

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sql_mix  # noqa: E402
from capture_support import (CaptureFailure, TRELLARA_BIN, assert_no_backend_crashes, compare,  # noqa: E402
                             log_records, log_transactions, run_scenarios, scenario, truth_transactions,
                             worker_pid)
from flow_pair import FlowPair  # noqa: E402
from harness import PG_BIN  # noqa: E402

SEED = os.environ.get("TRELLARA_MIX_SEED", "34")
ROUNDS = int(os.environ.get("TRELLARA_MIX_ROUNDS", "24"))
SETTINGS = {"max_wal_size": "'2GB'", "wal_level": "logical"}
BAD_LOG_LINES = ("terminated by signal", "was terminated by exception", "could not find block containing chunk",
                 "cannot free a copied snapshot", "unrecognized SI message", "invalid block_id",
                 "terminating any other active server processes", "all server processes terminated")


def server_log_problems(cluster):
    return [line for line in cluster.server_log().splitlines() if any(bad in line for bad in BAD_LOG_LINES)]


def relay_starts(cluster, flow="app"):
    return sum(1 for line in cluster.server_log().splitlines()
               if f'trellara relay of flow "{flow}" started:' in line)


class MixPair(FlowPair):
    """The sql_mix tables on both servers and a flow over their schema; the source also gets the
    test_decoding truth slot, made between the publication and the flow (truth=True) so both slots
    see the same transactions. `relay_pid`: the relay worker the flow started with."""

    def __init__(self, name):
        super().__init__(name, sql_mix.setup_sql(), publication="CREATE PUBLICATION pub FOR TABLES IN SCHEMA vw",
                         source_settings=SETTINGS, shared_work_dir=True, truth=True)
        self.relay_pid = None

    def ready(self):
        self.relay_pid = worker_pid(self.source, self.flow)


def run_mix(source, rounds, sessions=3, first_session=1, published_ddl=False):
    psql = [os.path.join(PG_BIN, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", "-"]
    started = time.monotonic()
    try:
        sql_mix.run_sessions(psql, source.env(), SEED, sessions, rounds, first_session, published_ddl)
    except RuntimeError as failure:
        problems = server_log_problems(source)
        if problems:
            raise CaptureFailure(f"the workload's sessions lost the server: {len(problems)} crash or corruption "
                                 f"line(s) in its log: {problems[:5]}") from failure
        raise
    print(f"sql mix: {sessions} sessions x {rounds} rounds (seed {SEED}) in {time.monotonic() - started:.1f}s")


def check_relay_survived(source, pid):
    problems = server_log_problems(source)
    if problems:
        raise CaptureFailure(f"the server log reports {len(problems)} crash or corruption line(s): {problems[:5]}")
    assert_no_backend_crashes(source)
    now = worker_pid(source)
    starts = relay_starts(source)
    if now != pid or starts != 1:
        raise CaptureFailure(f"the relay restarted: PID {pid} at start, {now} now; started {starts} times")
    print(f"relay: one worker (PID {pid}) the whole time, no crash or corruption line in the server log")


@scenario(invariants=["the relay never dies by a signal and never restarts under varied WAL record sizes",
                      "the server never restarts its backends",
                      "the log holds exactly the source's committed transactions, in commit order",
                      "the target equals the source after apply"])
def varied_wal_records_never_crash_the_relay():
    with MixPair("mix") as pair:
        source, pid = pair.source, pair.relay_pid
        run_mix(source, ROUNDS)
        pair.wait_log_covers_source(timeout_s=300, fail_on_error=True)
        check_relay_survived(source, pid)
        truth = truth_transactions(source, f"{sql_mix.SCHEMA}.")
        logged, stats = log_transactions(log_records(pair.log_dir))
        compare(truth, logged, "varied WAL")
        pair.apply(timeout_s=900)
        pair.assert_same_data(sql_mix.published_tables(), "varied WAL")
        check_relay_survived(source, pid)


@scenario(invariants=["a long varied SQL workload with a live flow and a running applier: zero relay restarts",
                      "zero server restarts", "the target equals the source"])
def long_varied_workload_with_live_flow_and_applier():
    with MixPair("mixl") as pair:
        source, pid = pair.source, pair.relay_pid
        applier = subprocess.Popen([TRELLARA_BIN, "apply", "--config", pair.config], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True)
        try:
            for part in range(2):
                run_mix(source, ROUNDS, sessions=3, first_session=1 + 3 * part, published_ddl=True)
                if applier.poll() is not None:
                    raise CaptureFailure(f"the daemon applier exited {applier.returncode}: {applier.stderr.read()[-1500:]}")
        finally:
            applier.terminate()
            _, err = applier.communicate(timeout=120)
        if applier.returncode not in (0, -15):
            raise CaptureFailure(f"the daemon applier ended with {applier.returncode}: {err[-1500:]}")
        pair.wait_log_covers_source(timeout_s=300, fail_on_error=True)
        pair.apply(timeout_s=900)
        pair.assert_same_data(sql_mix.published_tables(), "long varied workload")
        check_relay_survived(source, pid)


if __name__ == "__main__":
    run_scenarios([varied_wal_records_never_crash_the_relay, long_varied_workload_with_live_flow_and_applier])
