#!/usr/bin/env python3
"""Integration: the plugin works with the standard tools, and a failing relay reports, backs off and
recovers without losing a transaction.

1. pg_recvlogical --plugin=trellara -o publication=p receives exactly the records that
   pg_logical_slot_peek_binary_changes returns from a twin slot created at the same moment (byte for
   byte; pg_recvlogical ends each message with a newline), and an unknown option is an error naming it.
2. The flow's log directory is made unreadable to the postgres OS user and the relay is restarted:
   every start fails; status() shows the error (naming the directory) and consecutive_failures grows
   while the launcher backs off. Once the directory is readable again the relay runs, and the log
   holds every transaction exactly once (compared with a test_decoding truth slot). (This relay
   fails before it acquires the slot, so "the slot did not move" would prove nothing here: scenario
   3 checks it where it can fail.)
3. relay_failing_after_decoding_does_not_advance_the_slot: the server runs with
   TRELLARA_FAULTS=relay.before_log_append:1:error, so every relay start acquires the slot, decodes
   the first published transaction and fails before appending it (each start logs "started: slot"
   after acquiring the slot; last_error names the fault point). Transactions committed meanwhile
   must stay in the slot: confirmed_flush_lsn never passes the position before the first of them.
   A relay that confirmed what it decoded rather than what it made durable fails this check. After a
   restart without the fault the log holds every transaction exactly once.
4. negative_control_a_relay_confirming_what_it_decoded_is_caught: the same fault with the paired
   defect defect.relay_confirm_decoded (the relay confirms the transaction it failed to append,
   server started with trellara.enable_test_defects = on): the slot moves past the transaction,
   which is exactly what scenario 3's check fails on; the restarted relay's own restart rule then
   refuses the hole (error state naming the missing range).
It must never leave a cluster running (the harness stops it by PID) nor the directory unreadable.
"""

import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import (CaptureFailure, compare, log_records, log_transactions, lsn_to_int,  # noqa: E402
                             record_fault_fired, run_scenarios, scenario, truth_transactions,
                             wait_caught_up, wait_for, worker_pid)
from flow_pair import FlowPair  # noqa: E402
from harness import PG_BIN  # noqa: E402

ACCT_DDL = "CREATE TABLE acct(id int PRIMARY KEY, n int)"


class CapturePair(FlowPair):
    """A source (no target) with table acct and a flow on it, plus the test_decoding truth slot
    the scenarios compare the log with, created with the flow (no write to acct between the slots).
    With create_flow=False the scenario creates table and flow later (start_flow())."""

    def __init__(self, name, create_flow=True, source_settings=None, source_env=None):
        super().__init__(name, source_sql=ACCT_DDL if create_flow else "", tables=("acct",), with_target=False,
                         create_flow=create_flow, source_settings=source_settings, source_env=source_env,
                         truth=True)


