#!/usr/bin/env python3
"""Integration: `trellara snapshot` copies table shapes native logical replication copies (issue 35
item 7), then the stream applies on top.

  snapshot_copies_zero_column_tables_unkeyed_tables_and_other_replica_identities
      - a table with zero columns (CREATE TABLE t (), rows allowed): copied (before, a syntax
        error in the target's COPY column list);
      - a table without a replica identity on a target that publishes it (a schema restored with
        pg_dump carries its publications: FOR ALL TABLES there), already holding the stream's rows:
        copied, its one chunk emptied with TRUNCATE ONLY (before, the chunk's DELETE was refused by
        the target: "does not have a replica identity and publishes deletes");
      - a table whose replica identity is a unique index other than its primary key: chunked on
        the replica identity's column, so the stream's DELETEs (whose old image holds that column
        only) are applied (before, chunked on the primary key and every DELETE quarantined).
    Each table's rows equal the source's after the snapshot and after the stream.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capture_support import CaptureFailure, TRELLARA_BIN, run_scenarios, scenario  # noqa: E402
from test_apply_robustness import FlowPair, run_apply, wait_log_covers_source  # noqa: E402

DDL = """
CREATE TABLE public.no_columns ();
CREATE TABLE public.no_identity (v int, note text);
CREATE TABLE public.by_code (id int PRIMARY KEY, code int NOT NULL, note text);
CREATE UNIQUE INDEX by_code_code ON public.by_code (code);
ALTER TABLE public.by_code REPLICA IDENTITY USING INDEX by_code_code;
"""
TABLES = ("public.no_columns", "public.no_identity", "public.by_code")


def rows(cluster, table):
    return cluster.query(f"SELECT count(*) || ' ' || coalesce(md5(string_agg(t::text, ',' ORDER BY t::text)), '-') "
                         f"FROM ONLY {table} t")


def assert_equal(pair, label):
    differ = [t for t in TABLES if rows(pair.source, t) != rows(pair.target, t)]
    for table in TABLES:
        print(f"{label}: {table}: source {rows(pair.source, table)}, target {rows(pair.target, table)}")
    if differ:
        raise CaptureFailure(f"{label}: the target differs from the source in {differ}")


@scenario(suite="snapshot", invariants=("a zero-column table is copied", "a table the target publishes without a "
                                        "replica identity is copied", "a table with a replica identity index other "
                                        "than its primary key is chunked on it and its DELETEs apply",
                                        "each table equals the source's after snapshot and stream"))
def snapshot_copies_zero_column_tables_unkeyed_tables_and_other_replica_identities(pair):
    pair.source.query("INSERT INTO no_columns SELECT FROM generate_series(1, 7); "
                      "INSERT INTO no_identity SELECT g, 'n' || g FROM generate_series(1, 500) g; "
                      "INSERT INTO by_code SELECT g, 10000 - g, 'c' || g FROM generate_series(1, 3000) g")
    pair.target.query("CREATE PUBLICATION restored_with_the_schema FOR ALL TABLES")
    config = pair.config + ".snapshot.toml"
    with open(pair.config) as original, open(config, "w") as out:
        out.write(original.read() + f'\n[source]\nconninfo = "{pair.source.conninfo()}"\n')
    # The stream's rows reach the target first, so every chunk finds rows to replace: the unkeyed
    # tables' one chunk each must empty them without the DELETE the target's publication refuses.
    apply_now(pair)
    result = subprocess.run([TRELLARA_BIN, "snapshot", "--config", config, "--format", "json", "--chunk-rows",
                             "1000"], capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise CaptureFailure(f"trellara snapshot exited {result.returncode}: {result.stdout[-1500:]} "
                             f"{result.stderr[-1500:]}")
    summary = json.loads(result.stdout)
    tables = {t["table"]: t for t in summary["tables"]}
    print("snapshot: " + ", ".join(f"{name} {t['state']} {t['rows']} rows in {t['chunks']} chunks"
                                   for name, t in tables.items()))
    if tables["public.by_code"]["chunks"] < 2:
        raise CaptureFailure(f"public.by_code was not split into chunks: {tables['public.by_code']}")
    apply_now(pair)
    assert_equal(pair, "after the snapshot")
    pair.source.query("DELETE FROM by_code WHERE id % 3 = 0")
    pair.source.query("UPDATE by_code SET note = note || '!' WHERE id % 5 = 0")
    pair.source.query("INSERT INTO no_columns DEFAULT VALUES; INSERT INTO no_identity VALUES (501, 'late')")
    apply_now(pair)
    assert_equal(pair, "after the stream")
    print("ok: snapshot_copies_zero_column_tables_unkeyed_tables_and_other_replica_identities")


def apply_now(pair):
    wait_log_covers_source(pair.source)
    result = run_apply(pair.config, 0)
    if "quarantined" in result.stdout and "quarantined=0" not in result.stdout:
        raise CaptureFailure(f"the apply quarantined: {result.stdout[-800:]}")
    return result


if __name__ == "__main__":
    with FlowPair("snap-shapes", DDL, TABLES) as flow_pair:
        run_scenarios((snapshot_copies_zero_column_tables_unkeyed_tables_and_other_replica_identities,), flow_pair)
        flow_pair.check_no_crashes()
