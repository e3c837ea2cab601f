#!/usr/bin/env python3
"""Integration: statements the applier builds for many rows at once keep every column's type
modifier (docs/apply.md "Merged statements in a group", "Chunked transactions"; issue 35 item 1).

A merged UPDATE (grouped batch) and a batched UPDATE (chunked transaction) send each column as a
text array cast to a type (`UPDATE ... FROM unnest($1::T[], ...)`). The type must be the column's
type *without* a modifier that the cast would apply: an explicit cast to `character` means
char(1) and truncates 'USD' to 'U' silently, `bit` means bit(1) and fails, a `varchar(5)` cast
would cut a longer value instead of failing like the one-row UPDATE. The assignment to the column
applies its modifier as a bound parameter does.

  merged_updates_keep_type_modifiers
      20 rows with char(3), bit(4), varbit, numeric(10,2), timestamp(0), interval, varchar(5)
      columns and a table keyed by char(3); ten one-row UPDATEs of another column, then one UPDATE
      of all rows: applied as a grouped batch with merged UPDATEs (merged_changes > 0); the target
      equals the source, nothing quarantined.
  batched_updates_keep_type_modifiers
      the same tables with 3 000 rows, one transaction updating every row (logged as chunks): the
      UPDATE runs go as batches (batched_updates > 0); the target equals the source.
"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capture_support import CaptureFailure, run_scenarios, scenario  # noqa: E402
from test_apply_robustness import FlowPair, assert_same_data, run_apply, wait_log_covers_source  # noqa: E402
from test_apply_update_batches import batched_updates, chunked_tx  # noqa: E402

DDL = """
CREATE TABLE public.priced (id int PRIMARY KEY, code char(3) NOT NULL, amount numeric(10,2), at timestamp(0),
                            span interval hour to minute, tag varchar(5), n int NOT NULL);
CREATE TABLE public.flagged (id int PRIMARY KEY, flags bit(4), bits varbit(8), n int NOT NULL);
CREATE TABLE public.currencies (code char(3) PRIMARY KEY, rate numeric(8,3) NOT NULL, n int NOT NULL);
"""
TABLES = ("public.priced", "public.flagged", "public.currencies")
MERGED = re.compile(r"\bmerged_changes=(\d+)\b")


def merged_changes(result):
    found = MERGED.findall(result.stdout)
    return int(found[-1]) if found else 0


def fill(pair, rows):
    pair.source.query(f"""
        INSERT INTO priced SELECT g, (ARRAY['USD', 'EU', 'J'])[g % 3 + 1], g * 1.25, '2026-12-05 10:11:12',
                                  interval '3 hours 4 minutes', 'ab' || (g % 100), 0
          FROM generate_series(1, {rows}) g;
        INSERT INTO flagged SELECT g, B'1010', B'101', 0 FROM generate_series(1, {rows}) g;
        INSERT INTO currencies SELECT to_hex(g), g / 7.0, 0 FROM generate_series(1, {rows}) g""")


@scenario(suite="apply", invariants=("merged UPDATEs keep char(n), bit(n), varbit(n), numeric(p,s), timestamp(p), "
                                     "interval fields and varchar(n) values exactly",
                                     "a char(n) key matches its rows in a merged UPDATE",
                                     "target equals source, nothing quarantined"))
def merged_updates_keep_type_modifiers(pair):
    fill(pair, 20)
    wait_log_covers_source(pair.source)
    run_apply(pair.config, 0)
    merged = []
    # One group per table: a merged UPDATE that fails sends its whole group one at a time, which
    # would hide what a merge of another table did.
    for table, update, final in (
            ("priced", "UPDATE priced SET n = n + 1 WHERE id = {i}", "UPDATE priced SET n = n + 10, amount = amount + 0.5"),
            ("currencies", "UPDATE currencies SET n = n + 1 WHERE code = to_hex({i})",
             "UPDATE currencies SET rate = rate + 1"),
            ("flagged", "UPDATE flagged SET n = n + 1 WHERE id = {i}", "UPDATE flagged SET n = n + 2")):
        for i in range(1, 11):
            pair.source.query(update.format(i=i))
        pair.source.query(final)
        tables = (table,)
        wait_log_covers_source(pair.source)
        result = run_apply(pair.config, 0)
        assert_same_data(pair.source, pair.target, TABLES, f"after merged UPDATEs of {table}")
        merged.append(merged_changes(result))
        if merged[-1] == 0:
            raise CaptureFailure(f"no change of {tables} was merged: the scenario did not reach the merged path: "
                                 f"{result.stdout[-800:]}")
    codes = pair.target.query("SELECT string_agg(DISTINCT code::text, ',' ORDER BY code::text) FROM priced")
    if codes != "EU,J,USD":
        raise CaptureFailure(f"char(3) values on the target: {codes!r}, expected 'EU,J,USD'")
    print(f"ok: merged_updates_keep_type_modifiers (merged_changes={merged})")


@scenario(suite="apply", invariants=("batched UPDATEs of a chunked transaction keep every type modifier",
                                     "a char(n) key matches its rows in a batch", "target equals source"))
def batched_updates_keep_type_modifiers(pair):
    pair.source.query("TRUNCATE priced, flagged, currencies")
    fill(pair, 3000)
    wait_log_covers_source(pair.source)
    run_apply(pair.config, 0)
    chunked_tx(pair, "UPDATE priced SET n = n + 1, at = at + interval '1 second'; UPDATE currencies SET rate = rate * 2; "
                     "UPDATE flagged SET n = n + 1")
    result = run_apply(pair.config, 0)
    batched = batched_updates(result)
    if batched < 1000:
        raise CaptureFailure(f"only {batched} UPDATEs went in batches; the transaction updates 9 000 rows")
    assert_same_data(pair.source, pair.target, TABLES, "after batched UPDATEs")
    print(f"ok: batched_updates_keep_type_modifiers (batched_updates={batched})")


if __name__ == "__main__":
    with FlowPair("apply-typmod", DDL, TABLES) as flow_pair:
        flow_pair.source.query("ALTER SYSTEM SET trellara.chunk_changes = 1024")
        flow_pair.source.query("SELECT pg_reload_conf()")
        flow_pair.source.query("SELECT trellara.stop_flow('app')")
        flow_pair.source.query("SELECT trellara.start_flow('app')")
        run_scenarios((merged_updates_keep_type_modifiers, batched_updates_keep_type_modifiers), flow_pair)
        flow_pair.check_no_crashes()
