#!/usr/bin/env python3
"""Integration: large transactions are streamed while in progress, spilled by the relay until their
commit, discarded exactly on abort, and applied exactly once across relay kills (docs/relay.md
"Large transactions").

Every scenario starts a source cluster (trellara preloaded; `trellara.relay_decoding_work_mem =
64kB`, so PostgreSQL streams any transaction past a few hundred rows to the relay) with a flow on
table `big`, and a target cluster with the same table. The relay's spill files are
`<log_directory>/spill/xid-<top xid>.spill` (frames: u32 length, u32 xid, u32 crc32c, bytes); the
scenarios read them to see what the relay holds and the log (`trellara log records`) to see what
it wrote.

  streamed_transaction_spills_until_commit
      an open transaction of 50 000 inserts: its changes are in its spill file and nothing of it
      is in the log; after COMMIT the log holds it as chunks + manifest + commit marker with 50 000
      changes, the spill file is gone, and the target equals the source after `trellara apply`.
  negative_control_stream_log_before_commit_is_caught
      the same open transaction with defect.stream_log_before_commit (the relay also logs each
      streamed change as it arrives): the "nothing of it in the log" check must fail.
  stream_abort_discards_top_transaction
      the same open transaction rolled back after it was streamed: its spill file is removed and
      no record of its xid ever reaches the log.
  stream_abort_discards_exactly_the_rolled_back_subtransactions
      rows in the top transaction, a savepoint with 30 000 rows streamed and then rolled back, more
      rows, a savepoint holding ALTER TABLE ADD COLUMN and rows using it, streamed and rolled back,
      then COMMIT: the target has exactly the kept rows and no added column.
  negative_control_subxact_abort_kept_is_caught
      the previous scenario with defect.stream_subxact_abort_kept (the relay ignores a
      subtransaction's stream abort): its check must fail.
  relay_kill9_while_streaming_applies_once
  relay_kill9_at_stream_commit_applies_once
      a committed 100 000-row transaction decoded by a relay that is held (fault stall) right after
      its first spill write, or right after appending the first record of the transaction at its
      stream commit, and killed there with SIGKILL: after the restart the spill directory holds no
      leftover, the log holds the transaction once, and the target equals the source.
  concurrent_streamed_transactions_land_in_commit_order
      eight sessions each insert 20 000 rows in one transaction, interleaved; two roll back, two
      roll a savepoint back; they commit in an order the test chooses: the log's transactions are
      exactly the committed ones, in commit order, with their row counts; the target equals the
      source.
  uncapturable_streamed_transaction_puts_the_flow_in_error_state
      trellara.record_bytes_max = 1MB and a streamed transaction holding a 2 MiB value: the relay's
      assembly at stream commit refuses the record and the flow enters the error state naming the
      transaction (no restart loop, no backend crash, never complete in the log — the chunks before
      the refused record may be there, as for a transaction decoded at commit).

It must never signal a process it did not start except the relay worker it identifies by PID and
/proc command line, and never leave a cluster running.
"""

import os
import signal
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import (CaptureFailure, PsqlSession, TRELLARA_BIN, assert_no_backend_crashes,  # noqa: E402
                             log_records, log_transactions, record_fault_fired, run_scenarios, scenario,
                             wait_for, worker_pid)
import flow_pair  # noqa: E402

SOURCE_SETTINGS = {"trellara.relay_decoding_work_mem": "'64kB'", "max_wal_size": "'2GB'"}
TABLE_DDL = "CREATE TABLE big (id int PRIMARY KEY, tag text NOT NULL, v text)"
APPLY_TIMEOUT_S = 300
STALL_MS = 5000


