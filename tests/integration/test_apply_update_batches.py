#!/usr/bin/env python3
"""Integration: a chunked transaction's runs of UPDATEs sent as batch statements (docs/apply.md
"Chunked transactions", core UpdateBatchSql), against real Postgres and real `trellara apply`:

  - chunked_updates_are_batched_and_applied_exactly: a 3 000-row UPDATE transaction (values with
    quotes, backslashes, braces, commas, newlines, NULL, the text 'NULL', empty strings; the same
    rows updated twice; an unchanged TOASTed value; deletes and inserts in between) is logged as
    chunks; the applier sends its UPDATE runs as batches (batched_updates= on its progress line)
    and the target equals the source, each transaction applied once;
  - a_batched_update_that_matches_no_row_quarantines_its_transaction: one row of such a
    transaction is missing on the target: exactly that transaction is quarantined
    (zero_rows_matched, the missing row's key and its place in the batch in the message), none of
    its changes visible, nothing after it applied; after repair + replay-ready it applies;
  - negative_control_batch_without_its_row_check_is_caught: the same with
    defect.apply_update_batch_unchecked (the batch statement without its row check) must fail
    those checks;
  - updates_go_one_at_a_time_where_the_target_could_see_their_order: a table with a second unique
    index, where a batch in the server's order could raise a unique violation the source's order
    never met, a table with an ENABLE ALWAYS trigger, which would see the rows changed in another
    order, and a table partitioned on the target only with such a trigger on one partition: none
    is batched, the triggers see the source's order, the data is equal.
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capture_support import (CaptureFailure, checks_fail_under_defect, log_records, run_scenarios,  # noqa: E402
                             scenario)
from test_apply_robustness import (FlowPair, APPLY_TIMEOUT_S, apply_command, assert_same_data,  # noqa: E402
                                   assert_each_transaction_applied_once, run_apply, wait_log_covers_source,
                                   with_test_defects)
from test_apply_fail_closed import EXIT_BLOCKED, assert_blocked_without_trace, source_tx  # noqa: E402

DDL = """
CREATE TABLE public.wide (id int PRIMARY KEY, note text, n int NOT NULL, tag varchar(20));
CREATE TABLE public.slots (id int PRIMARY KEY, code int NOT NULL UNIQUE);
CREATE TABLE public.watched (id int PRIMARY KEY, v int NOT NULL);
CREATE TABLE public.later (id int PRIMARY KEY);
CREATE TABLE public.parts (id int PRIMARY KEY, v int NOT NULL);
"""
TABLES = ("public.wide", "public.slots", "public.watched", "public.later", "public.parts")
BATCHED = re.compile(r"\bbatched_updates=(\d+)\b")


def batched_updates(result):
    found = BATCHED.findall(result.stdout)
    if not found:
        raise CaptureFailure(f"the applier's progress line has no batched_updates=: {result.stdout[-1000:]}")
    return int(found[-1])


def chunked_tx(pair, sql):
    """Runs `sql` as one source transaction that must be logged as chunks; returns (xid, commit LSN,
    first log offset of the transaction)."""
    xid = int(pair.source.query(f"BEGIN; {sql}; SELECT txid_current(); COMMIT").splitlines()[-1])
    wait_log_covers_source(pair.source)
    records = [r for r in log_records(pair.log_dir) if r.get("xid") == xid]
    marker = next((r for r in records if r["type"] == "commit_marker"), None)
    if marker is None or sum(1 for r in records if r["type"] == "chunk") < 2:
        raise CaptureFailure(f"harness: xid {xid} was not logged as chunks: {sorted(set(r['type'] for r in records))}")
    return xid, marker["commit_lsn"], min(r["offset"] for r in records)


def setup(pair):
    # Chunks of 1 024 changes (the default, set explicitly so that no earlier setting changes it).
    pair.source.query("ALTER SYSTEM SET trellara.chunk_changes = 1024")
    pair.source.query("SELECT pg_reload_conf()")
    pair.source.query("SELECT trellara.stop_flow('app')")
    pair.source.query("SELECT trellara.start_flow('app')")
    pair.source.query("INSERT INTO wide SELECT g, 'row ' || g, g, 't' || g FROM generate_series(1, 3000) g")
    # TOASTed values (incompressible enough to be stored out of line): an UPDATE that does not
    # touch them carries them as unchanged-TOAST, another statement shape in the middle of a run.
    pair.source.query("UPDATE wide SET note = (SELECT string_agg(md5(g::text || id::text), '') "
                      "FROM generate_series(1, 300) g) WHERE id BETWEEN 1 AND 40")
    wait_log_covers_source(pair.source)
    run_apply(pair.config, 0)


@scenario(suite="apply", invariants=("the chunked UPDATE runs were sent as batches (batched_updates > 0)",
                                     "target equals source (quotes, backslashes, braces, NULL, 'NULL', empty, "
                                     "newlines, unchanged TOAST, rows updated twice)",
                                     "each logged transaction applied once"))
def chunked_updates_are_batched_and_applied_exactly(pair):
    setup(pair)
    chunked_tx(pair, """
        UPDATE wide SET note = (ARRAY[E'q"uo\\\\te', NULL, 'NULL', '', '{a,b} c', E'line\\nbreak', 'ünï "x"'])[id % 7 + 1],
                        n = n + 1 WHERE id > 40;
        UPDATE wide SET n = n + 1000 WHERE id <= 40;
        UPDATE wide SET n = n * 2, tag = NULL WHERE id % 3 = 0;
        DELETE FROM wide WHERE id % 10 = 0;
        INSERT INTO wide VALUES (5000, 'new', 1, NULL);
        UPDATE wide SET tag = 'short run' WHERE id BETWEEN 101 AND 105;
        UPDATE wide SET tag = 'last' WHERE id > 2000""")
    result = run_apply(pair.config, 0)
    batched = batched_updates(result)
    if batched < 1000:
        raise CaptureFailure(f"only {batched} UPDATEs were sent in batches; the runs of this transaction hold thousands")
    assert_same_data(pair.source, pair.target, TABLES, "after the batched UPDATEs")
    assert_each_transaction_applied_once(pair.target, pair.log_dir, "after the batched UPDATEs")
    print(f"ok: chunked_updates_are_batched_and_applied_exactly (batched_updates={batched})")


def missing_row_round(pair, env=None, outputs=None):
    """A chunked UPDATE of every row of wide, one row of it missing on the target, then a later
    transaction: the fail-closed checks. With `env` (a defect) the applier's stderr goes to `outputs`."""
    missing = 1501
    pair.target.query(f"DELETE FROM public.wide WHERE id = {missing}")
    before = pair.target.query("SELECT sum(n) FROM public.wide")
    xid, commit_lsn, offset = chunked_tx(pair, "UPDATE wide SET n = n + 7")
    later = int(pair.source.query("SELECT coalesce(max(id), 0) + 1 FROM later"))
    source_tx(pair, f"INSERT INTO later VALUES ({later})")
    result = subprocess.run(with_test_defects(apply_command(pair.config), env), capture_output=True, text=True,
                            env=env, timeout=APPLY_TIMEOUT_S)
    if outputs is not None:
        outputs.append(result.stderr)
    if result.returncode != EXIT_BLOCKED:
        raise CaptureFailure(f"the applier exited {result.returncode}, expected {EXIT_BLOCKED} (blocked at xid {xid}): "
                             f"{result.stderr[-800:]}")
    for part in (f"transaction {xid}", "public.wide", f"(id)=({missing})", "in a batch of", "at row"):
        if part not in result.stderr:
            raise CaptureFailure(f"the quarantine message lacks {part!r}: {result.stderr[-1500:]}")
    assert_blocked_without_trace(pair, xid, commit_lsn, offset, "zero_rows_matched", lambda: pair.target.query(
        f"SELECT count(*) FROM public.later WHERE id = {later}") == "0")
    after = pair.target.query("SELECT sum(n) FROM public.wide")
    if after != before:
        raise CaptureFailure(f"sum(n) of the target moved from {before} to {after}: changes of the quarantined "
                             f"transaction are visible")
    return xid, commit_lsn


