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

Before the fix of issue 34 the first scenario crashed the relay (signal 11 / "could not find
block containing chunk"): the reader allocated its buffers in the context a replay left current,
which the end of the relay's pass transaction freed.

TRELLARA_MIX_ROUNDS / TRELLARA_MIX_SEED change the length and the seed. It must never signal a
process it did not start and never leave a cluster running.
"""

import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sql_mix  # noqa: E402
from capture_support import (CaptureFailure, TRELLARA_BIN, TRUTH_SLOT, assert_no_backend_crashes,  # noqa: E402
                             compare, log_records, log_transactions, lsn_to_int, run_scenarios, scenario,
                             truth_transactions, wait_for, worker_pid, write_flow_config)
from harness import Cluster, PG_BIN  # noqa: E402

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


def digests(cluster, tables):
    out = {}
    for table in tables:
        out[table] = cluster.query(f"SELECT count(*) || ' ' || coalesce(md5(string_agg(t::text, '|' ORDER BY t.id)), '-') "
                                   f"FROM {table} t")
    return out


def make_pair(source, target, work, publication_sql):
    source.psql(sql_mix.setup_sql())
    target.psql(sql_mix.setup_sql())
    source.query("CREATE EXTENSION trellara")
    source.query(publication_sql)
    source.query(f"SELECT 1 FROM pg_create_logical_replication_slot('{TRUTH_SLOT}', 'test_decoding')")
    source.query("SELECT trellara.create_flow('app', 'pub')")
    log_dir = source.query("SELECT log_directory FROM trellara.flows WHERE name = 'app'")
    pid = wait_for("the relay worker to run", lambda: worker_pid(source), 60)
    config = os.path.join(work, "flow.toml")
    write_flow_config(config, "app", log_dir, target.conninfo(), source.conninfo())
    return log_dir, config, pid


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


def wait_log_covers_source(source, timeout_s=300):
    lsn = lsn_to_int(source.query("SELECT pg_current_wal_lsn()"))

    def covered():
        row = source.query("SELECT coalesce(log_durable_lsn::text, '0/0') || ' ' || state FROM trellara.status() "
                           "WHERE flow = 'app'")
        durable, state = row.split(" ", 1)
        if state == "error":
            raise CaptureFailure(f"the flow went to the error state: {source.query('SELECT last_error FROM trellara.status()')}")
        return lsn_to_int(durable) >= lsn
    wait_for("the log to cover the source's WAL", covered, timeout_s, interval_s=0.5)


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


def apply_until_caught_up(config):
    result = subprocess.run([TRELLARA_BIN, "apply", "--config", config, "--until-caught-up"], capture_output=True,
                            text=True, timeout=900)
    if result.returncode != 0:
        raise CaptureFailure(f"trellara apply exited {result.returncode}: {result.stdout[-1500:]} {result.stderr[-1500:]}")
    return result


def check_target_equals_source(source, target):
    tables = sql_mix.published_tables()
    src, dst = digests(source, tables), digests(target, tables)
    differ = [t for t in tables if src[t] != dst[t]]
    if differ:
        raise CaptureFailure(f"target differs from source in {differ}: source {[src[t] for t in differ]}, "
                             f"target {[dst[t] for t in differ]}")
    print("target equals source: " + ", ".join(f"{t} {src[t].split()[0]} rows" for t in tables))


@scenario(invariants=["the relay never dies by a signal and never restarts under varied WAL record sizes",
                      "the server never restarts its backends",
                      "the log holds exactly the source's committed transactions, in commit order",
                      "the target equals the source after apply"])
def varied_wal_records_never_crash_the_relay():
    with Cluster("mix-src", settings=SETTINGS) as source, Cluster("mix-dst", preload=False) as target, \
            tempfile.TemporaryDirectory(prefix="trellara-mix-") as work:
        os.chmod(work, 0o755)
        log_dir, config, pid = make_pair(source, target, work, "CREATE PUBLICATION pub FOR TABLES IN SCHEMA vw")
        run_mix(source, ROUNDS)
        wait_log_covers_source(source)
        check_relay_survived(source, pid)
        truth = truth_transactions(source, f"{sql_mix.SCHEMA}.")
        logged, stats = log_transactions(log_records(log_dir))
        compare(truth, logged, "varied WAL")
        apply_until_caught_up(config)
        check_target_equals_source(source, target)
        check_relay_survived(source, pid)


@scenario(invariants=["a long varied SQL workload with a live flow and a running applier: zero relay restarts",
                      "zero server restarts", "the target equals the source"])
def long_varied_workload_with_live_flow_and_applier():
    with Cluster("mixl-src", settings=SETTINGS) as source, Cluster("mixl-dst", preload=False) as target, \
            tempfile.TemporaryDirectory(prefix="trellara-mixl-") as work:
        os.chmod(work, 0o755)
        _, config, pid = make_pair(source, target, work, "CREATE PUBLICATION pub FOR TABLES IN SCHEMA vw")
        applier = subprocess.Popen([TRELLARA_BIN, "apply", "--config", config], stdout=subprocess.DEVNULL,
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
        wait_log_covers_source(source)
        apply_until_caught_up(config)
        check_target_equals_source(source, target)
        check_relay_survived(source, pid)


if __name__ == "__main__":
    run_scenarios([varied_wal_records_never_crash_the_relay, long_varied_workload_with_live_flow_and_applier])