class StreamPair(flow_pair.FlowPair):
    """A source with a flow on table big and a target with the same table; stops both by PID.
    `faults` goes into the source server's environment (TRELLARA_FAULTS), with the defect switch
    when it names a defect."""

    def __init__(self, name, faults=None):
        settings = dict(SOURCE_SETTINGS)
        if faults and "defect." in faults:
            settings["trellara.enable_test_defects"] = "on"
        source_env = {"TRELLARA_FAULTS": faults, "TRELLARA_FAULT_STALL_MS": str(STALL_MS)} if faults else {}
        super().__init__(name, source_sql=TABLE_DDL, publication="CREATE PUBLICATION pub FOR TABLE big",
                         source_settings=settings, source_env=source_env, shared_work_dir=True)
        self.faults = faults

    def ready(self):
        self.spill_dir = os.path.join(self.log_dir, "spill")

    def spill_file(self, xid):
        return os.path.join(self.spill_dir, f"xid-{xid}.spill")

    def spill_files(self):
        if not os.path.isdir(self.spill_dir):
            return []
        return sorted(name for name in os.listdir(self.spill_dir) if name.endswith(".spill"))


def spill_frame_xids(path):
    """The xid of every whole frame of a spill file (a frame being written may be cut short)."""
    xids = []
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return xids
    at = 0
    while at + 12 <= len(data):
        length, xid, _crc = struct.unpack_from("<III", data, at)
        if at + 12 + length > len(data):
            break
        xids.append(xid)
        at += 12 + length
    return xids


def wait_log_covers_source(source, timeout_s=180):
    """flow_pair's wait for flow app with this script's ceiling, failing at once on the error state
    (no scenario that waits here expects the relay to fail). test_apply_early imports it."""
    return flow_pair.wait_log_covers_source(source, "app", timeout_s, fail_on_error=True)


def apply_until_caught_up(pair):
    result = subprocess.run([TRELLARA_BIN, "apply", "--config", pair.config, "--until-caught-up"],
                            capture_output=True, text=True, timeout=APPLY_TIMEOUT_S)
    if result.returncode != 0:
        raise CaptureFailure(f"trellara apply exited {result.returncode}\nstdout: {result.stdout[-2000:]}\n"
                             f"stderr: {result.stderr[-2000:]}")
    return result


def table_state(cluster):
    columns = cluster.query("SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute "
                            "WHERE attrelid = 'big'::regclass AND attnum > 0 AND NOT attisdropped")
    rows = cluster.query("SELECT count(*) || ' ' || coalesce(md5(string_agg(id || ':' || tag || ':' || "
                         "coalesce(v, ''), ',' ORDER BY id)), '-') FROM big")
    return f"columns {columns}; rows {rows}"


def check_target_equals_source(pair, label):
    want, have = table_state(pair.source), table_state(pair.target)
    if want != have:
        raise CaptureFailure(f"{label}: target differs from source\n  source: {want}\n  target: {have}")
    print(f"{label}: target equals source ({want})")


def records_of(log_dir, xid):
    return [r for r in log_records(log_dir) if r.get("xid") == xid and r["type"] not in ("progress", "test")]


def check_logged_once(pair, xid, changes):
    records = records_of(pair.log_dir, xid)
    kinds = [r["type"] for r in records]
    if not kinds or kinds[-1] != "commit_marker" or "manifest" not in kinds:
        raise CaptureFailure(f"xid {xid}: the log holds {kinds[:3]}...{kinds[-3:]} ({len(kinds)} records), not "
                             f"chunks + manifest + commit marker")
    completed, stats = log_transactions(log_records(pair.log_dir))   # raises on a transaction logged twice
    if sum(1 for x, _ in completed if x == xid) != 1:
        raise CaptureFailure(f"xid {xid} is not completed exactly once in the log: {completed}")
    marker = records[-1]
    total = marker.get("total_changes")
    if total != changes:
        raise CaptureFailure(f"xid {xid}: commit marker says {total} changes, the transaction made {changes}: {marker}")
    print(f"xid {xid}: logged once as {kinds.count('chunk')} chunks + manifest + commit marker, {total} changes "
          f"({stats['reemitted_chunks']} chunk(s) re-emitted)")