def repair(pair, xid, commit_lsn):
    pair.target.query("INSERT INTO public.wide VALUES (1501, 'repaired', 0, NULL) ON CONFLICT (id) DO NOTHING")
    pair.target.query(f"SELECT trellara.quarantine_replay_ready({xid}, '{commit_lsn}')")
    run_apply(pair.config, 0)
    assert_same_data(pair.source, pair.target, TABLES, "after the missing row was repaired")


@scenario(suite="fail_closed", invariants=("quarantined as zero_rows_matched naming the missing row and its batch row",
                                           "none of its changes visible",
                                           "no dedup row, no origin progress, no consumer offset past it",
                                           "nothing after it applied", "after repair + replay-ready it applies"))
def a_batched_update_that_matches_no_row_quarantines_its_transaction(pair):
    xid, commit_lsn = missing_row_round(pair)
    repair(pair, xid, commit_lsn)
    print("ok: a_batched_update_that_matches_no_row_quarantines_its_transaction")


@scenario(suite="fail_closed", defect="apply_update_batch_unchecked",
          fault_points=("defect.apply_update_batch_unchecked",),
          pairs_with="a_batched_update_that_matches_no_row_quarantines_its_transaction",
          invariants=("the missing-row checks fail when the batch statement has no row check",))
def negative_control_batch_without_its_row_check_is_caught(pair):
    caught = checks_fail_under_defect("defect.apply_update_batch_unchecked", "missing-row",
                                      lambda env, outputs: missing_row_round(pair, env, outputs))
    print(f"negative control: caught: {str(caught)[:300]}")
    # Converge the pair again: the defect let the transaction commit without the missing row.
    insert = pair.source.query("SELECT format('INSERT INTO public.wide VALUES (%s, %L, %s, %L)', id, note, n, tag) "
                               "FROM wide WHERE id = 1501")
    pair.target.query("DELETE FROM public.wide WHERE id = 1501")
    pair.target.query(insert)
    run_apply(pair.config, 0)
    assert_same_data(pair.source, pair.target, TABLES, "after the negative control")
    print("ok: negative_control_batch_without_its_row_check_is_caught")


