#!/usr/bin/env python3
"""Integration: statements the applier builds for many rows at once keep every column's type
modifier (docs/apply.md "Merged statements in a group", "Chunked transactions").

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
  every_capturable_type_survives_every_apply_path
      every column type the plugin can capture, with modifiers (tests/integration/every_type.py:
      75 scalar, range, multirange, enum and domain columns in one table, 17 arrays, composites
      and vectors in another, all of them in a third without a key, REPLICA IDENTITY FULL), values
      with quotes, tabs, newlines, NaN, -0, NULLs, through each path in turn: one row per target
      transaction (group_transactions off), a grouped batch with merged INSERTs and merged UPDATEs
      (merged_changes > 0), a chunked transaction (COPY runs, batched UPDATEs: batched_updates > 0),
      full-row matches of rows that differ only where `=` does not look (numeric 7.5 / 7.50, float
      0 / -0, interval 24 hours / 1 day, jsonb, json, box areas, point and lseg tolerances, xml),
      and `trellara snapshot` (COPY). After each, every table equals the source's row by row
      (md5 of each row's text), nothing quarantined. The type spellings come from one place, core
      value_types.h (unit tests: tests/unit/value_types_test.cpp against every PostgreSQL 15 type
      spelling).
  negative_control_full_row_match_by_equality_is_caught
      with defect.apply_full_row_match_by_equality (the full-row match compares with the type's
      `=`), an UPDATE of the second of two rows equal under numeric `=` (7.5, 7.50) changes the
      first on the target: the clean check (target equals source) must fail.
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capture_support import CaptureFailure, checks_fail_under_defect, run_scenarios, scenario  # noqa: E402
from test_apply_robustness import (FlowPair, apply_command, assert_same_data, run_apply,  # noqa: E402
                                   wait_log_covers_source, with_test_defects)
from test_apply_update_batches import batched_updates, chunked_tx  # noqa: E402
from test_snapshot_shapes import run_snapshot, snapshot_config  # noqa: E402
import every_type  # noqa: E402

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


EVERY_DDL = every_type.TYPES_DDL + f"""
CREATE TABLE public.every_scalar (id int PRIMARY KEY, {every_type.columns_sql(every_type.SCALARS)});
CREATE TABLE public.every_compound (id int PRIMARY KEY, {every_type.columns_sql(every_type.COMPOUNDS)});
CREATE TABLE public.every_full (tag int, {every_type.columns_sql(every_type.SCALARS + every_type.COMPOUNDS)});
ALTER TABLE public.every_full REPLICA IDENTITY FULL;
CREATE TABLE public.twins (n numeric, tag int);
ALTER TABLE public.twins REPLICA IDENTITY FULL;
"""
EVERY_TABLES = ("public.every_scalar", "public.every_compound", "public.every_full")
EVERY_PAIR_TABLES = EVERY_TABLES + ("public.twins",)
EVERY_COLUMNS = {"every_scalar": every_type.SCALARS, "every_compound": every_type.COMPOUNDS,
                 "every_full": every_type.SCALARS + every_type.COMPOUNDS}
# Rows of every_full that differ only in one column, where that type's `=` takes the two values for
# equal (or has no `=`): (column, the value inserted first, the value the source then updates and
# deletes by). A full-row match by `=` finds the first-inserted row and changes the wrong one.
NEAR_TWINS = [
    ("c_num", "7.5", "7.50"),
    ("c_float", "'0'::float8", "'-0'::float8"),
    ("c_real", "'0'::real", "'-0'::real"),
    ("c_iv", "interval '24 hours'", "interval '1 day'"),
    ("c_ivds", "interval '48 hours'", "interval '2 days'"),
    ("c_jsonb", "'{\"n\": 1.5}'::jsonb", "'{\"n\": 1.50}'::jsonb"),
    ("c_json", "'{\"a\":1}'::json", "'{\"a\": 1}'::json"),
    ("c_numrange", "numrange(1.0, 2)", "numrange(1.00, 2)"),
    ("c_box", "box(point(0, 0), point(1, 4))", "box(point(0, 0), point(2, 2))"),
    ("c_lseg", "lseg(point(0, 0), point(1, 1.0000000001))", "lseg(point(0, 0), point(1, 1))"),
    ("c_point", "point(1, 1.0000000001)", "point(1, 1)"),
    ("c_circle", "circle(point(0, 0), 1.0000000001)", "circle(point(0, 0), 1)"),
    ("c_xml", "'<r/>'::xml", "'<r></r>'::xml"),
    ("a_num", "ARRAY[7.5]", "ARRAY[7.50]"),  # numeric(10,2)[]: both stored as 7.50, the same value
]


def insert_rows(table, first, last, key="g"):
    columns = EVERY_COLUMNS[table]
    return f"INSERT INTO {table} SELECT {key}, {every_type.values_sql(columns)} FROM generate_series({first}, {last}) g"


def update_row(table, key, g):
    """Sets every column but the key of row `key` to the values of row number `g`."""
    columns = EVERY_COLUMNS[table]
    names = ", ".join(c for c, _, _ in columns)
    return (f"UPDATE {table} SET ({names}) = (SELECT {every_type.values_sql(columns)} FROM (SELECT {g} AS g) s) "
            f"WHERE id = {key}")


def config_with(pair, suffix, apply_settings):
    config = f"{pair.config}.{suffix}.toml"
    with open(pair.config) as original, open(config, "w") as out:
        out.write(original.read() + "\n[apply]\n" + apply_settings + "\n")
    return config


def apply_and_compare(pair, config, label):
    wait_log_covers_source(pair.source)
    result = run_apply(config, 0)
    assert_same_data(pair.source, pair.target, EVERY_TABLES, label)
    return result


@scenario(suite="apply", invariants=("every capturable type, with modifiers, equals the source's after one-row apply",
                                     "... after merged INSERTs and UPDATEs of a grouped batch",
                                     "... after COPY runs and batched UPDATEs of a chunked transaction",
                                     "a full-row match changes the row the source changed, where `=` takes "
                                     "another row for equal (numeric scale, -0, interval, jsonb, json, box, point, xml)",
                                     "... after trellara snapshot", "nothing quarantined"))
def every_capturable_type_survives_every_apply_path(pair):
    one_at_a_time = config_with(pair, "one", 'group_transactions = "off"')
    # One row per target transaction: INSERT, UPDATE of every column, DELETE.
    for g in range(1, 15):
        pair.source.query("; ".join(insert_rows(t, g, g) for t in ("every_scalar", "every_compound")) +
                          f"; INSERT INTO every_full SELECT {every_type.values_sql([('tag', 'int', 'g')] + EVERY_COLUMNS['every_full'])} "
                          f"FROM generate_series({g}, {g}) g")
    for key in range(1, 6):
        pair.source.query(update_row("every_scalar", key, key + 500) + "; " + update_row("every_compound", key, key + 700))
    pair.source.query("DELETE FROM every_scalar WHERE id = 2; DELETE FROM every_compound WHERE id = 3")
    apply_and_compare(pair, one_at_a_time, "after one row per target transaction")

    # A grouped batch: runs of one-row INSERTs and of one-row UPDATEs of one shape, merged.
    for g in range(101, 131):
        pair.source.query(insert_rows("every_scalar", g, g) + "; " + insert_rows("every_compound", g, g))
    for key in range(101, 121):
        pair.source.query(update_row("every_scalar", key, key * 3))
    for key in range(101, 106):
        pair.source.query(update_row("every_compound", key, key * 5))
    result = apply_and_compare(pair, pair.config, "after a grouped batch")
    if merged_changes(result) < 40:
        raise CaptureFailure(f"only {merged_changes(result)} changes were merged; the batch holds 30 INSERT runs and "
                             f"20 UPDATEs of one shape: {result.stdout[-800:]}")

    # A chunked transaction: COPY runs of INSERTs, then batched UPDATEs (the scalar table) and
    # one-at-a-time UPDATEs (arrays and composites), DELETEs.
    chunked_tx(pair, insert_rows("every_scalar", 1001, 2600) + "; " + insert_rows("every_compound", 1001, 2200))
    chunked_tx(pair, "UPDATE every_scalar t SET (" + ", ".join(c for c, _, _ in every_type.SCALARS) + ") = (SELECT " +
               every_type.values_sql(every_type.SCALARS) + " FROM (SELECT t.id + 7 AS g) s) WHERE id > 1000; "
               "UPDATE every_compound t SET (" + ", ".join(c for c, _, _ in every_type.COMPOUNDS) + ") = (SELECT " +
               every_type.values_sql(every_type.COMPOUNDS) + " FROM (SELECT t.id + 9 AS g) s) WHERE id > 1000; "
               "DELETE FROM every_scalar WHERE id % 17 = 0; DELETE FROM every_compound WHERE id % 19 = 0")
    result = apply_and_compare(pair, pair.config, "after chunked transactions")
    if batched_updates(result) < 1000:
        raise CaptureFailure(f"only {batched_updates(result)} UPDATEs went in batches; the transaction updates "
                             f"1 600 rows of every_scalar")

    # Full-row matches of near twins, one target transaction each and then grouped.
    full_columns = [("tag", "int", "g")] + EVERY_COLUMNS["every_full"]
    for i, (column, first, second) in enumerate(NEAR_TWINS):
        for value in (first, second):
            pair.source.query(f"INSERT INTO every_full SELECT {every_type.values_sql(full_columns, {'tag': str(200 + i), column: value})} "
                              f"FROM (SELECT 5 AS g) s")
    apply_and_compare(pair, one_at_a_time, "after inserting near twins")
    for round_no, config in ((0, one_at_a_time), (1, pair.config)):
        for i, (column, first, second) in enumerate(NEAR_TWINS):
            twin = f"tag = {200 + i} AND {column}::text = ({second})::text"
            if round_no == 0:
                pair.source.query(f"UPDATE every_full SET c_int4 = -{i} WHERE {twin}")
            else:
                pair.source.query(f"DELETE FROM every_full WHERE {twin}")
        apply_and_compare(pair, config, f"after full-row {'UPDATEs' if round_no == 0 else 'DELETEs'} of near twins")

    # trellara snapshot of every table (COPY), then the stream again.
    tables = run_snapshot(snapshot_config(pair), EVERY_TABLES)
    print("snapshot: " + ", ".join(f"{name} {t['state']} {t['rows']} rows" for name, t in tables.items()))
    pair.source.query(update_row("every_scalar", 1, 9) + "; " + update_row("every_compound", 1, 9))
    apply_and_compare(pair, pair.config, "after trellara snapshot and the stream")
    print("ok: every_capturable_type_survives_every_apply_path")


def twins_round(pair, env=None, outputs=None):
    """Two rows of twins equal under numeric `=` (7.5, 7.50); the source updates the second. The
    clean checks: apply exits 0 and the target equals the source."""
    pair.source.query("TRUNCATE twins; INSERT INTO twins VALUES (7.5, 1), (7.50, 1)")
    wait_log_covers_source(pair.source)
    run_apply(pair.config, 0)
    pair.source.query("UPDATE twins SET tag = 2 WHERE n::text = '7.50'")
    wait_log_covers_source(pair.source)
    result = subprocess.run(with_test_defects(apply_command(pair.config), env), capture_output=True, text=True,
                            env=env, timeout=300)
    if outputs is not None:
        outputs.append(result.stderr)
    if result.returncode != 0:
        raise CaptureFailure(f"trellara apply exited {result.returncode}: {result.stderr[-800:]}")
    assert_same_data(pair.source, pair.target, ("public.twins",), "after the UPDATE of one of two twins")


@scenario(suite="apply", defect="apply_full_row_match_by_equality",
          fault_points=("defect.apply_full_row_match_by_equality",),
          pairs_with="every_capturable_type_survives_every_apply_path",
          invariants=("the twins check fails when a full-row match compares with the type's `=`",))
def negative_control_full_row_match_by_equality_is_caught(pair):
    caught = checks_fail_under_defect("defect.apply_full_row_match_by_equality", "near-twin",
                                      lambda env, outputs: twins_round(pair, env, outputs))
    print(f"negative control: caught: {str(caught)[:300]}")
    # Converge: the defect changed the other twin.
    pair.target.query("TRUNCATE twins")
    for row in pair.source.query("SELECT format('INSERT INTO twins VALUES (%L, %s)', n, tag) FROM twins").splitlines():
        pair.target.query(row)
    twins_round(pair)
    print("ok: negative_control_full_row_match_by_equality_is_caught")


if __name__ == "__main__":
    with FlowPair("apply-typmod", DDL, TABLES) as flow_pair:
        flow_pair.source.query("ALTER SYSTEM SET trellara.chunk_changes = 1024")
        flow_pair.source.query("SELECT pg_reload_conf()")
        flow_pair.source.query("SELECT trellara.stop_flow('app')")
        flow_pair.source.query("SELECT trellara.start_flow('app')")
        run_scenarios((merged_updates_keep_type_modifiers, batched_updates_keep_type_modifiers), flow_pair)
        flow_pair.check_no_crashes()
    with FlowPair("apply-every-type", EVERY_DDL, EVERY_PAIR_TABLES) as flow_pair:
        flow_pair.source.query("ALTER SYSTEM SET trellara.chunk_changes = 1024")
        flow_pair.source.query("SELECT pg_reload_conf()")
        flow_pair.source.query("SELECT trellara.stop_flow('app')")
        flow_pair.source.query("SELECT trellara.start_flow('app')")
        run_scenarios((every_capturable_type_survives_every_apply_path,
                       negative_control_full_row_match_by_equality_is_caught), flow_pair)
        flow_pair.check_no_crashes()
