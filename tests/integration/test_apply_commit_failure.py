#!/usr/bin/env python3
"""Integration: a transaction that fails AT COMMIT on the target (DESIGN §2 "failed target
transaction"), against real Postgres and real `trellara apply` processes.

The target holds a deferred constraint trigger, enabled ALWAYS (the apply session runs with
session_replication_role = replica), that raises check_violation (SQLSTATE 23514) at COMMIT for an
audit row whose note is 'reject'. Every statement of such a transaction succeeds; only its COMMIT
fails. The guarantees, on both apply paths:

  - commit_failure_in_a_pipelined_batch_is_quarantined_without_origin_dedup_or_offset: a whole
    transaction fails at COMMIT inside a pipelined batch (the transaction before it in the batch
    commits), is retried alone, fails again and is quarantined (reason sql_error, SQLSTATE 23514);
    while the daemon applier is blocked there, origin progress stays at the transaction before it,
    there is no dedup row at or past it, the consumer offset is not past its record and the
    transaction after it is not applied. After the trigger is fixed and the boundary marked
    replay-ready it applies, and every logged transaction is applied exactly once;
  - commit_failure_of_a_chunked_transaction_is_quarantined_without_origin_dedup_or_offset: the same
    for a chunked transaction (1 500 rows), which only ever takes the one-at-a-time path;
  - negative_control_skipping_the_origin_reset_is_caught: with the defect
    defect.apply_skip_origin_reset (the session's origin state is not reset after the failed
    transaction) the guarantees above must fail: the quarantine record commits with the failed
    transaction's origin LSN. Runs last: it leaves origin progress past a transaction never applied.

Defects need an explicit switch: the negative control passes --enable-test-defects when the applier
accepts it (see defect_apply_command), in addition to TRELLARA_FAULTS.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capture_support import (CaptureFailure, TRELLARA_BIN, log_records, lsn_to_int, record_faults_from_output,  # noqa: E402
                             run_scenarios, scenario, wait_for)
from test_apply_robustness import (FlowPair, APPLY_TIMEOUT_S, assert_same_data,  # noqa: E402
                                   assert_each_transaction_applied_once, consumer_offset, run_apply,
                                   wait_log_covers_source, with_test_defects)

EXIT_BLOCKED = 3
# Generous ceilings for conditions; none of them is a timing the test depends on.
QUARANTINE_WAIT_S = 180
STOP_WAIT_S = 120
DDL = """
CREATE TABLE public.items (id int PRIMARY KEY, name text NOT NULL, qty int NOT NULL);
CREATE TABLE public.audit (id bigint PRIMARY KEY, note text NOT NULL);
"""
TABLES = ("public.items", "public.audit")
COMMIT_FAILURE_SQLSTATE = "23514"


def set_commit_trigger(target, rejecting):
    """The target's deferred constraint trigger on public.audit, enabled ALWAYS. `rejecting`: it
    raises check_violation at COMMIT for a row whose note is 'reject'; otherwise it accepts all."""
    check = ("IF NEW.note = 'reject' THEN RAISE EXCEPTION 'audit row % rejected by the target''s commit-time "
             "check', NEW.id USING ERRCODE = 'check_violation'; END IF;") if rejecting else ""
    target.psql(f"""
CREATE OR REPLACE FUNCTION public.audit_commit_check() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  {check}
  RETURN NULL;
END $$;
DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'audit_commit_check') THEN
    CREATE CONSTRAINT TRIGGER audit_commit_check AFTER INSERT OR UPDATE ON public.audit
      DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.audit_commit_check();
    ALTER TABLE public.audit ENABLE ALWAYS TRIGGER audit_commit_check;
  END IF;