def pg_recvlogical_receives_the_same_records_as_the_sql_interface(cluster):
    env = cluster.env()
    cluster.query("CREATE TABLE tools(id int PRIMARY KEY, v text); CREATE PUBLICATION tools_pub FOR TABLE tools")
    recv = [os.path.join(PG_BIN, "pg_recvlogical"), "-d", "postgres", "--slot", "recv"]
    subprocess.run(recv + ["--create-slot", "--plugin", "trellara"], env=env, check=True, capture_output=True)
    cluster.query("SELECT 1 FROM pg_copy_logical_replication_slot('recv', 'twin')")
    cluster.query("INSERT INTO tools VALUES (1, 'a'), (2, 'b'); UPDATE tools SET v = 'c' WHERE id = 1; "
                  "DELETE FROM tools WHERE id = 2")
    end = cluster.query("SELECT pg_current_wal_lsn()")
    out = os.path.join(cluster.base_dir, "recv.out") if hasattr(cluster, "base_dir") else "/tmp/trellara-recv.out"
    result = subprocess.run(recv + ["--start", "-o", "publication=tools_pub", "-E", end, "-f", out, "--no-loop"],
                            env=env, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise CaptureFailure(f"pg_recvlogical failed (exit {result.returncode}): {result.stderr.strip()}")
    with open(out, "rb") as f:
        received = f.read()
    os.remove(out)
    hexes = cluster.query("SELECT encode(data, 'hex') FROM pg_logical_slot_peek_binary_changes('twin', NULL, NULL, "
                          "'publication', 'tools_pub')").split()
    expected = b"".join(bytes.fromhex(h) + b"\n" for h in hexes)
    print(f"pg_recvlogical: {len(received)} bytes; SQL interface: {len(hexes)} records, {len(expected)} bytes")
    if len(hexes) != 3 or received != expected:
        raise CaptureFailure(f"pg_recvlogical received {len(received)} bytes, the SQL interface "
                             f"{len(expected)} bytes in {len(hexes)} records: they differ")
    bad = subprocess.run(recv + ["--start", "-o", "publication=tools_pub", "-o", "bogus=1", "-E", end, "-f", "-",
                                 "--no-loop"], env=env, capture_output=True, text=True, timeout=60)
    if bad.returncode == 0 or 'unrecognized trellara output plugin option "bogus"' not in bad.stderr:
        raise CaptureFailure(f"an unknown option was not refused by name: exit {bad.returncode}, {bad.stderr!r}")
    cluster.query("SELECT pg_drop_replication_slot('recv'); SELECT pg_drop_replication_slot('twin')")
    print("ok: pg_recvlogical_receives_the_same_records_as_the_sql_interface")


def failing_relay_reports_backs_off_and_recovers_without_loss(pair):
    cluster = pair.source
    cluster.query(ACCT_DDL)
    log_dir = pair.start_flow()
    cluster.query("INSERT INTO acct SELECT g, 0 FROM generate_series(1, 10) g")
    os.chmod(log_dir, 0o000)
    try:
        os.kill(int(worker_pid(cluster)), signal.SIGTERM)  # a clean stop; the launcher starts it again
        for i in range(20):
            cluster.query(f"UPDATE acct SET n = n + 1 WHERE id = {i % 10 + 1}")
        failures = wait_for("consecutive_failures to reach 3 while the log is unreadable",
                            lambda: int(cluster.query("SELECT coalesce(consecutive_failures, 0) FROM "
                                                      "trellara.status()") or 0) >= 3 and
                            cluster.query("SELECT consecutive_failures FROM trellara.status()"), 30)
        status = cluster.query("SELECT state, slot_active, last_error FROM trellara.status()")
        print(f"while failing: consecutive_failures {failures}; status {status}")
        if log_dir not in status:
            raise CaptureFailure(f"last_error does not name the log directory {log_dir}: {status}")
        check = cluster.query("SELECT severity, detail FROM trellara.check('app') WHERE \"check\" = 'slot'")
        print(f"check(): {check}")
        if not check.startswith("critical|"):
            raise CaptureFailure(f"check() does not report the failing relay as critical: {check}")
    finally:
        os.chmod(log_dir, 0o700)
    wait_for("the relay to run again", lambda: cluster.query("SELECT state FROM trellara.status()") == "running", 90)
    truth = truth_transactions(cluster, "public.acct")
    wait_caught_up(cluster, truth[-1][1])
    logged, chunks = log_transactions(log_records(log_dir))
    compare(truth, logged, "failing relay")
    print("ok: failing_relay_reports_backs_off_and_recovers_without_loss")


FAULT_BEFORE_APPEND = "relay.before_log_append:1:error"
DEFECT_CONFIRM_DECODED = "defect.relay_confirm_decoded:1:defect"


@scenario(seed_rows=("relay_before_broker_publish",), suite="capture", fault_points=("relay.before_log_append",),
          invariants=("the slot is never confirmed to or past a transaction the log does not hold",
                      "after the fault is gone the log holds every transaction exactly once"))
def relay_failing_after_decoding_does_not_advance_the_slot():
    # The server starts with the fault in its environment: every relay process (forked from the
    # postmaster, fault counters from zero) fails at its first append. Only the server has it; the
    # restart in _relay_failing_after_decoding does not.
    with CapturePair("capture-write-fails", source_env={"TRELLARA_FAULTS": FAULT_BEFORE_APPEND}) as pair:
        _relay_failing_after_decoding(pair)
    print("ok: relay_failing_after_decoding_does_not_advance_the_slot")


@scenario(suite="capture", defect="relay_confirm_decoded", pairs_with="relay_failing_after_decoding_does_not_advance_the_slot",
          fault_points=("defect.relay_confirm_decoded",),
          invariants=("scenario 3's slot check fails when the relay confirms what it decoded",
                      "the relay's restart rule then refuses the hole (error state naming the missing range)"))
def negative_control_a_relay_confirming_what_it_decoded_is_caught():
    with CapturePair("capture-confirm-decoded", source_settings={"trellara.enable_test_defects": "on"},
                     source_env={"TRELLARA_FAULTS": FAULT_BEFORE_APPEND + "," + DEFECT_CONFIRM_DECODED}) as pair:
        cluster = pair.source
        cluster.query("INSERT INTO acct SELECT g, 0 FROM generate_series(1, 10) g")
        after_first = cluster.query("SELECT pg_current_wal_insert_lsn()")

        def slot_check_fails():
            confirmed = cluster.query("SELECT confirmed_flush_lsn FROM pg_replication_slots "
                                      "WHERE slot_name = 'trellara_app'")
            return lsn_to_int(confirmed) >= lsn_to_int(after_first) and confirmed
        confirmed = wait_for("the slot to be confirmed past the transaction the relay failed to append (the "
                             "defect; scenario 3's check fails exactly on this)", slot_check_fails, 90)
        record_fault_fired("defect.relay_confirm_decoded")
        print(f"caught: with the defect the slot moved to {confirmed}, past {after_first}, while the log holds "
              "no record of the transaction")
        # Defence in depth: the relay's restart rule sees the hole between its log and the slot.
        refused = wait_for("the restarted relay to refuse the hole the defect left",
                           lambda: "are missing" in (cluster.query("SELECT coalesce(last_error, '') FROM "
                                                                   "trellara.status()") or "") and
                           cluster.query("SELECT last_error FROM trellara.status()"), 90)
        print(f"and the relay refuses to continue: {refused[:200]}")


def _relay_failing_after_decoding(pair):
    cluster, log_dir = pair.source, pair.log_dir
    starts_before = cluster.server_log().count('trellara relay of flow "app" started: slot')
    before_first = cluster.query("SELECT pg_current_wal_lsn()")
    cluster.query("INSERT INTO acct SELECT g, 0 FROM generate_series(1, 10) g")
    # The end of the first failing transaction's commit record is at or below this position. The
    # slot may move up to the commit (a progress marker can cover WAL the transaction had written
    # before it committed), never to or past its end: that would confirm a transaction the log
    # does not hold.
    after_first = cluster.query("SELECT pg_current_wal_insert_lsn()")
    for i in range(20):
        cluster.query(f"UPDATE acct SET n = n + 1 WHERE id = {i % 10 + 1}")

    def attempts():
        started = cluster.server_log().count('trellara relay of flow "app" started: slot') - starts_before
        failures = int(cluster.query("SELECT coalesce(consecutive_failures, 0) FROM trellara.status()") or 0)
        return started >= 3 and failures >= 3
    wait_for("3 relay starts that acquired the slot and then failed to append", attempts, 90)
    status = cluster.query("SELECT state, consecutive_failures, last_error FROM trellara.status()")
    print(f"while appends fail: {status}")
    if "relay.before_log_append" not in status:
        raise CaptureFailure(f"the relay did not fail at the append it was made to fail at: {status}")
    record_fault_fired("relay.before_log_append", int(status.split("|")[1]))
    # Progress markers (idle-flow WAL release) do not go through the failing append; records of
    # transactions must not be there.
    written = [r for r in log_records(log_dir) if r["type"] in ("envelope", "chunk", "manifest", "commit_marker")]
    if written:
        raise CaptureFailure(f"the log holds transaction records although every append failed: {written[:3]}")
    confirmed = cluster.query("SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'trellara_app'")
    print(f"slot confirmed_flush_lsn {confirmed}; the first failing transaction wrote WAL from {before_first} "
          f"and its commit ends at or below {after_first}")
    if lsn_to_int(confirmed) >= lsn_to_int(after_first):
        raise CaptureFailure(f"the slot moved to {confirmed}, to or past the end of the first failing transaction "
                             f"({before_first}..{after_first}), while the relay could not append it")
    # Restarted without the fault, the relay catches up, and nothing was lost.
    cluster.restart_immediate()
    wait_for("the relay to run again", lambda: cluster.query("SELECT state FROM trellara.status()") == "running", 90)
    truth = truth_transactions(cluster, "public.acct")
    if len(truth) != 21:
        raise CaptureFailure(f"the truth slot holds {len(truth)} transactions on public.acct, expected 21")
    wait_caught_up(cluster, truth[-1][1])
    logged, chunks = log_transactions(log_records(log_dir))
    compare(truth, logged, "relay failing after decoding")
    pair.check_no_crashes()


@scenario(suite="capture", invariants=("pg_recvlogical receives the SQL interface's records byte for byte",
                                        "a failing relay reports, backs off and recovers without loss"))
def standard_tools_and_a_failing_relay():
    # The flow comes after pg_recvlogical's part: failing_relay_... creates it (create_flow=False).
    with CapturePair("capture-tools", create_flow=False) as pair:
        pg_recvlogical_receives_the_same_records_as_the_sql_interface(pair.source)
        failing_relay_reports_backs_off_and_recovers_without_loss(pair)
        pair.check_no_crashes()


SCENARIOS = [standard_tools_and_a_failing_relay, relay_failing_after_decoding_does_not_advance_the_slot,
             negative_control_a_relay_confirming_what_it_decoded_is_caught]

if __name__ == "__main__":
    run_scenarios(SCENARIOS)
