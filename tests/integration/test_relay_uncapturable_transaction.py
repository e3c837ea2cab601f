#!/usr/bin/env python3
"""Integration: a transaction the relay cannot capture puts the flow in the error state instead of
a restart loop.

trellara.record_bytes_max is lowered to 1 MB (a setting, reloaded), then a row with a 2 MiB value
is committed: its record is above the limit. Asserted:
  - status() shows state 'error' with last_error naming the transaction (xid, commit LSN) and the
    relation; check() has a critical relay_error row with a remedy (start_flow);
  - no restart loop: the relay's start count (server log lines "... started:") and
    consecutive_failures do not change while we watch longer than several backoff periods, no
    relay process holds the flow, and the slot is not confirmed past the transaction;
  - the remedy works: reset the setting, reload, start_flow -> the transaction is in the log.
It must never leave a cluster running.
"""

import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import CaptureFailure, log_records, wait_for, worker_pid  # noqa: E402
from flow_pair import FlowPair  # noqa: E402

# Longer than the first three restart backoffs (1 s, 2 s, 4 s): a loop would start the relay again.
WATCH_S = 8


def relay_starts(cluster):
    return cluster.server_log().count('trellara relay of flow "app" started')


def uncapturable_transaction_halts_the_flow_without_restart_loop():
    with FlowPair("relay-uncapturable", "CREATE TABLE t (id int PRIMARY KEY, v text)", tables=("t",),
                  with_target=False) as pair:
        cluster, log_dir = pair.source, pair.log_dir
        cluster.query("ALTER SYSTEM SET trellara.record_bytes_max = '1MB'; SELECT pg_reload_conf()")
        # New decoding sessions read the setting: restart the relay so it runs with it.
        cluster.query("SELECT trellara.stop_flow('app'); SELECT trellara.start_flow('app')")
        wait_for("relay to run again", lambda: worker_pid(cluster), 60)
        cluster.query("INSERT INTO t VALUES (1, 'small')")
        out = cluster.query("BEGIN; SELECT pg_current_xact_id(); "
                            "INSERT INTO t SELECT 2, string_agg(md5(g::text), '') FROM generate_series(1, 65536) g; "
                            "COMMIT; SELECT pg_current_wal_lsn()")
        xid = int([line for line in out.splitlines() if line.strip()][0])

        def in_error():
            row = cluster.query("SELECT state FROM trellara.status() WHERE flow = 'app'")
            return row == "error"
        wait_for("the flow to enter the error state", in_error, 60)
        error = cluster.query("SELECT last_error FROM trellara.status() WHERE flow = 'app'")
        print(f"last_error: {error}")
        for needed in (f"transaction {xid} (commit LSN ", "relation public.t", "cannot be captured",
                       "start_flow('app')"):
            if needed not in error:
                raise CaptureFailure(f"last_error does not name {needed!r}: {error}")
        if not re.search(r"commit LSN [0-9A-F]+/[0-9A-F]+", error):
            raise CaptureFailure(f"last_error does not carry the commit LSN: {error}")
        check = cluster.query("SELECT severity || '|' || detail || '|' || remedy FROM trellara.check('app') "
                              "WHERE \"check\" = 'relay_error'")
        print(f"check(): {check}")
        if not check.startswith("critical|") or f"transaction {xid}" not in check or "start_flow" not in check:
            raise CaptureFailure(f"check() has no critical relay_error row naming the transaction: {check!r}")

        starts = relay_starts(cluster)
        failures = cluster.query("SELECT consecutive_failures FROM trellara.status() WHERE flow = 'app'")
        confirmed = cluster.query("SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'trellara_app'")
        time.sleep(WATCH_S)  # a negative observation: nothing may happen during this time
        starts_after = relay_starts(cluster)
        failures_after = cluster.query("SELECT consecutive_failures FROM trellara.status() WHERE flow = 'app'")
        state = cluster.query("SELECT state || ' ' || coalesce(worker_pid::text, 'none') FROM trellara.status()")
        confirmed_after = cluster.query("SELECT confirmed_flush_lsn FROM pg_replication_slots "
                                        "WHERE slot_name = 'trellara_app'")
        print(f"relay starts {starts} -> {starts_after}; consecutive_failures {failures} -> {failures_after}; "
              f"state {state}; slot confirmed {confirmed} -> {confirmed_after}")
        if starts_after != starts or failures_after != failures or state != "error none":
            raise CaptureFailure("the relay restarted while the flow was in the error state")
        if confirmed_after != confirmed:
            raise CaptureFailure(f"the slot moved while in the error state: {confirmed} -> {confirmed_after}")
        if any(r["xid"] == xid for r in log_records(log_dir) if r["type"] in ("envelope", "commit_marker")):
            raise CaptureFailure(f"transaction {xid} is in the log although it was refused")

        # The remedy: lift the limit, start the flow: the transaction is captured.
        cluster.query("ALTER SYSTEM RESET trellara.record_bytes_max; SELECT pg_reload_conf()")
        cluster.query("SELECT trellara.start_flow('app')")

        def captured():
            return any(r["xid"] == xid for r in log_records(log_dir) if r["type"] in ("envelope", "commit_marker"))
        wait_for(f"transaction {xid} in the log after start_flow", captured, 120)
        state = cluster.query("SELECT state FROM trellara.status() WHERE flow = 'app'")
        if state != "running":
            raise CaptureFailure(f"after the remedy the flow is {state!r}, expected running")
        print(f"after start_flow: transaction {xid} captured, flow running")
        pair.check_no_crashes()
    print("OK uncapturable_transaction_halts_the_flow_without_restart_loop")


if __name__ == "__main__":
    uncapturable_transaction_halts_the_flow_without_restart_loop()
