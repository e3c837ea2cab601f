#!/usr/bin/env python3
"""Integration: `trellara snapshot` copies table shapes native logical replication copies,
then the stream applies on top.

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

  snapshot_beside_a_commit_waiting_for_a_synchronous_standby_keeps_its_row
      A source transaction commits locally while its synchronous standby is absent: it is decoded,
      logged and applied by the stream, but stays invisible to new snapshots. A snapshot of its
      table then waits (saying why) until the source shows the commit, instead of deleting the
      applied row and copying without it (before: the row was lost on the target, the dedup row
      keeping the stream from applying it again).

  a_key_column_renamed_after_the_snapshot_leaves_the_stream_running
      After a chunked snapshot is handed off, its chunk key column is renamed on the source; later
      UPDATEs, DELETEs and INSERTs apply (before: every change was judged against the finished
      copy by the old key name and quarantined as plan_error until a full reseed). The copy's
      chunks record the source WAL position of their snapshot, and a transaction past every chunk's
      is applied as if the table had never been copied (the 32-bit xid comparison, which wraps
      after 2^31 transactions, is no longer needed for it).

  a_truncate_of_a_partitioned_table_before_the_copy_of_its_partitions_keeps_them (found by
  the divergence fuzzer's seed 29)
      A range-partitioned table of three partitions: rows, TRUNCATE of the partitioned table, new
      rows, then `trellara snapshot` of two of the partitions, more rows and UPDATEs, the whole
      stream applied afterwards. The TRUNCATE names the partitioned table, which the target
      truncates whole: before, it emptied the copied partitions after their copy (the target
      ended without their rows, apply said caught up). Now the partitions whose copies hold it are
      kept and only the third (not copied, its old rows applied by the stream) is emptied; every
      partition equals the source's. (`--table` of the partitioned table itself, which selects
      its partitions, is run by the divergence fuzzer.)
"""
import json
import os
import select
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capture_support import CaptureFailure, TRELLARA_BIN, run_scenarios, scenario, wait_for  # noqa: E402
from harness import PG_BIN  # noqa: E402
from test_apply_robustness import FlowPair, run_apply, wait_log_covers_source  # noqa: E402

DDL = """
CREATE TABLE public.no_columns ();
CREATE TABLE public.no_identity (v int, note text);
CREATE TABLE public.by_code (id int PRIMARY KEY, code int NOT NULL, note text);
CREATE UNIQUE INDEX by_code_code ON public.by_code (code);
ALTER TABLE public.by_code REPLICA IDENTITY USING INDEX by_code_code;
CREATE TABLE public.awaited (id int PRIMARY KEY, note text);
CREATE TABLE public.renamed (id int PRIMARY KEY, v text);
CREATE TABLE public.parts (id int PRIMARY KEY, v text) PARTITION BY RANGE (id);
CREATE TABLE public.parts_lo PARTITION OF public.parts FOR VALUES FROM (MINVALUE) TO (1000);
CREATE TABLE public.parts_mid PARTITION OF public.parts FOR VALUES FROM (1000) TO (2000);
CREATE TABLE public.parts_hi PARTITION OF public.parts FOR VALUES FROM (2000) TO (MAXVALUE);
"""
SHAPES = ("public.no_columns", "public.no_identity", "public.by_code")
TABLES = SHAPES + ("public.awaited", "public.renamed", "public.parts")
PARTS = ("public.parts_lo", "public.parts_mid", "public.parts_hi")


def rows(cluster, table):
    return cluster.query(f"SELECT count(*) || ' ' || coalesce(md5(string_agg(t::text, ',' ORDER BY t::text)), '-') "
                         f"FROM ONLY {table} t")


def assert_equal(pair, label, tables=TABLES):
    differ = [t for t in tables if rows(pair.source, t) != rows(pair.target, t)]
    for table in tables:
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
    config = snapshot_config(pair)
    # The stream's rows reach the target first, so every chunk finds rows to replace: the unkeyed
    # tables' one chunk each must empty them without the DELETE the target's publication refuses.
    apply_now(pair)
    tables = run_snapshot(config, SHAPES)
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


