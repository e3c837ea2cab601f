#!/usr/bin/env python3
"""Integration: statements the applier and the snapshot build for a table reach that table only,
never its inheritance children (docs/apply.md "Inheritance and partitions").

The source changes of a parent and of its children are decoded per table: a change of the parent
is a change of the parent's own rows. On the target, `UPDATE parent`, `DELETE FROM parent`,
`TRUNCATE parent` and `SELECT ... FROM parent` also reach the children, so every such statement
must say ONLY — except for a table the target partitions, whose rows are its partitions'.

  truncate_only_parent_keeps_the_childrens_rows
      TRUNCATE ONLY of a parent on the source: the target's parent is emptied, its child keeps its
      rows (before the fix the target's children were emptied too, and apply said caught_up);
  updates_and_deletes_of_a_parent_leave_a_child_row_with_the_same_key
      a child row with the same key as a parent row (a primary key is not inherited): UPDATE ONLY
      and DELETE FROM ONLY of the parent on the source change the parent's row alone on the target;
  snapshot_copies_each_table_of_an_inheritance_tree_alone
      `trellara snapshot` of a parent and its child into an empty target schema: each table gets
      its own rows (before the fix the parent's chunks copied the child's rows into the parent and
      its range delete removed the target child's rows), then the stream applies on top;
  a_table_partitioned_on_the_target_only_still_takes_updates_deletes_and_truncates
      the control: a plain source table that the target partitions — without ONLY there — takes
      the same UPDATEs, DELETEs and a TRUNCATE.
Each compares every table with SELECT ... FROM ONLY on both sides.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capture_support import CaptureFailure, TRELLARA_BIN, run_scenarios, scenario  # noqa: E402
from test_apply_robustness import FlowPair, run_apply, wait_log_covers_source  # noqa: E402

SOURCE_DDL = """
CREATE TABLE public.parent (id int PRIMARY KEY, v text NOT NULL);
CREATE TABLE public.child (extra int) INHERITS (public.parent);
ALTER TABLE public.child ADD PRIMARY KEY (id);
CREATE TABLE public.plain (id int PRIMARY KEY, v int NOT NULL);
"""
TARGET_DDL = """
CREATE TABLE public.parent (id int PRIMARY KEY, v text NOT NULL);
CREATE TABLE public.child (extra int) INHERITS (public.parent);
ALTER TABLE public.child ADD PRIMARY KEY (id);
CREATE TABLE public.plain (id int, v int NOT NULL, PRIMARY KEY (id)) PARTITION BY RANGE (id);
CREATE TABLE public.plain_low PARTITION OF public.plain FOR VALUES FROM (MINVALUE) TO (500);
CREATE TABLE public.plain_high PARTITION OF public.plain FOR VALUES FROM (500) TO (MAXVALUE);
"""
TABLES = ("public.parent", "public.child", "public.plain")


def own_rows(cluster, table):
    # public.plain is partitioned on the target: its rows are its partitions' (no ONLY there).
    only = "" if table == "public.plain" else "ONLY "
    return cluster.query(f"SELECT count(*) || ' ' || coalesce(md5(string_agg(t::text, ',' ORDER BY t::text)), '-') "
                         f"FROM {only}{table} t")


def assert_tables_equal(pair, label):
    differ = []
    for table in TABLES:
        want, have = own_rows(pair.source, table), own_rows(pair.target, table)
        print(f"{label}: {table} (own rows): source {want}, target {have}")
        if want != have:
            differ.append(table)
    if differ:
        raise CaptureFailure(f"{label}: the target's own rows differ from the source's in {differ}")


def apply_now(pair):
    wait_log_covers_source(pair.source)
    return run_apply(pair.config, 0)


@scenario(suite="apply", invariants=("TRUNCATE ONLY of a parent leaves the children's rows on the target",
                                     "each table's own rows equal the source's"))
def truncate_only_parent_keeps_the_childrens_rows(pair):
    pair.source.query("INSERT INTO parent SELECT g, 'p' || g FROM generate_series(1, 20) g; "
                      "INSERT INTO child SELECT g, 'c' || g, g FROM generate_series(101, 130) g")
    apply_now(pair)
    assert_tables_equal(pair, "before TRUNCATE ONLY")
    pair.source.query("TRUNCATE ONLY parent")
    apply_now(pair)
    assert_tables_equal(pair, "after TRUNCATE ONLY parent")
    if pair.target.query("SELECT count(*) FROM ONLY child") != "30":
        raise CaptureFailure("the target's child lost rows to a TRUNCATE ONLY of its parent")
    print("ok: truncate_only_parent_keeps_the_childrens_rows")


@scenario(suite="apply", invariants=("an UPDATE/DELETE of a parent's row never reaches a child row with the same key",
                                     "each table's own rows equal the source's"))
def updates_and_deletes_of_a_parent_leave_a_child_row_with_the_same_key(pair):
    pair.source.query("TRUNCATE parent, child")
    pair.source.query("INSERT INTO parent SELECT g, 'p' || g FROM generate_series(1, 10) g; "
                      "INSERT INTO child SELECT g, 'c' || g, g FROM generate_series(1, 10) g")
    apply_now(pair)
    for i in range(1, 6):
        pair.source.query(f"UPDATE ONLY parent SET v = 'updated' WHERE id = {i}")
    pair.source.query("DELETE FROM ONLY parent WHERE id IN (6, 7)")
    pair.source.query("UPDATE ONLY parent SET v = v || '!'")  # a run of one shape: merged or batched
    apply_now(pair)
    assert_tables_equal(pair, "after UPDATE/DELETE ONLY parent")
    print("ok: updates_and_deletes_of_a_parent_leave_a_child_row_with_the_same_key")


@scenario(suite="apply", invariants=("a snapshot copies each table of an inheritance tree with its own rows",
                                     "the snapshot's range delete leaves the children's rows",
                                     "each table's own rows equal the source's"))
def snapshot_copies_each_table_of_an_inheritance_tree_alone(pair):
    pair.source.query("INSERT INTO parent SELECT g, 's' || g FROM generate_series(1000, 1999) g; "
                      "INSERT INTO child SELECT g, 'sc' || g, g FROM generate_series(1500, 2999) g")
    # Rows the target holds only in the child: the parent's range delete must not remove them.
    apply_now(pair)
    pair.target.query("DELETE FROM ONLY parent WHERE id >= 1000")  # the snapshot must bring them back
    with_source = pair.config + ".snapshot.toml"
    with open(pair.config) as original, open(with_source, "w") as out:
        out.write(original.read() + f'\n[source]\nconninfo = "{pair.source.conninfo()}"\n')
    result = subprocess.run([TRELLARA_BIN, "snapshot", "--config", with_source, "--format", "json", "--chunk-rows",
                             "300", "--table", "public.parent", "--table", "public.child", "--force"],
                            capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise CaptureFailure(f"trellara snapshot exited {result.returncode}: {result.stdout[-1500:]} {result.stderr[-1500:]}")
    summary = json.loads(result.stdout)
    print(f"snapshot: {summary['state']}, " + ", ".join(f"{t['table']} {t['rows']} rows" for t in summary["tables"]))
    pair.source.query("UPDATE ONLY parent SET v = v || '+' WHERE id % 100 = 0; UPDATE child SET extra = -extra WHERE id % 100 = 0")
    apply_now(pair)
    assert_tables_equal(pair, "after the snapshot and the stream")
    print("ok: snapshot_copies_each_table_of_an_inheritance_tree_alone")


@scenario(suite="apply", invariants=("a table partitioned on the target only takes UPDATE, DELETE and TRUNCATE",
                                     "each table's own rows equal the source's"))
def a_table_partitioned_on_the_target_only_still_takes_updates_deletes_and_truncates(pair):
    pair.source.query("INSERT INTO plain SELECT g, 0 FROM generate_series(1, 1000) g")
    apply_now(pair)
    for i in (3, 499, 500, 999):
        pair.source.query(f"UPDATE plain SET v = v + 1 WHERE id = {i}")
    pair.source.query("DELETE FROM plain WHERE id % 10 = 0")
    pair.source.query("UPDATE plain SET v = v + 5")
    apply_now(pair)
    assert_tables_equal(pair, "after UPDATE/DELETE of the partitioned target")
    pair.source.query("TRUNCATE plain")
    pair.source.query("INSERT INTO plain VALUES (7, 7), (700, 700)")
    apply_now(pair)
    assert_tables_equal(pair, "after TRUNCATE of the partitioned target")
    totals = pair.target.query("SELECT (SELECT count(*) FROM plain_low) || ',' || (SELECT count(*) FROM plain_high)")
    if totals != "1,1":
        raise CaptureFailure(f"the target's partitions hold {totals} rows, expected 1,1")
    print("ok: a_table_partitioned_on_the_target_only_still_takes_updates_deletes_and_truncates")


class InheritancePair(FlowPair):
    """FlowPair with a target schema of its own (the source's tree, `plain` partitioned there)."""

    def __enter__(self):
        super().__enter__()
        self.target.query("DROP TABLE public.parent, public.child, public.plain")
        self.target.psql(TARGET_DDL)
        return self


if __name__ == "__main__":
    with InheritancePair("apply-inherit", SOURCE_DDL, TABLES) as flow_pair:
        run_scenarios((truncate_only_parent_keeps_the_childrens_rows,
                       updates_and_deletes_of_a_parent_leave_a_child_row_with_the_same_key,
                       snapshot_copies_each_table_of_an_inheritance_tree_alone,
                       a_table_partitioned_on_the_target_only_still_takes_updates_deletes_and_truncates),
                      flow_pair)
        flow_pair.check_no_crashes()
