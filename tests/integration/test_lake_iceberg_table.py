#!/usr/bin/env python3
"""Integration: a whole lake table (Parquet data files, Avro manifests and manifest lists, and the
metadata files core's TableMetadataJson writes) is read back from its metadata file by independent
readers (tests/lake/read_iceberg.mjs: npm avsc + hyparquet, then npm icebird), never by our code.

The table is written by build/bin/trellara_parquet_probe --table (core's writers driven by a JSON
spec, laid out as the fan-in lays out its tables, without the fan-in): snapshot i adds one data
file with its own manifest, its manifest list names the manifests of snapshots 0..i, and
v<i+1>.metadata.json is the table after it, its metadata-log naming the earlier metadata files.

  lake_iceberg_table_snapshots_read_back_exactly
      Three append snapshots of every column type (nulls in every column, a 63-bit snapshot id,
      ZSTD, several row groups). Read from each metadata file in turn, the table holds exactly the
      rows of the snapshots up to it, in order, value for value; the current snapshot's summary is
      what the probe wrote (operation, added and total files/records/bytes, its own trellara.*
      keys); parents chain to the previous snapshot and sequence numbers run 1, 2, 3; every data
      file is listed with its size on disk, its snapshot and sequence number; the metadata-log
      names the previous metadata files; icebird reads the same rows.
  lake_iceberg_table_reader_fails_on_broken_tables
      A two-snapshot table reads back; then, one at a time (each undone before the next): a data
      file cut short, a manifest list naming a manifest that is missing, a metadata file whose
      current snapshot points at the previous snapshot's manifest list, a manifest whose length is
      not what the list says. Each makes the reader fail naming the file, and prints no table.

It starts no server. It needs node and npm (readers installed as test_lake_parquet.py does).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from decimal import Decimal, localcontext

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import CaptureFailure, run_scenarios, scenario  # noqa: E402
from test_lake_parquet import EVERY_TYPE, PROBE, READERS_DIR, ensure_readers, float_value  # noqa: E402

READ_ICEBERG = os.path.join(READERS_DIR, "read_iceberg.mjs")
TABLE_UUID = "5f0c2b8e-7d41-4a6b-9e3f-1c2d3e4f5a6b"
# The fan-in's ids are 63-bit (core SnapshotIdOf): one above 2^53 checks they are read exactly.
SNAPSHOT_IDS = [4_611_686_018_427_387_905, 7_000_000_000_000_000_123, 42]
TIMESTAMPS_MS = [1_700_000_000_000, 1_700_000_060_000, 1_700_000_120_000]

SNAPSHOT_ROWS = [
    [
        [True, 1, 2, 0.5, 1.25, "12.34", "-99.0001", "1.0000000001", 19_700, 0, 1_700_000_000_000_000,
         1_700_000_000_000_001, "store-7", {"hex": "00ff10"}, "123e4567-e89b-12d3-a456-426614174000"],
        [False, -7, -3_000_000_000, -1.5, -2.75, "-0.01", "0.0000", "-12345678901234567890.1234567891", -1,
         86_399_999_999, -1, 0, "ünïcödé €", {"hex": ""}, "ffffffff-ffff-ffff-ffff-ffffffffffff"],
        [None] * 15,
    ],
    [
        [None, 2_147_483_647, 9_007_199_254_740_993, "NaN", "Infinity", "9999999.99", None, "0.5", 0, None,
         1_700_000_000_123_456, -1_000_001, "", {"hex": "deadbeef"}, None],
    ],
    [[True, -2_147_483_648, -9_223_372_036_854_775_808, 3.25, "-Infinity", "-0.07", "123.4567",
      "99999999999999999999999999.9999999999", -719_162, 1, 253_402_300_799_999_999, 1_234_567, "x" * 300,
      None, "00000000-0000-0000-0000-000000000001"]] +
    [[i % 2 == 0, i, i * 1_000_000_007, None, i / 8, f"{i}.01", None, None, 20_000 + i, i * 1_000, None,
      1_700_000_000_000_000 + i, f"row {i}", None, None] for i in range(20)],
]


def expected_value(column, value):
    """The value as read_iceberg.mjs prints it (see its header)."""
    kind = column["type"]
    if value is None:
        return None
    if kind in ("float", "double"):
        if isinstance(value, str):
            return value  # NaN, Infinity, -Infinity
        return float_value(value, kind == "float")
    if kind == "decimal":
        with localcontext() as context:
            context.prec = 100  # the default 28 digits would round decimal(38) values
            return str(Decimal(value).quantize(Decimal(1).scaleb(-column["scale"])))
    if kind == "binary":
        return {"hex": value["hex"]}
    if kind == "uuid":
        return value.lower()
    return value


def expected_rows(columns, rows):
    return [{c["name"]: expected_value(c, v) for c, v in zip(columns, row)} for row in rows]


def write_table(workdir, snapshots_rows, summaries):
    """The probe's table in workdir/table; returns the probe's report."""
    ensure_readers()
    spec = {"table_uuid": TABLE_UUID, "compression": "zstd", "row_group_rows_max": 8, "columns": EVERY_TYPE,
            "properties": {"trellara.lake": "probe"},
            "snapshots": [{"snapshot_id": SNAPSHOT_IDS[i], "timestamp_ms": TIMESTAMPS_MS[i], "rows": rows,
                           "summary": summaries[i]} for i, rows in enumerate(snapshots_rows)]}
    spec_path = os.path.join(workdir, "table.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    done = subprocess.run([PROBE, "--table", spec_path, os.path.join(workdir, "table")], capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise CaptureFailure(f"the probe failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


def read_table(metadata_path):
    """(returncode, parsed stdout or None, stderr)."""
    done = subprocess.run(["node", READ_ICEBERG, metadata_path], capture_output=True, text=True)
    return done.returncode, (json.loads(done.stdout) if done.returncode == 0 else None), done.stderr.strip()


def must_read(metadata_path):
    code, table, stderr = read_table(metadata_path)
    if code != 0:
        raise CaptureFailure(f"read_iceberg.mjs could not read {metadata_path}: {stderr[-3000:]}")
    table["stderr"] = stderr  # where icebird's disagreements are told
    return table


def must_fail(metadata_path, what, names):
    code, table, stderr = read_table(metadata_path)
    if code == 0:
        raise CaptureFailure(f"{what}: the reader read the table ({len(table['rows'])} rows) instead of failing")
    if names not in stderr:
        raise CaptureFailure(f"{what}: the reader failed without naming {names}: {stderr[-2000:]}")
    print(f"{what}: the reader fails: {stderr.splitlines()[-1][:200]}")


@scenario(suite="lake", invariants=(
    "every row of every snapshot reads back exactly from the table's metadata file (avsc + hyparquet)",
    "the current snapshot's summary is what the writer put there",
    "snapshot parents and sequence numbers chain; the metadata-log names the previous metadata files",
    "an independent Iceberg reader (icebird) reads the same rows"))
def lake_iceberg_table_snapshots_read_back_exactly():
    workdir = tempfile.mkdtemp(prefix="trellara-lake-")
    try:
        summaries = [{"trellara.epoch": f"epoch-{i}", "trellara.stores": "{store-1,store-2}"} for i in range(3)]
        probe = write_table(workdir, SNAPSHOT_ROWS, summaries)
        for n, metadata_path in enumerate(probe["metadata"], start=1):
            table = must_read(metadata_path)
            want_rows = expected_rows(EVERY_TYPE, [row for rows in SNAPSHOT_ROWS[:n] for row in rows])
            if table["rows"] != want_rows:
                for i, (got, want) in enumerate(zip(table["rows"], want_rows)):
                    if got != want:
                        raise CaptureFailure(f"v{n}: row {i} read back as {got}, written {want}")
                raise CaptureFailure(f"v{n}: {len(table['rows'])} rows read back, {len(want_rows)} written")
            if (table["format_version"], table["table_uuid"], table["current_snapshot_id"]) != \
                    (2, TABLE_UUID, SNAPSHOT_IDS[n - 1]):
                raise CaptureFailure(f"v{n}: format {table['format_version']}, uuid {table['table_uuid']}, current "
                                     f"snapshot {table['current_snapshot_id']}")
            want_schema = [{"id": c["field_id"], "name": c["name"], "required": c["required"],
                            "type": f"decimal({c['precision']}, {c['scale']})" if c["type"] == "decimal"
                            else c["type"]} for c in EVERY_TYPE]
            if table["schema"] != want_schema:
                raise CaptureFailure(f"v{n}: schema {table['schema']}")
            snapshots = table["snapshots"]
            for i, s in enumerate(snapshots):
                want = (SNAPSHOT_IDS[i], SNAPSHOT_IDS[i - 1] if i else None, i + 1, probe["snapshots"][i]["manifest_list"])
                got = (s["snapshot_id"], s["parent_snapshot_id"], s["sequence_number"], s["manifest_list"])
                if got != want:
                    raise CaptureFailure(f"v{n}: snapshot {i} is (id, parent, sequence, list) {got}, expected {want}")
            if len(snapshots) != n:
                raise CaptureFailure(f"v{n}: {len(snapshots)} snapshots")
            written = probe["snapshots"][:n]
            want_summary = {"operation": "append", "added-data-files": "1",
                            "added-records": str(written[-1]["record_count"]),
                            "added-files-size": str(written[-1]["file_size_bytes"]),
                            "total-data-files": str(n), "total-records": str(sum(s["record_count"] for s in written)),
                            "total-files-size": str(sum(s["file_size_bytes"] for s in written)), **summaries[n - 1]}
            if snapshots[-1]["summary"] != want_summary or probe["snapshots"][n - 1]["summary"] != want_summary:
                raise CaptureFailure(f"v{n}: current summary {snapshots[-1]['summary']}, expected {want_summary}")
            want_files = [{"path": s["data_file"], "record_count": len(SNAPSHOT_ROWS[i]),
                           "file_size_in_bytes": os.path.getsize(s["data_file"]), "sequence_number": i + 1,
                           "snapshot_id": SNAPSHOT_IDS[i]} for i, s in enumerate(written)]
            if table["data_files"] != want_files:
                raise CaptureFailure(f"v{n}: data files {table['data_files']}, expected {want_files}")
            if table.get("icebird_error") or table.get("icebird_rows") != len(want_rows) \
                    or table.get("icebird_agrees") is not True:
                raise CaptureFailure(f"v{n}: icebird read {table.get('icebird_rows')} rows, agrees "
                                     f"{table.get('icebird_agrees')}, error {table.get('icebird_error')}: {table['stderr'][-2000:]}")
            with open(metadata_path) as f:  # Python's json keeps 64-bit integers exact
                metadata = json.load(f)
            log = [e["metadata-file"] for e in metadata["metadata-log"]]
            if log != probe["metadata"][:n - 1]:
                raise CaptureFailure(f"v{n}: metadata-log {log}, expected {probe['metadata'][:n - 1]}")
            if metadata["last-sequence-number"] != n or metadata["refs"]["main"]["snapshot-id"] != SNAPSHOT_IDS[n - 1]:
                raise CaptureFailure(f"v{n}: last-sequence-number {metadata['last-sequence-number']}, main "
                                     f"{metadata['refs']['main']}")
            print(f"v{n}.metadata.json: {n} snapshots, {len(want_rows)} rows of {len(EVERY_TYPE)} columns read back "
                  f"exactly (avsc + hyparquet; icebird agrees), summary and chain as written")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@scenario(suite="lake", invariants=(
    "the table reader fails, naming the file, on a data file cut short",
    "it fails on a manifest list naming a missing manifest, or a manifest of another length",
    "it fails on a metadata file whose current snapshot points at another snapshot's manifest list"))
def lake_iceberg_table_reader_fails_on_broken_tables():
    workdir = tempfile.mkdtemp(prefix="trellara-lake-")
    try:
        probe = write_table(workdir, SNAPSHOT_ROWS[:2], [{}, {"trellara.epoch": "epoch-1"}])
        current = probe["metadata"][-1]
        if len(must_read(current)["rows"]) != len(SNAPSHOT_ROWS[0]) + len(SNAPSHOT_ROWS[1]):
            raise CaptureFailure("the intact table did not read back whole")

        data_file = probe["snapshots"][0]["data_file"]
        with open(data_file, "rb") as f:
            whole = f.read()
        with open(data_file, "wb") as f:
            f.write(whole[:-100])
        must_fail(current, "a data file cut short by 100 bytes", data_file)
        with open(data_file, "wb") as f:
            f.write(whole)

        manifest = probe["snapshots"][0]["manifest"]
        os.rename(manifest, manifest + ".away")
        must_fail(current, "a manifest list naming a missing manifest", manifest)
        os.rename(manifest + ".away", manifest)

        with open(manifest, "rb") as f:
            manifest_bytes = f.read()
        with open(manifest, "ab") as f:
            f.write(b"\0")
        must_fail(current, "a manifest one byte longer than its manifest list says", manifest)
        with open(manifest, "wb") as f:
            f.write(manifest_bytes)

        with open(current) as f:
            metadata = json.load(f)
        metadata["snapshots"][-1]["manifest-list"] = probe["snapshots"][0]["manifest_list"]
        wrong = os.path.join(os.path.dirname(current), "v3.metadata.json")
        with open(wrong, "w") as f:
            json.dump(metadata, f)
        must_fail(wrong, "a current snapshot pointing at its parent's manifest list", str(SNAPSHOT_IDS[0]))

        if len(must_read(current)["rows"]) != len(SNAPSHOT_ROWS[0]) + len(SNAPSHOT_ROWS[1]):
            raise CaptureFailure("the table did not read back whole once repaired")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    if not os.path.exists(PROBE):
        raise SystemExit(f"{PROBE} is missing: build it (cmake --build build --target trellara_parquet_probe)")
    run_scenarios([lake_iceberg_table_snapshots_read_back_exactly, lake_iceberg_table_reader_fails_on_broken_tables])