@scenario(suite="apply", invariants=("a table with a second unique index is not batched and applies although a "
                                     "batch could meet a unique violation",
                                     "a table with an ENABLE ALWAYS trigger is not batched; the trigger sees the "
                                     "rows in the source's order", "target equals source"))
def updates_go_one_at_a_time_where_the_target_could_see_their_order(pair):
    pair.target.query("""
        CREATE TABLE public.watch_log (seq bigserial PRIMARY KEY, id int NOT NULL, v int NOT NULL);
        CREATE FUNCTION public.watch() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN INSERT INTO public.watch_log (id, v) VALUES (NEW.id, NEW.v); RETURN NEW; END $$;
        CREATE TRIGGER watch AFTER UPDATE ON public.watched FOR EACH ROW EXECUTE FUNCTION public.watch();
        ALTER TABLE public.watched ENABLE ALWAYS TRIGGER watch;
        DROP TABLE public.parts;
        CREATE TABLE public.parts (id int PRIMARY KEY, v int NOT NULL) PARTITION BY RANGE (id);
        CREATE TABLE public.parts_low PARTITION OF public.parts FOR VALUES FROM (MINVALUE) TO (1001);
        CREATE TABLE public.parts_high PARTITION OF public.parts FOR VALUES FROM (1001) TO (MAXVALUE);
        CREATE TABLE public.parts_log (seq bigserial PRIMARY KEY, id int NOT NULL);
        CREATE FUNCTION public.parts_watch() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN INSERT INTO public.parts_log (id) VALUES (NEW.id); RETURN NEW; END $$;
        CREATE TRIGGER parts_watch AFTER UPDATE ON public.parts_high FOR EACH ROW EXECUTE FUNCTION public.parts_watch();
        ALTER TABLE public.parts_high ENABLE ALWAYS TRIGGER parts_watch""")
    pair.source.query("INSERT INTO slots SELECT g, g FROM generate_series(1, 2000) g")
    pair.source.query("INSERT INTO watched SELECT g, 0 FROM generate_series(1, 2000) g")
    pair.source.query("INSERT INTO parts SELECT g, 0 FROM generate_series(1, 2000) g")
    wait_log_covers_source(pair.source)
    run_apply(pair.config, 0)
    # Each code moves to the next one's old value, highest first: valid in the source's order only.
    # The watched rows are changed in a scattered order the trigger must see as it was.
    chunked_tx(pair, """
        DO $$ BEGIN
          FOR i IN REVERSE 2000..1 LOOP UPDATE slots SET code = code + 1 WHERE id = i; END LOOP;
          FOR i IN 0..1999 LOOP UPDATE watched SET v = i WHERE id = (i * 7919) % 2000 + 1; END LOOP;
          FOR i IN 0..1999 LOOP UPDATE parts SET v = i WHERE id = (i * 7919) % 2000 + 1; END LOOP;
        END $$""")
    result = run_apply(pair.config, 0)
    batched = batched_updates(result)
    if batched != 0:
        raise CaptureFailure(f"{batched} UPDATEs were batched in tables whose target observes their order")
    order = pair.target.query("SELECT string_agg(id::text, ',' ORDER BY seq) FROM public.watch_log")
    want = ",".join(str((i * 7919) % 2000 + 1) for i in range(2000))
    if order != want:
        raise CaptureFailure(f"the ENABLE ALWAYS trigger saw the rows in another order than the source changed them: "
                             f"{order[:200]}...")
    order = pair.target.query("SELECT string_agg(id::text, ',' ORDER BY seq) FROM public.parts_log")
    want = ",".join(str(i) for i in ((i * 7919) % 2000 + 1 for i in range(2000)) if i > 1000)
    if order != want:
        raise CaptureFailure(f"the trigger of partition parts_high saw the rows in another order than the source "
                             f"changed them: {order[:200]}...")
    assert_same_data(pair.source, pair.target, TABLES, "after the order-sensitive UPDATEs")
    print("ok: updates_go_one_at_a_time_where_the_target_could_see_their_order")


SCENARIOS = (chunked_updates_are_batched_and_applied_exactly, a_batched_update_that_matches_no_row_quarantines_its_transaction,
             negative_control_batch_without_its_row_check_is_caught,
             updates_go_one_at_a_time_where_the_target_could_see_their_order)

if __name__ == "__main__":
    with FlowPair("apply-updbatch", DDL, TABLES) as flow_pair:
        run_scenarios(SCENARIOS, flow_pair)
        flow_pair.check_no_crashes()