def open_streamed_transaction(pair, rows):
    """A session with an open transaction of `rows` inserts, streamed and spilled by the relay."""
    session = PsqlSession(pair.source)
    session.query("BEGIN")
    xid = int(session.query("SELECT pg_current_xact_id()"))
    session.query(f"INSERT INTO big SELECT g, 'open', repeat('x', 40) FROM generate_series(1, {rows}) g",
                  timeout_s=120)
    wait_for(f"the relay to spill most of xid {xid}'s {rows} changes",
             lambda: len(spill_frame_xids(pair.spill_file(xid))) >= rows * 8 // 10, 120, interval_s=0.2)
    return session, xid


def check_open_transaction_not_logged(pair, xid):
    early = records_of(pair.log_dir, xid)
    if early:
        raise CaptureFailure(f"open transaction {xid} already has {len(early)} record(s) in the log: "
                             f"{[r['type'] for r in early[:5]]}")


@scenario(seed_rows=("pgoutput_streamed_transaction_spills_until_commit",), suite="large_transactions",
          invariants=("no record of an open streamed transaction in the log", "its changes are in its spill file",
                      "after commit: chunks + manifest + commit marker with every change, spill file removed",
                      "target equals source"))
def streamed_transaction_spills_until_commit():
    with StreamPair("stream-spill") as pair:
        session, xid = open_streamed_transaction(pair, 50_000)
        try:
            spilled = len(spill_frame_xids(pair.spill_file(xid)))
            check_open_transaction_not_logged(pair, xid)
            print(f"open xid {xid}: {spilled} frames in {pair.spill_file(xid)}, nothing in the log")
            session.query("COMMIT")
        finally:
            session.close()
        wait_log_covers_source(pair.source)
        check_logged_once(pair, xid, 50_000)
        if pair.spill_files():
            raise CaptureFailure(f"spill files left after the commit was logged: {pair.spill_files()}")
        apply_until_caught_up(pair)
        check_target_equals_source(pair, "spills until commit")
        assert_no_backend_crashes(pair.source, pair.target)


@scenario(suite="large_transactions", defect="stream_log_before_commit",
          fault_points=("defect.stream_log_before_commit",), pairs_with="streamed_transaction_spills_until_commit",
          invariants=("the open-transaction check fails when the relay logs streamed changes as they arrive",))
def negative_control_stream_log_before_commit_is_caught():
    """streamed_transaction_spills_until_commit's check on the open transaction, with
    defect.stream_log_before_commit (the relay also appends each streamed change to the log as it
    arrives): it must fail. Waits (with a ceiling) for the check to fail, since the appended records
    reach the log file as the writer flushes; then rolls the transaction back."""
    with StreamPair("stream-early-defect", faults="defect.stream_log_before_commit:1:defect") as pair:
        session, xid = open_streamed_transaction(pair, 50_000)
        caught = []

        def check_fails():
            try:
                check_open_transaction_not_logged(pair, xid)
            except CaptureFailure as e:
                if "already has" not in str(e):  # the log must be readable: the defect's records themselves fail it
                    raise CaptureFailure(f"harness failure, not a caught defect: {e}")
                caught.append(str(e))
                return True
            return False
        try:
            wait_for(f"the open-transaction check of xid {xid} to fail under defect.stream_log_before_commit",
                     check_fails, 60, interval_s=0.2)
            session.query("ROLLBACK")
        finally:
            session.close()
        record_fault_fired("defect.stream_log_before_commit")
        print(f"caught as expected: {caught[-1][:600]}")


@scenario(seed_rows=("pgoutput_stream_abort_discards_partial_changes",), suite="large_transactions",
          invariants=("a rolled-back streamed transaction leaves no spill file", "and no record in the log"))
def stream_abort_discards_top_transaction():
    with StreamPair("stream-abort") as pair:
        session, xid = open_streamed_transaction(pair, 50_000)
        try:
            session.query("ROLLBACK")
        finally:
            session.close()
        pair.source.query("INSERT INTO big VALUES (1, 'after', 'the rollback')")
        wait_log_covers_source(pair.source)
        wait_for(f"the spill file of rolled-back xid {xid} to be removed",
                 lambda: not os.path.exists(pair.spill_file(xid)), 60)
        leaked = records_of(pair.log_dir, xid)
        if leaked:
            raise CaptureFailure(f"rolled-back xid {xid} has {len(leaked)} record(s) in the log")
        if pair.spill_files():
            raise CaptureFailure(f"spill files left: {pair.spill_files()}")
        apply_until_caught_up(pair)
        check_target_equals_source(pair, "top-level abort")


def subtransaction_aborts(pair):
    """Runs the savepoint workload; returns the top xid."""
    session = PsqlSession(pair.source)
    try:
        session.query("BEGIN")
        xid = int(session.query("SELECT pg_current_xact_id()"))
        session.query("INSERT INTO big SELECT g, 'top', 'kept' FROM generate_series(1, 10000) g", timeout_s=60)
        session.query("SAVEPOINT a")
        session.query("INSERT INTO big SELECT g, 'sub-a', 'rolled back' FROM generate_series(100001, 130000) g",
                      timeout_s=60)
        wait_for("the relay to spill savepoint a's rows",
                 lambda: sum(1 for x in spill_frame_xids(pair.spill_file(xid)) if x != xid) >= 25_000, 120, 0.2)
        session.query("ROLLBACK TO SAVEPOINT a")
        session.query("INSERT INTO big SELECT g, 'top', 'after a' FROM generate_series(10001, 15000) g", timeout_s=60)
        spilled_before_b = sum(1 for x in spill_frame_xids(pair.spill_file(xid)) if x != xid)
        session.query("SAVEPOINT b")
        session.query("ALTER TABLE big ADD COLUMN extra int")
        session.query("INSERT INTO big SELECT g, 'sub-b', 'rolled back', g FROM generate_series(200001, 220000) g",
                      timeout_s=60)
        wait_for("the relay to spill savepoint b's DDL and rows",
                 lambda: sum(1 for x in spill_frame_xids(pair.spill_file(xid)) if x != xid)
                 >= spilled_before_b + 15_000, 120, 0.2)
        session.query("ROLLBACK TO SAVEPOINT b")
        session.query("INSERT INTO big SELECT g, 'top', 'after b' FROM generate_series(15001, 16000) g", timeout_s=60)
        session.query("COMMIT")
    finally:
        session.close()
    return xid


@scenario(seed_rows=("pgoutput_stream_abort_discards_partial_changes",), suite="large_transactions",
          invariants=("rolled-back savepoints' rows and DDL are discarded, streamed or not",
                      "the kept rows are logged once", "target equals source, without the rolled-back column"))
def stream_abort_discards_exactly_the_rolled_back_subtransactions():
    with StreamPair("stream-subabort") as pair:
        xid = subtransaction_aborts(pair)
        wait_log_covers_source(pair.source)
        check_logged_once(pair, xid, 16_000)
        if pair.spill_files():
            raise CaptureFailure(f"spill files left: {pair.spill_files()}")
        apply_until_caught_up(pair)
        check_target_equals_source(pair, "subtransaction aborts")


@scenario(suite="large_transactions", defect="stream_subxact_abort_kept",
          fault_points=("defect.stream_subxact_abort_kept",),
          pairs_with="stream_abort_discards_exactly_the_rolled_back_subtransactions",
          invariants=("the subtransaction-abort checks fail when the relay keeps an aborted subtransaction",))
def negative_control_subxact_abort_kept_is_caught():
    with StreamPair("stream-subabort-defect", faults="defect.stream_subxact_abort_kept:1:defect") as pair:
        xid = subtransaction_aborts(pair)
        wait_log_covers_source(pair.source)
        try:
            check_logged_once(pair, xid, 16_000)
            apply_until_caught_up(pair)
            check_target_equals_source(pair, "subtransaction aborts (defect)")
        except CaptureFailure as caught:
            record_fault_fired("defect.stream_subxact_abort_kept")
            print(f"caught as expected: {str(caught).splitlines()[0]}")
            return
        raise CaptureFailure("defect.stream_subxact_abort_kept was not caught: the checks passed with the relay "
                             "keeping aborted subtransactions")


def kill_relay_at(pair, point):
    """Stops the flow, commits a 100 000-row transaction, starts the flow with the relay held at
    `point` (fault stall: the relay announces it in the server log), kills the held relay with
    SIGKILL and waits for the restarted one; returns the xid."""
    pair.source.query("SELECT trellara.stop_flow('app')")
    wait_for("the relay to stop", lambda: worker_pid(pair.source) is None, 60)
    xid = int(pair.source.query("BEGIN; SELECT pg_current_xact_id(); INSERT INTO big SELECT g, 'big', "
                                "repeat('y', 40) FROM generate_series(1, 100000) g; COMMIT").splitlines()[0])
    stall_line = f"trellara: fault point {point}: stall"
    stalls_before = pair.source.server_log().count(stall_line)
    pair.source.query("SELECT trellara.start_flow('app')")
    pid = wait_for("the relay to run", lambda: worker_pid(pair.source), 60)
    wait_for(f"the relay to be held at {point}", lambda: pair.source.server_log().count(stall_line) > stalls_before,
             120, interval_s=0.05)
    if worker_pid(pair.source) != pid:
        raise CaptureFailure(f"the relay {pid} is gone before the kill at {point}")
    os.kill(pid, signal.SIGKILL)
    record_fault_fired(point)
    print(f"killed relay {pid} held at {point} (xid {xid})")
    wait_for("the relay to come back", lambda: (worker_pid(pair.source) or pid) != pid, 120)
    return xid


def finish_after_kill(pair, xid, label):
    wait_log_covers_source(pair.source)
    check_logged_once(pair, xid, 100_000)
    if pair.spill_files():
        raise CaptureFailure(f"spill files left after the restart: {pair.spill_files()}")
    apply_until_caught_up(pair)
    check_target_equals_source(pair, label)
    count = pair.target.query(f"SELECT count(*) FROM trellara.applied_transactions WHERE xid = {xid}")
    if count != "1":
        raise CaptureFailure(f"xid {xid} has {count} dedup rows on the target, not 1")


@scenario(suite="large_transactions",
          fault_points=("relay.stream_after_spill_write",),
          invariants=("leftover spill files removed at restart", "transaction logged once", "applied once"))
def relay_kill9_while_streaming_applies_once():
    with StreamPair("stream-kill-spill", faults="relay.stream_after_spill_write:1:stall") as pair:
        xid = kill_relay_at(pair, "relay.stream_after_spill_write")
        finish_after_kill(pair, xid, "kill -9 while streaming")


@scenario(suite="large_transactions",
          fault_points=("relay.stream_commit_after_first_append",),
          invariants=("a half-appended streamed transaction is written again in full", "applied once"))
def relay_kill9_at_stream_commit_applies_once():
    with StreamPair("stream-kill-commit", faults="relay.stream_commit_after_first_append:1:stall") as pair:
        xid = kill_relay_at(pair, "relay.stream_commit_after_first_append")
        finish_after_kill(pair, xid, "kill -9 at stream commit")


@scenario(suite="large_transactions",
          invariants=("only committed transactions are logged", "in commit order", "with their row counts",
                      "target equals source"))
def concurrent_streamed_transactions_land_in_commit_order():
    rows = 20_000
    with StreamPair("stream-concurrent") as pair:
        sessions = [PsqlSession(pair.source) for _ in range(8)]
        try:
            xids = []
            for s in sessions:
                s.query("BEGIN")
                xids.append(int(s.query("SELECT pg_current_xact_id()")))
            # Interleave the sessions' inserts in slices so their streamed segments interleave.
            for part in range(4):
                for n, s in enumerate(sessions):
                    lo = n * 1_000_000 + part * rows // 4 + 1
                    hi = n * 1_000_000 + (part + 1) * rows // 4
                    if n in (2, 5) and part == 1:
                        s.query("SAVEPOINT sp")
                    s.query(f"INSERT INTO big SELECT g, 's{n}', 'p{part}' FROM generate_series({lo}, {hi}) g",
                            timeout_s=60)
                    if n in (2, 5) and part == 1:
                        s.query("ROLLBACK TO SAVEPOINT sp")
            order = [6, 1, 4, 7, 2, 0, 5, 3]
            rolled_back = {3, 6}
            expected = []
            for n in order:
                if n in rolled_back:
                    sessions[n].query("ROLLBACK")
                else:
                    sessions[n].query("COMMIT")
                    expected.append((xids[n], rows - (rows // 4 if n in (2, 5) else 0)))
        finally:
            for s in sessions:
                s.close()
        wait_log_covers_source(pair.source)
        completed, _ = log_transactions(log_records(pair.log_dir))
        logged = [x for x, _ in completed]
        if logged != [x for x, _ in expected]:
            raise CaptureFailure(f"log transactions {logged} differ from the committed ones in commit order "
                                 f"{[x for x, _ in expected]}")
        for x, n_rows in expected:
            check_logged_once(pair, x, n_rows)
        if pair.spill_files():
            raise CaptureFailure(f"spill files left: {pair.spill_files()}")
        apply_until_caught_up(pair)
        check_target_equals_source(pair, "concurrent streamed transactions")


@scenario(suite="large_transactions",
          invariants=("a streamed transaction with a record above trellara.record_bytes_max puts the flow in the "
                      "error state naming it", "no restart loop, no server crash", "never complete in the log"))
def uncapturable_streamed_transaction_puts_the_flow_in_error_state():
    with StreamPair("stream-uncapturable") as pair:
        pair.source.query("ALTER SYSTEM SET trellara.record_bytes_max = '1MB'; SELECT pg_reload_conf()")
        # New decoding sessions read the setting: restart the relay so it runs with it.
        old = worker_pid(pair.source)
        pair.source.query("SELECT trellara.stop_flow('app'); SELECT trellara.start_flow('app')")
        wait_for("the relay to run again", lambda: (worker_pid(pair.source) or old) != old, 60)
        pair.source.query("ALTER TABLE big ALTER COLUMN v SET STORAGE EXTERNAL")
        xid = int(pair.source.query(
            "BEGIN; SELECT pg_current_xact_id(); "
            "INSERT INTO big SELECT g, 'small', 'x' FROM generate_series(1, 20000) g; "
            "INSERT INTO big SELECT 0, 'huge', string_agg(md5(g::text), '') FROM generate_series(1, 65536) g; "
            "COMMIT").splitlines()[0])

        def errored():
            row = pair.source.query("SELECT state || '|' || coalesce(last_error, '') FROM trellara.status()")
            return row if row.startswith("error|") else None
        row = wait_for("the flow to enter the error state", errored, 120)
        if f"transaction {xid}" not in row or "record_bytes_max" not in row:
            raise CaptureFailure(f"the error does not name transaction {xid} and the setting: {row}")
        print(f"error state: {row[:300]}")
        starts = pair.source.server_log().count('trellara relay of flow "app" started')
        time.sleep(8)   # longer than the first restart backoffs: a loop would start the relay again
        if pair.source.server_log().count('trellara relay of flow "app" started') != starts:
            raise CaptureFailure("the relay was started again after the error state")
        if any(r["type"] in ("manifest", "commit_marker") for r in records_of(pair.log_dir, xid)):
            raise CaptureFailure(f"uncapturable xid {xid} is complete in the log")
        # The relay must leave through the error state, not by a crash that restarts the server
        # (and forgets the error state): an error raised in the stream commit callback.
        assert_no_backend_crashes(pair.source)


SCENARIOS = [streamed_transaction_spills_until_commit, negative_control_stream_log_before_commit_is_caught,
             stream_abort_discards_top_transaction,
             stream_abort_discards_exactly_the_rolled_back_subtransactions,
             negative_control_subxact_abort_kept_is_caught, relay_kill9_while_streaming_applies_once,
             relay_kill9_at_stream_commit_applies_once, concurrent_streamed_transactions_land_in_commit_order,
             uncapturable_streamed_transaction_puts_the_flow_in_error_state]

if __name__ == "__main__":
    run_scenarios(SCENARIOS)
