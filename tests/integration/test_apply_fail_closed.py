#!/usr/bin/env python3
"""Integration: the applier's fail-closed rules and its ack-after-apply replay, against real
Postgres and real `trellara apply` processes, under seed 000's names:

  - key_changing_update_sets_new_key_and_matches_old_key: a source UPDATE of a primary-key value
    lands as the new key on the target, the old key gone;
  - update_delete_zero_row_match_fails_closed: an UPDATE and a DELETE whose target row is missing
    are quarantined (zero_rows_matched) with no dedup row, no origin progress and no consumer
    offset past them, nothing after them applied; after repair + replay-ready they apply;
  - missing_target_table_fails_closed_without_checkpoint_or_dedup: a change to a table the target
    lacks is quarantined (missing_table) before anything runs; the same three guarantees;
  - apply_worker_replays_safely_when_ack_fails_after_apply: the applier dies (SIGKILL, fault point
    apply.after_commit_before_offset) after its target commits and before its consumer offset is
    written, then the same with the offset write failing: each rerun skips what committed as
    duplicates and converges, every commit LSN applied once;
  - whole_transaction_larger_than_a_batch_is_applied_alone: a 3 000-change envelope
    (chunk_changes raised) bypasses the pipeline and applies whole;
  - chunked_insert_conflict_in_a_copy_batch_quarantines_only_that_transaction: a 3 000-row INSERT
    logged as chunks is applied through COPY runs (docs/apply.md "Chunked transactions"); a row
    already on the target in the middle of it makes the COPY fail with a unique violation: exactly
    that transaction is quarantined (duplicate_key, the server's DETAIL and the batch size in the
    cause), none of its rows is visible, nothing after it applied; after repair it applies;
  - until_caught_up_stops_at_the_end_present_at_start: with a source writing all along, the
    command stops at the log end it saw at start and exits 0;
  - progress_is_shown_on_a_terminal: under a pseudo-terminal the redrawn progress line appears and
    the structured line ends the output;
  - rereading_the_log_skips_duplicates_and_its_negative_control: without its consumer offset the
    applier skips every logged transaction as a duplicate; with defect.apply_ignore_dedup it must not
    pass that check;
  - negative_control_replay_after_ack_fault_without_dedup_is_caught: the ack-fault crash round with
    its rerun under defect.apply_ignore_dedup must fail the replay checks (its own pair);
  - negative_control_moving_past_a_missing_table_is_caught: the missing-table transaction applied
    under defect.apply_skip_quarantined must fail the missing-table checks (its own pair);
  - negative_control_moving_past_a_quarantine_is_caught: with defect.apply_skip_quarantined the
    fail-closed guarantees above must fail (run last: it leaves the flow past an unapplied
    transaction).

One source + target pair for the others (cheap for CI); each scenario leaves the pair converged.
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capture_support import (CaptureFailure, log_records, lsn_to_int, record_faults_from_output,  # noqa: E402
                             run_scenarios, scenario, wait_for)
from test_apply_robustness import (FlowPair, APPLY_TIMEOUT_S, apply_command, assert_same_data,  # noqa: E402
                                   assert_each_transaction_applied_once, consumer_offset, run_apply,
                                   wait_log_covers_source, with_test_defects)

EXIT_BLOCKED = 3
PG_BIN = "/usr/lib/postgresql/15/bin"
DDL = """
CREATE TABLE public.items (id int PRIMARY KEY, name text NOT NULL, qty int NOT NULL);
CREATE TABLE public.audit (id bigint PRIMARY KEY, note text NOT NULL);
"""
AUDIT_DDL = "CREATE TABLE public.audit (id bigint PRIMARY KEY, note text NOT NULL)"
TABLES = ("public.items", "public.audit")


def source_tx(pair, sql):
    """Runs `sql` as one source transaction; returns (xid, commit LSN, log offset) once it is logged."""
    xid = int(pair.source.query(f"BEGIN; {sql}; SELECT txid_current(); COMMIT").splitlines()[-1])
    wait_log_covers_source(pair.source)
    record = next(r for r in log_records(pair.log_dir) if r["type"] == "envelope" and r["xid"] == xid)
    return xid, record["commit_lsn"], record["offset"]


def origin_progress(target):
    text = target.query("SELECT pg_replication_origin_progress('trellara_app', false)")
    return lsn_to_int(text) if text else 0


def assert_blocked_without_trace(pair, xid, commit_lsn, offset, reason, later_check):
    """The quarantine guarantees: the row says `reason`; no dedup row, no origin progress and no
    consumer offset at or past the transaction; the later transaction not applied."""
    row = pair.target.query(f"SELECT reason, state FROM trellara.quarantine WHERE flow = 'app' AND xid = {xid} "
                            f"AND commit_lsn = '{commit_lsn}'")
    if row != f"{reason}|quarantined":
        raise CaptureFailure(f"quarantine row of xid {xid}: {row!r}, expected {reason}|quarantined")
    dedup = pair.target.query(f"SELECT count(*) FROM trellara.applied_transactions WHERE commit_lsn >= '{commit_lsn}'")
    if dedup != "0":
        raise CaptureFailure(f"{dedup} dedup rows at or past the quarantined commit {commit_lsn}")
    if origin_progress(pair.target) >= lsn_to_int(commit_lsn):
        raise CaptureFailure(f"origin progress moved to or past the quarantined commit {commit_lsn}")
    if consumer_offset(pair.log_dir) > offset:
        raise CaptureFailure(f"consumer offset {consumer_offset(pair.log_dir)} passed the quarantined record {offset}")
    if not later_check():
        raise CaptureFailure("a transaction after the quarantined one was applied")


@scenario(seed_rows=("default_replica_identity_key_change_apply",), suite="fail_closed", invariants=("the old key is gone and the new key present on the target",))
def key_changing_update_sets_new_key_and_matches_old_key(pair):
    pair.source.query("INSERT INTO items SELECT g, 'item ' || g, g FROM generate_series(1, 5) g")
    wait_log_covers_source(pair.source)
    run_apply(pair.config, 0)
    source_tx(pair, "UPDATE items SET id = 10, qty = 99 WHERE id = 1")
    run_apply(pair.config, 0)
    row = pair.target.query("SELECT id, name, qty FROM public.items WHERE id IN (1, 10) ORDER BY id")
    if row != "10|item 1|99":
        raise CaptureFailure(f"after the key-changing UPDATE the target holds {row!r}, expected only 10|item 1|99")
    assert_same_data(pair.source, pair.target, TABLES, "key change")
    print("ok: key_changing_update_sets_new_key_and_matches_old_key")


@scenario(seed_rows=("target_update_delete_zero_rows", "repair_and_replay_ready", "quarantine_replay_ready_requires_exact_boundary"), suite="fail_closed", invariants=("quarantined as zero_rows_matched", "no dedup row, no origin progress, no consumer offset past it", "nothing after it applied", "a replay-ready naming a boundary quarantined in two flows is refused", "a replay-ready naming another xid or commit LSN than the quarantined boundary is refused and marks nothing", "after repair + replay-ready it applies"))
def update_delete_zero_row_match_fails_closed(pair):
    for op, sql in (("UPDATE", "UPDATE items SET qty = qty + 1 WHERE id = 2"), ("DELETE", "DELETE FROM items WHERE id = 3")):
        victim = 2 if op == "UPDATE" else 3
        saved = pair.target.query(f"SELECT id, name, qty FROM public.items WHERE id = {victim}")
        pair.target.query(f"DELETE FROM public.items WHERE id = {victim}")
        xid, commit_lsn, offset = source_tx(pair, sql)
        source_tx(pair, f"INSERT INTO items VALUES ({100 + victim}, 'after', 1)")
        result = run_apply(pair.config, EXIT_BLOCKED)
        for part in (f"{op} on public.items matched 0 rows", f"(id)=({victim})", f"transaction {xid}"):
            if part not in result.stderr:
                raise CaptureFailure(f"the {op} quarantine message lacks {part!r}: {result.stderr}")
        assert_blocked_without_trace(pair, xid, commit_lsn, offset, "zero_rows_matched", lambda: pair.target.query(
            f"SELECT count(*) FROM public.items WHERE id = {100 + victim}") == "0")
        # Repair: put the row back as it was before the source change, then release the boundary.
        vid, name, qty = saved.split("|")
        pair.target.query(f"INSERT INTO public.items VALUES ({vid}, '{name}', {qty})")
        if op == "UPDATE":
            # Another flow into this database quarantined the same (xid, commit LSN): the
            # two-argument call must refuse to pick one; naming the flow marks only ours.
            pair.target.query("INSERT INTO trellara.quarantine SELECT 'other', commit_lsn, xid, origin_sysid, reason, "
                              "sqlstate, detail, checksum, attempts, state, message, next_step FROM "
                              f"trellara.quarantine WHERE flow = 'app' AND xid = {xid}")
            ambiguous = pair.target.psql(f"SELECT trellara.quarantine_replay_ready({xid}, '{commit_lsn}')", check=False)
            if ambiguous.returncode == 0 or "quarantined in flows app, other" not in ambiguous.stderr:
                raise CaptureFailure(f"an ambiguous replay-ready was not refused: {ambiguous.stderr}")
            marked = pair.target.query(f"SELECT trellara.quarantine_replay_ready({xid}, '{commit_lsn}', 'app')")
            if "of flow app is marked replay-ready" not in marked or pair.target.query(
                    f"SELECT state FROM trellara.quarantine WHERE flow = 'other' AND xid = {xid}") != "quarantined":
                raise CaptureFailure(f"naming the flow did not mark exactly its boundary: {marked}")
            pair.target.query("DELETE FROM trellara.quarantine WHERE flow = 'other'")
        else:
            # Only the exact boundary is released: the same xid at another commit LSN, or another
            # xid at this commit LSN, is refused and marks nothing.
            v = lsn_to_int(commit_lsn) + 1
            for wrong_xid, wrong_lsn in ((xid, f"{v >> 32:X}/{v & 0xFFFFFFFF:X}"), (int(xid) + 1, commit_lsn)):
                refused = pair.target.psql(f"SELECT trellara.quarantine_replay_ready({wrong_xid}, '{wrong_lsn}')",
                                           check=False)
                state = pair.target.query(f"SELECT state FROM trellara.quarantine WHERE flow = 'app' AND xid = {xid}")
                if refused.returncode == 0 or "refused: no quarantined transaction" not in refused.stderr \
                        or state != "quarantined":
                    raise CaptureFailure(f"replay-ready of ({wrong_xid}, {wrong_lsn}), not the quarantined boundary "
                                         f"({xid}, {commit_lsn}), was not refused or changed it: {refused.stderr} "
                                         f"state {state}")
            pair.target.query(f"SELECT trellara.quarantine_replay_ready({xid}, '{commit_lsn}')")
        run_apply(pair.config, 0)
        assert_same_data(pair.source, pair.target, TABLES, f"after the {op} repair")
        print(f"zero-row {op}: quarantined xid {xid}, nothing recorded past it, applied after repair")
    print("ok: update_delete_zero_row_match_fails_closed")


@scenario(seed_rows=("target_schema_missing",), suite="fail_closed", invariants=("quarantined as missing_table", "no dedup row, no origin progress, no consumer offset past it", "nothing after it applied"))
def missing_target_table_fails_closed_without_checkpoint_or_dedup(pair):
    pair.target.query("DROP TABLE public.audit")
    xid, commit_lsn, offset = source_tx(pair, "INSERT INTO audit VALUES (1, 'first')")
    source_tx(pair, "INSERT INTO items VALUES (200, 'after', 1)")
    result = run_apply(pair.config, EXIT_BLOCKED)
    for part in ("table public.audit does not exist on the target", f"transaction {xid}", commit_lsn):
        if part not in result.stderr:
            raise CaptureFailure(f"the missing-table message lacks {part!r}: {result.stderr}")
    assert_blocked_without_trace(pair, xid, commit_lsn, offset, "missing_table", lambda: pair.target.query(
        "SELECT count(*) FROM public.items WHERE id = 200") == "0")
    pair.target.query(AUDIT_DDL)
    pair.target.query(f"SELECT trellara.quarantine_replay_ready({xid}, '{commit_lsn}')")
    run_apply(pair.config, 0)
    assert_same_data(pair.source, pair.target, TABLES, "after the table was created")
    print("ok: missing_target_table_fails_closed_without_checkpoint_or_dedup")


def ack_fault_then_replay(pair, action, expect, first, rerun_env=None):
    """One round of the scenario below: a bulk insert and 300 updates, the applier faulted between
    the target COMMIT and the consumer-offset write (`action`), then a rerun (with `rerun_env`, the
    negative control's defect) that must skip exactly the committed transactions as duplicates and
    converge. Raises CaptureFailure when a check fails."""
    pair.source.query(f"INSERT INTO audit SELECT g, 'bulk' FROM generate_series({first}, {first + 599}) g")  # one tx
    for _ in range(300):
        pair.source.query("UPDATE items SET qty = qty + 1 WHERE id = 10")
    wait_log_covers_source(pair.source)
    before_offset = consumer_offset(pair.log_dir)
    before_dedup = int(pair.target.query("SELECT count(*) FROM trellara.applied_transactions"))
    env = dict(os.environ, TRELLARA_FAULTS=f"apply.after_commit_before_offset:1:{action}")
    result = subprocess.run(apply_command(pair.config), capture_output=True, text=True, env=env,
                            timeout=APPLY_TIMEOUT_S)
    committed = int(pair.target.query("SELECT count(*) FROM trellara.applied_transactions")) - before_dedup
    print(f"ack fault {action}: exit {result.returncode}, {committed} transactions committed on the target, "
          f"consumer offset {consumer_offset(pair.log_dir)} (was {before_offset}); {result.stderr.strip()[-200:]}")
    if result.returncode != expect:
        raise CaptureFailure(f"with the ack fault '{action}' the applier exited {result.returncode}, expected "
                             f"{expect}: {result.stderr[-1000:]}")
    if action == "error" and "consumers/applier" not in result.stderr:
        raise CaptureFailure(f"the failed offset write does not name the consumer file: {result.stderr}")
    if committed == 0:
        raise CaptureFailure("the fault fired before anything was committed: nothing to replay")
    if consumer_offset(pair.log_dir) != before_offset:
        raise CaptureFailure("the consumer offset moved although its write was faulted")
    # The applier says the fault fired (at exit, or before the crash action kills it).
    if "apply.after_commit_before_offset" not in record_faults_from_output(result.stderr):
        raise CaptureFailure(f"the applier does not report fault apply.after_commit_before_offset firing: "
                             f"{result.stderr[-500:]}")
    if rerun_env is None:
        rerun = run_apply(pair.config, 0)
    else:
        rerun = subprocess.run(with_test_defects(apply_command(pair.config), rerun_env), capture_output=True,
                               text=True, env=rerun_env, timeout=APPLY_TIMEOUT_S)
        fired = record_faults_from_output(rerun.stderr)
        if not any(point.startswith("defect.") for point in fired):
            raise RuntimeError(f"harness failure, not a caught defect: the rerun's defect never fired "
                               f"(exit {rerun.returncode}): {rerun.stderr[-500:]}")
        if rerun.returncode != 0:
            raise CaptureFailure(f"the rerun exited {rerun.returncode}, expected 0: {rerun.stderr[-500:]}")
    line = [x for x in rerun.stdout.splitlines() if x.startswith("apply flow=")][-1]
    fields = dict(kv.split("=", 1) for kv in line.split()[1:])
    if int(fields["skipped_duplicates"]) != committed:
        raise CaptureFailure(f"the rerun skipped {fields['skipped_duplicates']} duplicates, expected the "
                             f"{committed} transactions committed before the fault")
    assert_same_data(pair.source, pair.target, TABLES, f"after the ack fault {action}")
    assert_each_transaction_applied_once(pair.target, pair.log_dir, f"after the ack fault {action}")


@scenario(seed_rows=("applier_after_target_commit_before_stream_ack",), suite="fail_closed", fault_points=("apply.after_commit_before_offset",), invariants=("the rerun skips exactly the committed transactions as duplicates", "each logged transaction applied once", "data equals source"))
def apply_worker_replays_safely_when_ack_fails_after_apply(pair):
    for round_no, (action, expect) in enumerate((("crash", -9), ("error", 1))):
        ack_fault_then_replay(pair, action, expect, 1000 + 1000 * round_no)
    print("ok: apply_worker_replays_safely_when_ack_fails_after_apply")


@scenario(suite="fail_closed")
def whole_transaction_larger_than_a_batch_is_applied_alone(pair):
    """trellara.chunk_changes raised to 5 000 on the source: a 3 000-row transaction is one
    envelope, more statements than a pipelined batch may hold (1 024); it goes through the
    one-at-a-time path (bounded memory) and must apply whole."""
    pair.source.query("ALTER SYSTEM SET trellara.chunk_changes = 5000")
    pair.source.query("SELECT pg_reload_conf()")
    pair.source.query("SELECT trellara.stop_flow('app')")
    pair.source.query("SELECT trellara.start_flow('app')")
    try:
        xid, commit_lsn, offset = source_tx(pair, "INSERT INTO audit SELECT g, 'wide' FROM generate_series(5000, 7999) g")
        record = next(r for r in log_records(pair.log_dir, offset) if r["offset"] == offset)
        if record["type"] != "envelope":
            raise CaptureFailure(f"the 3 000-row transaction was logged as {record['type']}, expected one envelope "
                                 f"(chunk_changes 5000 not in effect)")
        result = run_apply(pair.config, 0)
        line = [x for x in result.stdout.splitlines() if x.startswith("apply flow=")][-1]
        fields = dict(kv.split("=", 1) for kv in line.split()[1:])
        # It is the only transaction to apply: no pipelined batch may have been sent for it.
        if fields["applied"] != "1" or fields["batches"] != "0":
            raise CaptureFailure(f"the 3 000-change transaction was not applied alone on the one-at-a-time path: "
                                 f"{line}")
        assert_same_data(pair.source, pair.target, TABLES, "after a whole transaction larger than a batch")
    finally:
        pair.source.query("ALTER SYSTEM RESET trellara.chunk_changes")
        pair.source.query("SELECT pg_reload_conf()")
        pair.source.query("SELECT pg_reload_conf()")
    print(f"ok: whole_transaction_larger_than_a_batch_is_applied_alone (xid {xid}, commit {commit_lsn})")


@scenario(suite="fail_closed", invariants=("quarantined as duplicate_key naming the row and the batch", "none of its rows visible", "no dedup row, no origin progress, no consumer offset past it", "nothing after it applied", "after repair + replay-ready it applies"))
def chunked_insert_conflict_in_a_copy_batch_quarantines_only_that_transaction(pair):
    first, last, clash = 50000, 52999, 51500
    # The chunk size in effect for the flow's decoding session (an earlier scenario may have
    # raised it without restarting the flow after its RESET).
    pair.source.query("ALTER SYSTEM SET trellara.chunk_changes = 1024")
    pair.source.query("SELECT pg_reload_conf()")
    pair.source.query("SELECT trellara.stop_flow('app')")
    pair.source.query("SELECT trellara.start_flow('app')")
    pair.target.query(f"INSERT INTO public.audit VALUES ({clash}, 'already on the target')")
    xid = int(pair.source.query(f"BEGIN; INSERT INTO audit SELECT g, 'chunked' FROM generate_series({first}, {last}) g; "
                                "SELECT txid_current(); COMMIT").splitlines()[-1])
    wait_log_covers_source(pair.source)
    records = [r for r in log_records(pair.log_dir) if r.get("xid") == xid]
    marker = next((r for r in records if r["type"] == "commit_marker"), None)
    if marker is None or sum(1 for r in records if r["type"] == "chunk") < 2:
        raise CaptureFailure(f"harness: the 3 000-row transaction was not logged as chunks: "
                             f"{sorted(set(r['type'] for r in records))}")
    commit_lsn = marker["commit_lsn"]
    offset = min(r["offset"] for r in records)
    source_tx(pair, "INSERT INTO items VALUES (600, 'after', 1)")
    result = run_apply(pair.config, EXIT_BLOCKED)
    for part in (f"transaction {xid}", "public.audit", f"({clash}) already exists", "in a batch of", "COPY"):
        if part not in result.stderr:
            raise CaptureFailure(f"the quarantine message lacks {part!r}: {result.stderr[-1500:]}")
    assert_blocked_without_trace(pair, xid, commit_lsn, offset, "duplicate_key", lambda: pair.target.query(
        "SELECT count(*) FROM public.items WHERE id = 600") == "0")
    visible = pair.target.query(f"SELECT count(*) FROM public.audit WHERE id BETWEEN {first} AND {last}")
    if visible != "1":
        raise CaptureFailure(f"{visible} rows of the quarantined range are on the target, expected only the clash")
    pair.target.query(f"DELETE FROM public.audit WHERE id = {clash}")
    pair.target.query(f"SELECT trellara.quarantine_replay_ready({xid}, '{commit_lsn}')")
    run_apply(pair.config, 0)
    assert_same_data(pair.source, pair.target, TABLES, "after the chunked conflict was repaired")
    print(f"chunked conflict: quarantined xid {xid}: {result.stderr.strip().splitlines()[-1][:400]}")
    print("ok: chunked_insert_conflict_in_a_copy_batch_quarantines_only_that_transaction")


def log_end(pair):
    records = log_records(pair.log_dir)
    return records[-1]["offset"] + 1 if records else 0


@scenario(suite="fail_closed")
def until_caught_up_stops_at_the_end_present_at_start(pair):
    """A source that keeps writing must not keep `apply --until-caught-up` from ending: it applies
    what was durable when it started and exits 0. The applier is held for 6 s right after it opened
    the log (fault point apply.after_log_opened, stall) while the source writes on, so the log
    grows well past the end it saw. The log's end is read over and over while the applier runs:
    an end read while it was still running and past its stop point proves it left records that
    were durable before it finished (no sleep has to outlast its start-up)."""
    script = os.path.join(pair.work.name, "bump.sql")
    with open(script, "w") as f:
        f.write("UPDATE items SET qty = qty + 1 WHERE id = 10;\n")
    idle_end = log_end(pair)
    writer = subprocess.Popen([os.path.join(PG_BIN, "pgbench"), "-n", "-c", "1", "-T", "120", "-f", script],
                              env=pair.source.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for("the source's writes to reach the log", lambda: log_end(pair) > idle_end, APPLY_TIMEOUT_S)
        before = log_end(pair)
        env = dict(os.environ, TRELLARA_FAULTS="apply.after_log_opened:1:stall", TRELLARA_FAULT_STALL_MS="6000")
        applier = subprocess.Popen(apply_command(pair.config), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, env=env)
        seen_while_running = []  # log ends read while the applier had not exited yet
        while applier.poll() is None:
            end = log_end(pair)
            if applier.poll() is None:
                seen_while_running.append(end)
            time.sleep(0.2)  # a polling interval, not a timing the outcome depends on
        out, err = applier.communicate(timeout=APPLY_TIMEOUT_S)
    finally:
        writer.terminate()  # our own children, by their Popen handles
        writer.wait(timeout=60)
    if applier.returncode != 0:
        raise CaptureFailure(f"apply --until-caught-up under a writing source exited {applier.returncode}: {err}")
    line = [x for x in out.splitlines() if x.startswith("apply flow=")][-1]
    stopped_at = int(dict(kv.split("=", 1) for kv in line.split()[1:])["next_log_offset"])
    during = max(seen_while_running, default=0)
    print(f"until-caught-up under a writing source: log end {before} before the run, up to {during} while it ran, "
          f"stopped at {stopped_at}")
    if not before <= stopped_at:
        raise CaptureFailure(f"--until-caught-up stopped at offset {stopped_at}, before {before}: the end of the log "
                             f"before it started")
    if not stopped_at < during:
        raise CaptureFailure(f"--until-caught-up stopped at offset {stopped_at}, but no log end read while it ran "
                             f"(up to {during}) lies past it: either it applied records written after it started, or "
                             f"the source wrote nothing during its 6 s hold")
    wait_log_covers_source(pair.source)
    run_apply(pair.config, 0)
    assert_same_data(pair.source, pair.target, TABLES, "after the writing source stopped")
    print("ok: until_caught_up_stops_at_the_end_present_at_start")


@scenario(suite="operator")
def progress_is_shown_on_a_terminal(pair):
    """On a terminal the applier redraws one line (applied, rate, lag); the structured line ends it.
    `script` (util-linux, in every Debian) gives it a pseudo-terminal."""
    for _ in range(20):
        pair.source.query("UPDATE items SET qty = qty + 1 WHERE id = 10")
    wait_log_covers_source(pair.source)
    command = " ".join(apply_command(pair.config))
    # Bytes, not text: universal newlines would turn the redraw's carriage return into a newline.
    result = subprocess.run(["script", "-qfec", command, "/dev/null"], capture_output=True,
                            timeout=APPLY_TIMEOUT_S)
    stdout = result.stdout.decode(errors="replace")
    if result.returncode != 0:
        raise CaptureFailure(f"apply on a terminal exited {result.returncode}: {stdout[-1000:]}")
    shown = [part for part in stdout.split("\r\x1b[K") if part.startswith("apply app: applied ")]
    if not shown or "lag " not in shown[0] or "tx/s" not in shown[0]:
        raise CaptureFailure(f"no progress line on the terminal: {stdout!r}")
    if "\napply flow=app state=caught_up applied=20 " not in stdout.replace("\r\n", "\n"):
        raise CaptureFailure(f"the structured line does not end the terminal output: {stdout!r}")
    print(f"terminal: {shown[-1].splitlines()[0]!r}")
    print("ok: progress_is_shown_on_a_terminal")


@scenario(seed_rows=("duplicate_transaction_replay",), suite="fail_closed", defect="apply_ignore_dedup",
          fault_points=("defect.apply_ignore_dedup",), invariants=("a re-read skips every logged transaction as a duplicate", "with the defect the re-read check fails (both halves in this scenario)"))
def rereading_the_log_skips_duplicates_and_its_negative_control(pair):
    """Without its consumer offset the applier re-reads the whole log and must skip every
    transaction as a duplicate (exit 0, nothing applied, data unchanged). Negative control:
    with defect.apply_ignore_dedup (a duplicate is applied again) the same re-read must not pass
    those checks."""
    offset_file = os.path.join(pair.log_dir, "consumers", "applier")

    def reread(env=None):
        os.remove(offset_file)
        result = subprocess.run(with_test_defects(apply_command(pair.config), env), capture_output=True, text=True,
                                env=env, timeout=APPLY_TIMEOUT_S)
        lines = [x for x in result.stdout.splitlines() if x.startswith("apply flow=")]
        fields = dict(kv.split("=", 1) for kv in lines[-1].split()[1:]) if lines else {}
        return result, fields

    logged = len([r for r in log_records(pair.log_dir) if r["type"] in ("envelope", "commit_marker")])
    result, fields = reread()
    if result.returncode != 0 or fields.get("applied") != "0" or fields.get("skipped_duplicates") != str(logged):
        raise CaptureFailure(f"re-reading the log did not skip all {logged} transactions as duplicates: exit "
                             f"{result.returncode}, {fields}, {result.stderr[-500:]}")
    assert_same_data(pair.source, pair.target, TABLES, "after re-reading the log")
    print(f"re-read: {logged} transactions skipped as duplicates")

    env = dict(os.environ, TRELLARA_FAULTS="defect.apply_ignore_dedup:1:defect")
    result, fields = reread(env)
    if "defect.apply_ignore_dedup" not in record_faults_from_output(result.stderr):
        raise CaptureFailure(f"harness failure, not a caught defect: defect.apply_ignore_dedup never fired "
                             f"(exit {result.returncode}): {result.stderr[-500:]}")
    if result.returncode == 0 and fields.get("skipped_duplicates") == str(logged):
        raise CaptureFailure("negative control: an applier that applies duplicates again passed the re-read checks")
    print(f"negative control: with duplicates applied again the re-read exits {result.returncode} "
          f"({fields.get('skipped_duplicates', '-')} skipped): {result.stderr.strip()[:240]} — caught")
    # Restore a converged pair for the scenarios after this one.
    pair.target.query("DELETE FROM trellara.quarantine WHERE flow = 'app' AND state = 'quarantined'")
    result, fields = reread()
    if result.returncode != 0:
        raise CaptureFailure(f"the clean re-read after the negative control failed: {result.stderr[-500:]}")
    assert_same_data(pair.source, pair.target, TABLES, "after the dedup negative control")
    print("ok: rereading_the_log_skips_duplicates_and_its_negative_control")


@scenario(suite="fail_closed", defect="apply_skip_quarantined", fault_points=("defect.apply_skip_quarantined",), pairs_with="update_delete_zero_row_match_fails_closed", invariants=("the fail-closed checks fail when the applier moves past a quarantine",))
def negative_control_moving_past_a_quarantine_is_caught(pair):
    """Seed 002's negative control for the fail-closed checks: with the defect
    defect.apply_skip_quarantined the applier quarantines a zero-row UPDATE and then moves on instead
    of halting. The guarantees update_delete_zero_row_match_fails_closed checks (nothing recorded
    past the quarantined commit, the next transaction not applied) must then fail. Runs last: it
    leaves the flow past a transaction it never applied."""
    pair.target.query("DELETE FROM public.items WHERE id = 4")
    xid, commit_lsn, offset = source_tx(pair, "UPDATE items SET qty = qty + 1 WHERE id = 4")
    source_tx(pair, "INSERT INTO items VALUES (400, 'after', 1)")
    env = dict(os.environ, TRELLARA_FAULTS="defect.apply_skip_quarantined:1:defect")
    result = subprocess.run(with_test_defects(apply_command(pair.config), env), capture_output=True, text=True,
                            env=env, timeout=APPLY_TIMEOUT_S)
    if "defect.apply_skip_quarantined" not in record_faults_from_output(result.stderr):
        raise CaptureFailure(f"harness failure, not a caught defect: defect.apply_skip_quarantined never fired "
                             f"(exit {result.returncode}): {result.stderr[-500:]}")
    try:
        assert_blocked_without_trace(pair, xid, commit_lsn, offset, "zero_rows_matched", lambda: pair.target.query(
            "SELECT count(*) FROM public.items WHERE id = 400") == "0")
    except CaptureFailure as caught:
        print(f"negative control: applier exit {result.returncode} with the halt skipped — caught: {caught}")
    else:
        raise CaptureFailure("negative control: an applier that moves past a quarantined transaction passed the "
                             "fail-closed checks — they cannot catch that defect")
    print("ok: negative_control_moving_past_a_quarantine_is_caught")


@scenario(suite="fail_closed", defect="apply_ignore_dedup", fault_points=("defect.apply_ignore_dedup",),
          pairs_with="apply_worker_replays_safely_when_ack_fails_after_apply",
          invariants=("the ack-fault replay checks fail when the rerun applies the committed transactions again",))
def negative_control_replay_after_ack_fault_without_dedup_is_caught(_shared_pair):
    """Negative control for apply_worker_replays_safely_when_ack_fails_after_apply: the same crash
    between the target COMMIT and the consumer-offset write, then a rerun with
    defect.apply_ignore_dedup (a transaction the target already committed is applied again instead of
    skipped as a duplicate). The replay checks (exactly the committed transactions skipped, data
    equal to the source, each transaction applied once) must then fail. Its own pair: the defect
    leaves the target diverged."""
    with FlowPair("apply-ackdefect", DDL, TABLES) as pair:
        pair.source.query("INSERT INTO items VALUES (10, 'counter', 0)")
        wait_log_covers_source(pair.source)
        run_apply(pair.config, 0)
        env = dict(os.environ, TRELLARA_FAULTS="defect.apply_ignore_dedup:1:defect")
        try:
            ack_fault_then_replay(pair, "crash", -9, 1000, rerun_env=env)
        except CaptureFailure as caught:
            print(f"negative control: the rerun applied committed transactions again — caught: {str(caught)[:300]}")
        else:
            raise CaptureFailure("negative control: a rerun that applies already-committed transactions again "
                                 "passed the ack-fault replay checks — they cannot catch that defect")
    print("ok: negative_control_replay_after_ack_fault_without_dedup_is_caught")


@scenario(suite="fail_closed", defect="apply_skip_quarantined", fault_points=("defect.apply_skip_quarantined",),
          pairs_with="missing_target_table_fails_closed_without_checkpoint_or_dedup",
          invariants=("the missing-table checks fail when the applier moves past the missing_table quarantine",))
def negative_control_moving_past_a_missing_table_is_caught(_shared_pair):
    """Negative control for missing_target_table_fails_closed_without_checkpoint_or_dedup: the same
    transaction into a table the target lacks, then a later one, applied with
    defect.apply_skip_quarantined (the applier quarantines and then moves on instead of halting). The
    missing-table checks (exit 3, the quarantine row, no dedup row, origin progress or consumer
    offset at or past it, the later transaction not applied) must then fail. Its own pair: the
    defect leaves the flow past a transaction it never applied."""
    with FlowPair("apply-missingdefect", DDL, TABLES) as pair:
        pair.target.query("DROP TABLE public.audit")
        xid, commit_lsn, offset = source_tx(pair, "INSERT INTO audit VALUES (1, 'first')")
        source_tx(pair, "INSERT INTO items VALUES (200, 'after', 1)")
        env = dict(os.environ, TRELLARA_FAULTS="defect.apply_skip_quarantined:1:defect")
        result = subprocess.run(with_test_defects(apply_command(pair.config), env), capture_output=True, text=True,
                                env=env, timeout=APPLY_TIMEOUT_S)
        if "defect.apply_skip_quarantined" not in record_faults_from_output(result.stderr):
            raise CaptureFailure(f"harness failure, not a caught defect: defect.apply_skip_quarantined never fired "
                                 f"(exit {result.returncode}): {result.stderr[-500:]}")
        try:
            if result.returncode != EXIT_BLOCKED:
                raise CaptureFailure(f"the applier exited {result.returncode}, expected {EXIT_BLOCKED} (blocked)")
            assert_blocked_without_trace(pair, xid, commit_lsn, offset, "missing_table", lambda: pair.target.query(
                "SELECT count(*) FROM public.items WHERE id = 200") == "0")
        except CaptureFailure as caught:
            print(f"negative control: applier exit {result.returncode} past the missing table — caught: {caught}")
        else:
            raise CaptureFailure("negative control: an applier that moves past a missing-table quarantine passed the "
                                 "missing-table checks — they cannot catch that defect")
    print("ok: negative_control_moving_past_a_missing_table_is_caught")


SCENARIOS = (key_changing_update_sets_new_key_and_matches_old_key, update_delete_zero_row_match_fails_closed,
             missing_target_table_fails_closed_without_checkpoint_or_dedup,
             apply_worker_replays_safely_when_ack_fails_after_apply,
             whole_transaction_larger_than_a_batch_is_applied_alone,
             chunked_insert_conflict_in_a_copy_batch_quarantines_only_that_transaction, until_caught_up_stops_at_the_end_present_at_start,
             progress_is_shown_on_a_terminal, rereading_the_log_skips_duplicates_and_its_negative_control,
             negative_control_replay_after_ack_fault_without_dedup_is_caught,
             negative_control_moving_past_a_missing_table_is_caught,
             negative_control_moving_past_a_quarantine_is_caught)

if __name__ == "__main__":
    with FlowPair("apply-failclosed", DDL, TABLES) as flow_pair:
        run_scenarios(SCENARIOS, flow_pair)
        flow_pair.check_no_crashes()