def snapshot_config(pair):
    config = pair.config + ".snapshot.toml"
    with open(pair.config) as original, open(config, "w") as out:
        out.write(original.read() + f'\n[source]\nconninfo = "{pair.source.conninfo()}"\n')
    return config


def snapshot_command(config, tables):
    command = [TRELLARA_BIN, "snapshot", "--config", config, "--format", "json", "--chunk-rows", "1000"]
    for table in tables:
        command += ["--table", table]
    return command


def snapshot_summary(returncode, stdout, stderr):
    if returncode != 0:
        raise CaptureFailure(f"trellara snapshot exited {returncode}: {stdout[-1500:]} {stderr[-1500:]}")
    return {t["table"]: t for t in json.loads(stdout)["tables"]}


def run_snapshot(config, tables):
    result = subprocess.run(snapshot_command(config, tables), capture_output=True, text=True, timeout=300)
    return snapshot_summary(result.returncode, result.stdout, result.stderr)


def alter_system(cluster, setting, value):
    cluster.psql(f"ALTER SYSTEM SET {setting} = '{value}'" if value is not None else f"ALTER SYSTEM RESET {setting}")
    cluster.psql("SELECT pg_reload_conf()")


def read_until(process, needle, timeout_s):
    """Reads `process`'s stderr until a line holds `needle`; returns what it read, or None when the
    process ended or the time ran out first."""
    seen = ""
    deadline = time.monotonic() + timeout_s
    fd = process.stderr.fileno()
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            return None
        seen += chunk.decode(errors="replace")
        if needle in seen:
            return seen
    return None


@scenario(suite="snapshot", invariants=("a snapshot beside a commit that is logged and applied but not yet visible "
                                        "on the source waits until the source shows it, saying why",
                                        "the applied row is not lost: the target equals the source"))