END $$;
""")


def source_tx(pair, sql):
    """Runs `sql` as one source transaction and waits until it is logged. Returns (xid, commit LSN,
    offset of its first record, record types) — the first record is a chunk for a chunked one."""
    xid = int(pair.source.query(f"BEGIN; {sql}; SELECT txid_current(); COMMIT").splitlines()[-1])
    wait_log_covers_source(pair.source)
    records = [r for r in log_records(pair.log_dir) if r.get("xid") == xid]
    completing = [r for r in records if r["type"] in ("envelope", "commit_marker")]
    if not completing:
        raise CaptureFailure(f"transaction {xid} is not complete in the log: {records}")
    return xid, completing[-1]["commit_lsn"], min(r["offset"] for r in records), {r["type"] for r in records}


def origin_progress(target):
    text = target.query("SELECT pg_replication_origin_progress('trellara_app', false)")
    return lsn_to_int(text) if text else 0


def assert_commit_failure_left_no_trace(pair, xid, commit_lsn, offset, origin_before, later_check):
    """The guarantees of a transaction that failed at COMMIT: quarantined with reason and SQLSTATE;
    origin progress where it was; no dedup row at or past it; the consumer offset not past its
    first record; the later transaction not applied."""
    row = pair.target.query(f"SELECT reason, sqlstate, state FROM trellara.quarantine WHERE flow = 'app' "
                            f"AND xid = {xid} AND commit_lsn = '{commit_lsn}'")
    if row != f"sql_error|{COMMIT_FAILURE_SQLSTATE}|quarantined":
        raise CaptureFailure(f"quarantine row of xid {xid}: {row!r}, expected sql_error|{COMMIT_FAILURE_SQLSTATE}|"
                             f"quarantined")
    progress = origin_progress(pair.target)
    if progress != origin_before:
        raise CaptureFailure(f"origin progress moved from {origin_before:X} to {progress:X} although transaction "
                             f"{xid} (commit {commit_lsn}) failed at COMMIT")
    dedup = pair.target.query(f"SELECT count(*) FROM trellara.applied_transactions WHERE commit_lsn >= '{commit_lsn}'")
    if dedup != "0":
        raise CaptureFailure(f"{dedup} dedup rows at or past commit {commit_lsn}, which failed at COMMIT")
    if consumer_offset(pair.log_dir) > offset:
        raise CaptureFailure(f"consumer offset {consumer_offset(pair.log_dir)} passed record {offset} of transaction "
                             f"{xid}, which failed at COMMIT")
    if not later_check():
        raise CaptureFailure(f"a transaction after {xid} (which failed at COMMIT) was applied")


def daemon_command(config):
    return [TRELLARA_BIN, "apply", "--config", config]


def defect_apply_command(config, defect):
    """`trellara apply --until-caught-up` with `defect` switched on: TRELLARA_FAULTS, plus
    --enable-test-defects where the applier requires that explicit switch. Returns (argv, env)."""
    env = dict(os.environ, TRELLARA_FAULTS=f"{defect}:1:defect")
    return with_test_defects([TRELLARA_BIN, "apply", "--config", config, "--until-caught-up"], env), env


def bootstrap(pair):
    # Both tables are written once here, so the flow knows them (trellara.relation_schemas): a
    # relation's first sight takes the one-at-a-time path, and the scenarios need their failing
    # transaction to meet the batch path first.
    pair.source.query("INSERT INTO items SELECT g, 'item ' || g, g FROM generate_series(1, 5) g; "
                      "INSERT INTO audit VALUES (0, 'bootstrap')")
    wait_log_covers_source(pair.source)
    run_apply(pair.config, 0)


@scenario(seed_rows=("applier_before_target_commit",), suite="failed_target_transaction", invariants=("quarantined (23514) after a retry alone", "origin progress, dedup and consumer offset stay before it", "nothing after it applied", "applies once after replay-ready"))
def commit_failure_in_a_pipelined_batch_is_quarantined_without_origin_dedup_or_offset(pair):
    set_commit_trigger(pair.target, rejecting=True)
    before_xid, before_lsn, _, _ = source_tx(pair, "INSERT INTO items VALUES (50, 'before', 1)")
    xid, commit_lsn, offset, types = source_tx(pair, "INSERT INTO audit VALUES (1, 'reject')")
    if types != {"envelope"}:
        raise CaptureFailure(f"the one-row transaction was logged as {types}, expected one envelope")
    source_tx(pair, "INSERT INTO items VALUES (51, 'after', 1)")
    # The daemon: it reads all three, sends them as one batch, and halts at the quarantine.
    errors = open(os.path.join(pair.work.name, "daemon.stderr"), "w+")
    applier = subprocess.Popen(daemon_command(pair.config), stdout=subprocess.DEVNULL, stderr=errors, text=True)
    try:
        wait_for("the daemon applier to report itself blocked at the transaction failing at COMMIT", lambda:
                 pair.target.query("SELECT state FROM trellara.apply_status WHERE flow = 'app'") == "blocked" and
                 pair.target.query(f"SELECT count(*) FROM trellara.quarantine WHERE xid = {xid}") == "1",
                 QUARANTINE_WAIT_S)
        # The transaction before it in the batch committed; origin progress is exactly there.
        assert_commit_failure_left_no_trace(pair, xid, commit_lsn, offset, lsn_to_int(before_lsn), lambda:
                                            pair.target.query("SELECT count(*) FROM public.items WHERE id = 51") == "0")
        if pair.target.query("SELECT count(*) FROM public.items WHERE id = 50") != "1":
            raise CaptureFailure(f"transaction {before_xid}, before the failing one in the batch, was not applied")
    finally:
        if applier.poll() is None:
            applier.terminate()  # our own child, by its Popen handle: it stops at the next boundary
        applier.wait(timeout=STOP_WAIT_S)
        errors.seek(0)
        stderr = errors.read()
        errors.close()
    if applier.returncode != 0:
        raise CaptureFailure(f"the daemon applier stopped by SIGTERM exited {applier.returncode}: {stderr[-2000:]}")
    # Grouped (apply.group_transactions, the default): the group's COMMIT fails first, then the same
    # transactions go one target transaction each, and the failing one alone.
    for part in ("applying a group's transactions one target transaction each after a failure in it",
                 "retrying alone after a failure in a batch", f"transaction {xid}", "COMMIT",
                 COMMIT_FAILURE_SQLSTATE, "rejected by the target's commit-time check"):
        if part not in stderr:
            raise CaptureFailure(f"the daemon's output lacks {part!r} (the failure must be met in a batch first, "
                                 f"then quarantined alone): {stderr[-2000:]}")
    print(f"batch: xid {xid} failed at COMMIT in a batch, retried alone, quarantined; origin stayed at {before_lsn}")
    set_commit_trigger(pair.target, rejecting=False)
    pair.target.query(f"SELECT trellara.quarantine_replay_ready({xid}, '{commit_lsn}')")
    run_apply(pair.config, 0)
    assert_same_data(pair.source, pair.target, TABLES, "after the commit-time check was fixed")
    assert_each_transaction_applied_once(pair.target, pair.log_dir, "after the commit-time check was fixed")
    print("ok: commit_failure_in_a_pipelined_batch_is_quarantined_without_origin_dedup_or_offset")


@scenario(suite="failed_target_transaction", invariants=("no row of the chunked transaction visible", "origin progress, dedup and consumer offset unmoved"))
def commit_failure_of_a_chunked_transaction_is_quarantined_without_origin_dedup_or_offset(pair):
    set_commit_trigger(pair.target, rejecting=True)
    origin_before = origin_progress(pair.target)
    # 1 500 rows, more than trellara.chunk_changes (1 024 by default): chunks + manifest + marker.
    xid, commit_lsn, offset, types = source_tx(
        pair, "INSERT INTO audit SELECT g, CASE WHEN g = 1700 THEN 'reject' ELSE 'bulk' END "
              "FROM generate_series(1001, 2500) g")
    if "chunk" not in types:
        raise CaptureFailure(f"the 1 500-row transaction was logged as {types}, expected a chunked transaction")
    source_tx(pair, "INSERT INTO items VALUES (60, 'after', 1)")
    result = run_apply(pair.config, EXIT_BLOCKED)
    for part in (f"transaction {xid}", "COMMIT", COMMIT_FAILURE_SQLSTATE):
        if part not in result.stderr:
            raise CaptureFailure(f"the quarantine message lacks {part!r}: {result.stderr[-2000:]}")
    assert_commit_failure_left_no_trace(pair, xid, commit_lsn, offset, origin_before, lambda:
                                        pair.target.query("SELECT count(*) FROM public.items WHERE id = 60") == "0")
    if pair.target.query("SELECT count(*) FROM public.audit WHERE id BETWEEN 1001 AND 2500") != "0":
        raise CaptureFailure(f"rows of transaction {xid}, which failed at COMMIT, are visible on the target")
    print(f"chunked: xid {xid} failed at COMMIT, quarantined; origin stayed at {origin_before:X}")
    set_commit_trigger(pair.target, rejecting=False)
    pair.target.query(f"SELECT trellara.quarantine_replay_ready({xid}, '{commit_lsn}')")
    run_apply(pair.config, 0)
    assert_same_data(pair.source, pair.target, TABLES, "after the chunked transaction's check was fixed")
    assert_each_transaction_applied_once(pair.target, pair.log_dir, "after the chunked transaction's check was fixed")
    print("ok: commit_failure_of_a_chunked_transaction_is_quarantined_without_origin_dedup_or_offset")


@scenario(suite="failed_target_transaction", defect="apply_skip_origin_reset",
          fault_points=("defect.apply_skip_origin_reset",), pairs_with="commit_failure_in_a_pipelined_batch_is_quarantined_without_origin_dedup_or_offset", invariants=("the commit-failure checks fail when the session origin is not reset",))
def negative_control_skipping_the_origin_reset_is_caught(pair):
    """With defect.apply_skip_origin_reset the failed transaction's origin LSN stays set in the
    session; the guarantees checked above must then fail. Runs last."""
    set_commit_trigger(pair.target, rejecting=True)
    origin_before = origin_progress(pair.target)
    xid, commit_lsn, offset, _ = source_tx(pair, "INSERT INTO audit VALUES (3, 'reject')")
    source_tx(pair, "INSERT INTO items VALUES (70, 'after', 1)")
    command, env = defect_apply_command(pair.config, "defect.apply_skip_origin_reset")
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=APPLY_TIMEOUT_S)
    if "defect.apply_skip_origin_reset" not in record_faults_from_output(result.stderr):
        raise CaptureFailure(f"harness failure, not a caught defect: defect.apply_skip_origin_reset never fired "
                             f"(exit {result.returncode}): {result.stderr[-500:]}")
    try:
        assert_commit_failure_left_no_trace(pair, xid, commit_lsn, offset, origin_before, lambda:
                                            pair.target.query("SELECT count(*) FROM public.items WHERE id = 70") == "0")
    except CaptureFailure as caught:
        print(f"negative control: applier exit {result.returncode} without the origin reset — caught: {caught}")
    else:
        raise CaptureFailure("negative control: an applier that keeps the failed transaction's origin state passed the "
                             f"commit-failure checks — they cannot catch that defect (exit {result.returncode}, "
                             f"{' '.join(command[1:])}): {result.stderr[-1000:]}")
    print("ok: negative_control_skipping_the_origin_reset_is_caught")


SCENARIOS = (commit_failure_in_a_pipelined_batch_is_quarantined_without_origin_dedup_or_offset,
             commit_failure_of_a_chunked_transaction_is_quarantined_without_origin_dedup_or_offset,
             negative_control_skipping_the_origin_reset_is_caught)

if __name__ == "__main__":
    with FlowPair("apply-commitfail", DDL, TABLES) as flow_pair:
        bootstrap(flow_pair)
        run_scenarios(SCENARIOS, flow_pair)
        flow_pair.check_no_crashes()
