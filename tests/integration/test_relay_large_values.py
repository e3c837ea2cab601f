#!/usr/bin/env python3
"""Integration: rows of any size replicate, with real processes end to end:
source -> relay worker -> local log -> `trellara apply` -> target, verified equal.

  1. one row holding a 256 MiB text value (incompressible, so the WAL, the decoded text and the
     record are all that size): carried alone in one record (chunks are bounded by
     trellara.chunk_bytes, a larger single change travels alone; frames up to 1 GiB);
  2. one transaction of 2 000 rows of 1 MiB each (2 GiB): chunked by bytes (16 MiB chunks by
     default), never one record above the chunk bound except a single oversized change.

The relay's peak memory (VmHWM) is printed; the applier must exit 0 (caught up, nothing
quarantined) and both tables must have the same per-row digests on source and target.
Sizes can be lowered with TRELLARA_LARGE_VALUE_MIB / TRELLARA_LARGE_ROWS for a quick run.
It must never leave a cluster running.
"""

import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import CaptureFailure, log_records, worker_pid  # noqa: E402
from flow_pair import FlowPair  # noqa: E402

VALUE_MIB = int(os.environ.get("TRELLARA_LARGE_VALUE_MIB", "256"))
ROWS = int(os.environ.get("TRELLARA_LARGE_ROWS", "2000"))
SETTINGS = {"max_wal_size": "'4GB'", "logical_decoding_work_mem": "'64MB'"}
# Keep values out of TOAST compression on both sides: the test is about bytes moved.
DDL = """
CREATE TABLE huge (id int PRIMARY KEY, v text);
CREATE TABLE wide (id int PRIMARY KEY, v text);
ALTER TABLE huge ALTER COLUMN v SET STORAGE EXTERNAL;
ALTER TABLE wide ALTER COLUMN v SET STORAGE EXTERNAL;
"""


def vm_hwm_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except FileNotFoundError:
        return None
    return None


def digest(cluster, table):
    # Not the harness's table_digest: that renders each row's text, here up to 256 MiB a row.
    return cluster.query(f"SELECT count(*) || ' ' || coalesce(sum(length(v)), 0) || ' ' || "
                         f"coalesce(md5(string_agg(id || ':' || md5(v), ',' ORDER BY id)), '-') FROM {table}")


def run_apply(pair, what):
    print(f"apply of {what}")
    result = pair.apply(timeout_s=900)
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # largest child so far
    print(f"apply of {what}: {result.seconds:.1f}s; largest child process so far (the appliers): {peak_kib} KiB")


def rows_of_any_size_replicate():
    with FlowPair("large", DDL, tables=("huge", "wide"), source_settings=SETTINGS, shared_work_dir=True,
                  target_preload=True) as pair:
        source, target, log_dir = pair.source, pair.target, pair.log_dir
        pid = worker_pid(source)

        # 1. One value of VALUE_MIB MiB (32-byte md5 pieces: incompressible text).
        started = time.monotonic()
        source.query(f"INSERT INTO huge SELECT 1, string_agg(md5(g::text), '') "
                     f"FROM generate_series(1, {VALUE_MIB * 32768}) g")
        print(f"huge: one {VALUE_MIB} MiB value inserted in {time.monotonic() - started:.1f}s")
        print(f"huge: waiting for the log to cover the {VALUE_MIB} MiB value")
        seconds = pair.wait_log_covers_source(timeout_s=600, fail_on_error=True)
        print(f"huge: relay made it durable in {seconds:.1f}s; relay VmHWM {vm_hwm_kib(pid)} KiB")
        records = [r["type"] for r in log_records(log_dir) if r["type"] in ("envelope", "chunk")]
        print(f"huge: the log holds {records} (the value travels alone in one record)")
        run_apply(pair, f"the {VALUE_MIB} MiB value")
        want, have = digest(source, "huge"), digest(target, "huge")
        print(f"huge: source {want}\nhuge: target {have}")
        if want != have:
            raise CaptureFailure(f"the {VALUE_MIB} MiB value differs: source {want}, target {have}")

        # 2. One transaction of ROWS rows of 1 MiB each.
        started = time.monotonic()
        source.query("CREATE TEMP TABLE piece AS SELECT string_agg(md5(g::text), '') AS s "
                     "FROM generate_series(1, 32767) g; "
                     f"INSERT INTO wide SELECT i, lpad(i::text, 32, '0') || s FROM piece, generate_series(1, {ROWS}) i")
        print(f"wide: {ROWS} rows of 1 MiB in one transaction inserted in {time.monotonic() - started:.1f}s")
        print(f"wide: waiting for the log to cover {ROWS} rows of 1 MiB")
        seconds = pair.wait_log_covers_source(timeout_s=900, fail_on_error=True)
        print(f"wide: relay made it durable in {seconds:.1f}s; relay VmHWM {vm_hwm_kib(pid)} KiB")
        run_apply(pair, f"{ROWS} rows of 1 MiB")
        want, have = digest(source, "wide"), digest(target, "wide")
        print(f"wide: source {want}\nwide: target {have}")
        if want != have:
            raise CaptureFailure(f"the {ROWS} rows of 1 MiB differ: source {want}, target {have}")
        status = source.query("SELECT state || ' ' || consecutive_failures FROM trellara.status()")
        if status != "running 0":
            raise CaptureFailure(f"relay status after the large transactions is {status!r}, expected running 0")
        pair.check_no_crashes()
    print("OK rows_of_any_size_replicate")


if __name__ == "__main__":
    rows_of_any_size_replicate()