def snapshot_beside_a_commit_waiting_for_a_synchronous_standby_keeps_its_row(pair):
    pair.source.query("INSERT INTO awaited SELECT g, 'a' || g FROM generate_series(1, 200) g")
    apply_now(pair)
    # Only the sessions that ask for it wait for the (absent) standby: the flow's own work does not.
    alter_system(pair.source, "synchronous_commit", "local")
    alter_system(pair.source, "synchronous_standby_names", "absent_standby")
    waiting = subprocess.Popen([os.path.join(PG_BIN, "psql"), "-X", "-q", "-c",
                                "SET synchronous_commit = on; INSERT INTO awaited VALUES (1001, 'waits for a standby')"],
                               env=pair.source.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    snapshot = None
    try:
        wait_for("the INSERT to wait for the synchronous standby", lambda: pair.source.query(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'") == "1", 60)
        if pair.source.query("SELECT count(*) FROM awaited WHERE id = 1001") != "0":
            raise CaptureFailure("the waiting INSERT is already visible on the source: the scenario is not set up")
        apply_now(pair)
        if pair.target.query("SELECT count(*) FROM awaited WHERE id = 1001") != "1":
            raise CaptureFailure("the stream did not apply the commit that waits for the standby")
        print("set up: id 1001 is committed and applied on the target, invisible on the source")
        snapshot = subprocess.Popen(snapshot_command(snapshot_config(pair), ["public.awaited"]),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        said = read_until(snapshot, "waits: source transaction", 120)
        if said is None:
            out, err = snapshot.communicate(timeout=300)
            raise CaptureFailure("the snapshot did not wait for the commit that is not visible yet (exit "
                                 f"{snapshot.returncode}; target rows with id 1001: "
                                 f"{pair.target.query('SELECT count(*) FROM awaited WHERE id = 1001')}): "
                                 f"{out.decode()[-800:]} {err.decode()[-800:]}")
        print("the snapshot waits: " + [line for line in said.splitlines() if "waits:" in line][0])
    finally:
        alter_system(pair.source, "synchronous_standby_names", None)
        alter_system(pair.source, "synchronous_commit", None)
        out, err = waiting.communicate(timeout=60)
        if waiting.returncode != 0:
            raise CaptureFailure(f"the INSERT that waited for the standby failed: {err}")
    out, err = snapshot.communicate(timeout=300)
    tables = snapshot_summary(snapshot.returncode, out.decode(), err.decode())
    print(f"snapshot: public.awaited {tables['public.awaited']['state']} {tables['public.awaited']['rows']} rows")
    apply_now(pair)
    assert_equal(pair, "after the snapshot beside the waiting commit", ("public.awaited",))
    print("ok: snapshot_beside_a_commit_waiting_for_a_synchronous_standby_keeps_its_row")


@scenario(suite="snapshot", invariants=("a change committed after every chunk's snapshot is applied without the "
                                        "copy's chunk key", "the target equals the source after the key column "
                                        "is renamed and the stream goes on"))
def a_key_column_renamed_after_the_snapshot_leaves_the_stream_running(pair):
    pair.source.query("INSERT INTO renamed SELECT g, 'v' || g FROM generate_series(1, 3000) g")
    tables = run_snapshot(snapshot_config(pair), ["public.renamed"])
    if tables["public.renamed"]["chunks"] < 2:
        raise CaptureFailure(f"public.renamed was not split into chunks: {tables['public.renamed']}")
    apply_now(pair)
    assert_equal(pair, "after the snapshot", ("public.renamed",))
    pair.source.query("ALTER TABLE renamed RENAME COLUMN id TO rid")
    pair.source.query("UPDATE renamed SET v = v || '!' WHERE rid % 7 = 0")
    pair.source.query("DELETE FROM renamed WHERE rid % 11 = 0")
    pair.source.query("INSERT INTO renamed SELECT g, 'late' FROM generate_series(3001, 3100) g")
    pair.source.query("UPDATE renamed SET rid = rid + 10000 WHERE rid BETWEEN 10 AND 20")
    apply_now(pair)
    assert_equal(pair, "after the rename and the stream", ("public.renamed",))
    print("ok: a_key_column_renamed_after_the_snapshot_leaves_the_stream_running")


def apply_now(pair):
    wait_log_covers_source(pair.source)
    result = run_apply(pair.config, 0)
    if "quarantined" in result.stdout and "quarantined=0" not in result.stdout:
        raise CaptureFailure(f"the apply quarantined: {result.stdout[-800:]}")
    return result


@scenario(suite="snapshot", invariants=("a TRUNCATE of a partitioned table that the copy of its partitions holds "
                                        "keeps the copies on the target", "every partition equals the source's",
                                        "nothing quarantined"))
def a_truncate_of_a_partitioned_table_before_the_copy_of_its_partitions_keeps_them(pair):
    pair.source.query("INSERT INTO parts SELECT g, 'old ' || g FROM generate_series(1, 2500) g")
    pair.source.query("TRUNCATE parts")
    pair.source.query("INSERT INTO parts SELECT g, 'new ' || g FROM generate_series(1, 1500) g")
    wait_log_covers_source(pair.source)
    # Two of the three partitions are copied; the stream (all of it) is applied after: the third
    # partition must still be emptied by the TRUNCATE.
    tables = run_snapshot(snapshot_config(pair), ["public.parts_lo", "public.parts_mid"])
    print("snapshot: " + ", ".join(f"{name} {t['state']} {t['rows']} rows" for name, t in sorted(tables.items())))
    pair.source.query("INSERT INTO parts SELECT g, 'later ' || g FROM generate_series(1501, 2200) g")
    pair.source.query("UPDATE parts SET v = v || '!' WHERE id % 7 = 0")
    apply_now(pair)
    assert_equal(pair, "after the snapshot and the stream", PARTS)
    if pair.target.query("SELECT count(*) FROM trellara.quarantine") != "0":
        raise CaptureFailure("the stream quarantined a transaction")
    print("ok: a_truncate_of_a_partitioned_table_before_the_copy_of_its_partitions_keeps_them")


if __name__ == "__main__":
    with FlowPair("snap-shapes", DDL, TABLES) as flow_pair:
        run_scenarios((snapshot_copies_zero_column_tables_unkeyed_tables_and_other_replica_identities,
                       snapshot_beside_a_commit_waiting_for_a_synchronous_standby_keeps_its_row,
                       a_key_column_renamed_after_the_snapshot_leaves_the_stream_running,
                       a_truncate_of_a_partitioned_table_before_the_copy_of_its_partitions_keeps_them), flow_pair)
        flow_pair.check_no_crashes()
