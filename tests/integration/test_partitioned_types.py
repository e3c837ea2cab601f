#!/usr/bin/env python3
"""Integration: a partitioned flow (docs/partitioned.md) carries every capturable column type, with
its modifiers, exactly — through the partition appliers' staging and the publisher's merged batch
path — and keeps going when the target server restarts under it.

  every_capturable_type_survives_partitioned_apply_and_a_target_restart
      the every-type tables of test_apply_type_modifiers.py (75 scalar, range, multirange, enum and
      domain columns keyed by id; 17 arrays, composites and vectors; all of them in a table without a
      key, REPLICA IDENTITY FULL) on a flow partitioned into 3. Three partition appliers and the
      publisher run as daemons while the source commits one-row INSERTs, UPDATEs of every column and
      DELETEs (small transactions: the publisher merges them into grouped batches), rows that differ
      only where the type's `=` does not look, changed by full-row match (numeric 7.5 / 7.50, -0,
      interval 24 hours / 1 day, jsonb, box, point, xml), and a chunked transaction of 1 600 + 1 200
      rows (the chunk-at-a-time path). Half-way the target server restarts immediately (crash
      recovery); the daemons must keep running and finish. Then: every table equals the source row
      by row (md5 of each row's text), nothing quarantined, verify passes, no staged chunk left, no
      commit applied twice, and `trellara run --local --verify` agrees (exit 0).
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capture_support import TRELLARA_BIN, CaptureFailure, run_scenarios, scenario  # noqa: E402
from flow_pair import FlowPair, table_digest  # noqa: E402
from test_apply_type_modifiers import (EVERY_COLUMNS, EVERY_DDL, EVERY_TABLES, NEAR_TWINS, insert_rows,  # noqa: E402
                                       update_row)
from test_partitioned import Proc, check_exact  # noqa: E402
import every_type  # noqa: E402

PARTITIONS = 3
FULL_COLUMNS = [("tag", "int", "g")] + EVERY_COLUMNS["every_full"]


def converge(pair, procs, timeout_s=300):
    """Until every table's digest on the target equals the source's. A daemon that exited or a
    quarantined transaction ends the wait at once (neither goes away by waiting)."""
    pair.wait_log_covers_source()
    expected = {t: table_digest(pair.source, t) for t in EVERY_TABLES}
    deadline = time.monotonic() + timeout_s
    while True:
        for proc in procs:
            if not proc.running():
                raise CaptureFailure(f"{proc.name} exited {proc.process.returncode}: {proc.stderr()[-2500:]}")
        quarantined = pair.target.query("SELECT count(*) FROM trellara.quarantine")
        if quarantined != "0":
            raise CaptureFailure(f"{quarantined} transaction(s) quarantined: " + pair.target.query(
                "SELECT string_agg(reason || ': ' || coalesce(detail, ''), '; ') FROM trellara.quarantine")[:2000])
        differing = [t for t in EVERY_TABLES if table_digest(pair.target, t) != expected[t]]
        if not differing:
            return
        if time.monotonic() > deadline:
            raise CaptureFailure(f"after {timeout_s}s the target still differs from the source in {differing}: " +
                                 "; ".join(f"{t}: source {expected[t]}, target {table_digest(pair.target, t)}"
                                           for t in differing))
        time.sleep(0.3)


def workload_small(pair, first, last):
    """One-row transactions: INSERTs in every table, UPDATEs of every column, DELETEs."""
    for g in range(first, last + 1):
        pair.source.query("; ".join(insert_rows(t, g, g) for t in ("every_scalar", "every_compound")) +
                          f"; INSERT INTO every_full SELECT {every_type.values_sql(FULL_COLUMNS)} "
                          f"FROM generate_series({g}, {g}) g")
    for key in range(first, first + (last - first) // 2):
        pair.source.query(update_row("every_scalar", key, key + 500))
        pair.source.query(update_row("every_compound", key, key + 700))
    pair.source.query(f"DELETE FROM every_scalar WHERE id = {first + 1}; DELETE FROM every_compound WHERE id = {first + 2}; "
                      f"DELETE FROM every_full WHERE c_int4 IS NOT NULL AND ctid = (SELECT min(ctid) FROM every_full)")


@scenario(suite="apply", invariants=(
    "every capturable type, with modifiers, equals the source's after partition appliers and the publisher "
    "(merged batches and chunked transactions)",
    "full-row matches of rows `=` takes for equal change the row the source changed",
    "partition appliers and the publisher keep running through an immediate restart of the target",
    "nothing quarantined, no staged chunk left, no commit applied twice, run --local --verify exits 0"))
def every_capturable_type_survives_partitioned_apply_and_a_target_restart():
    with FlowPair("partitioned-every-type", source_sql=EVERY_DDL, tables=EVERY_TABLES) as pair:
        pair.source.query("ALTER SYSTEM SET trellara.chunk_changes = 1024")
        pair.source.query("SELECT pg_reload_conf()")
        pair.source.query(f"SELECT trellara.set_partitioning('{pair.flow}', 'partitioned', {PARTITIONS})")
        pair.source.query(f"SELECT trellara.stop_flow('{pair.flow}')")
        pair.source.query(f"SELECT trellara.start_flow('{pair.flow}')")
        procs = [Proc(pair, k) for k in range(PARTITIONS)] + [Proc(pair)]
        for proc in procs:
            proc.start()
        try:
            workload_small(pair, 1, 30)
            for i, (column, first, second) in enumerate(NEAR_TWINS):
                for value in (first, second):
                    pair.source.query(f"INSERT INTO every_full SELECT "
                                      f"{every_type.values_sql(FULL_COLUMNS, {'tag': str(200 + i), column: value})} "
                                      f"FROM (SELECT 5 AS g) s")
            converge(pair, procs)
            print("converged after the small transactions and the near twins")

            old = pair.target.restart_immediate()
            print(f"target restarted immediately (postmaster {old} -> {pair.target.pid})")
            for i, (column, _first, second) in enumerate(NEAR_TWINS):
                pair.source.query(f"UPDATE every_full SET c_int4 = -{i} WHERE tag = {200 + i} AND "
                                  f"{column}::text = ({second})::text")
            workload_small(pair, 41, 70)
            pair.source.query("BEGIN; " + insert_rows("every_scalar", 1001, 2600) + "; " +
                              insert_rows("every_compound", 1001, 2200) + "; COMMIT")
            pair.source.query("BEGIN; UPDATE every_scalar t SET (" + ", ".join(c for c, _, _ in every_type.SCALARS) +
                              ") = (SELECT " + every_type.values_sql(every_type.SCALARS) +
                              " FROM (SELECT t.id + 7 AS g) s) WHERE id > 1000; "
                              "DELETE FROM every_compound WHERE id % 19 = 0; COMMIT")
            for i, (column, _first, second) in enumerate(NEAR_TWINS):
                pair.source.query(f"DELETE FROM every_full WHERE tag = {200 + i} AND {column}::text = ({second})::text")
            converge(pair, procs)
            print("converged after the target restart, the chunked transactions and the full-row DELETEs")
        finally:
            for proc in procs:
                proc.stop()
        check_exact(pair, None, "after the partition appliers and the publisher stopped")
        chunked = pair.target.query("SELECT count(*) FROM every_scalar WHERE id > 1000")
        if chunked != "1600":
            raise CaptureFailure(f"the chunked transaction's rows on the target: {chunked}, expected 1600")
        verify = subprocess.run([TRELLARA_BIN, "run", "--local", "--verify", "--config", pair.config, "--timeout", "300"],
                                capture_output=True, text=True, timeout=600)
        if verify.returncode != 0 or "the target equals the source" not in verify.stdout:
            raise CaptureFailure(f"run --local --verify exited {verify.returncode}: {verify.stdout[-1500:]} "
                                 f"{verify.stderr[-1500:]}")
        pair.check_no_crashes()
        print("ok: every_capturable_type_survives_partitioned_apply_and_a_target_restart")


if __name__ == "__main__":
    run_scenarios([every_capturable_type_survives_partitioned_apply_and_a_target_restart])
