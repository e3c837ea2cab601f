#!/usr/bin/env python3
"""Integration: the lake's Iceberg manifest and manifest list (Avro container files, objects encoded
with libavro) are read back by an independent reader, npm avsc (tests/lake/read_avro.mjs), and say
exactly what the spec requires about the Parquet file they list.

  lake_iceberg_manifest_read_by_avsc
      A Parquet file of every column type is written with its manifest. avsc decodes the manifest
      (header, blocks, sync markers, every object against the writer's schema); the header carries
      Iceberg's metadata (the table schema as this script derives it from the columns, schema-id,
      partition-spec, partition-spec-id, format-version 2, content data); every field of the
      writer's schema carries the field id of Iceberg's spec; the one entry is ADDED by the
      snapshot (a 63-bit id), inherits its sequence numbers, and its data_file holds the file's
      path, format, record count, size on disk, split offsets (where hyparquet finds the row groups)
      and per-field sizes, value/null/NaN counts and bounds in Iceberg's single-value serialization
      computed here from the written values.
  lake_iceberg_manifest_list_read_by_avsc
      The manifest list of that snapshot: snapshot-id, parent-snapshot-id, sequence-number and
      format-version in the header; one manifest_file with the manifest's path and length on disk,
      spec 0, data content, the sequence numbers, the adding snapshot, 1 added file and its rows,
      an empty partition summary; every field id as the spec gives it.

It starts no server. It needs node and npm (readers installed as test_lake_parquet.py does).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import CaptureFailure, run_scenarios, scenario  # noqa: E402
from test_lake_parquet import (EVERY_TYPE, PROBE, READERS_DIR, ensure_readers, extremes,  # noqa: E402
                               iceberg_single_value, read_back)

READ_AVRO = os.path.join(READERS_DIR, "read_avro.mjs")
SNAPSHOT_ID = 8_765_432_109_876_543_210 // 2  # above 2^53: exact only if longs are read as such
PARENT_SNAPSHOT_ID = 17
SEQUENCE_NUMBER = 42

# Iceberg spec, "Manifests" and "Manifest Lists" (format version 2): field ids by field name.
MANIFEST_ENTRY_IDS = {"status": 0, "snapshot_id": 1, "sequence_number": 3, "file_sequence_number": 4,
                      "data_file": 2}
DATA_FILE_IDS = {"content": 134, "file_path": 100, "file_format": 101, "partition": 102, "record_count": 103,
                 "file_size_in_bytes": 104, "column_sizes": 108, "value_counts": 109, "null_value_counts": 110,
                 "nan_value_counts": 137, "lower_bounds": 125, "upper_bounds": 128, "key_metadata": 131,
                 "split_offsets": 132, "equality_ids": 135, "sort_order_id": 140}
MAP_KEY_VALUE_IDS = {"column_sizes": (117, 118), "value_counts": (119, 120), "null_value_counts": (121, 122),
                     "nan_value_counts": (138, 139), "lower_bounds": (126, 127), "upper_bounds": (129, 130)}
MANIFEST_FILE_IDS = {"manifest_path": 500, "manifest_length": 501, "partition_spec_id": 502, "content": 517,
                     "sequence_number": 515, "min_sequence_number": 516, "added_snapshot_id": 503,
                     "added_files_count": 504, "existing_files_count": 505, "deleted_files_count": 506,
                     "added_rows_count": 512, "existing_rows_count": 513, "deleted_rows_count": 514,
                     "partitions": 507, "key_metadata": 519}
FIELD_SUMMARY_IDS = {"contains_null": 509, "contains_nan": 518, "lower_bound": 510, "upper_bound": 511}

ROWS = [
    [True, 1, 2, 0.5, 1.25, "12.34", "-99.0001", "1.0000000001", 19_700, 0, 1_700_000_000_000_000,
     1_700_000_000_000_001, "store-7", {"hex": "00ff10"}, "123e4567-e89b-12d3-a456-426614174000"],
    [False, -7, -3_000_000_000, "NaN", -2.75, "-0.01", "0.0000", "-12345678901234567890.1234567891", -1,
     86_399_999_999, -1, 0, "ünïcödé €", {"hex": ""}, "ffffffff-ffff-ffff-ffff-ffffffffffff"],
    [None] * 15,
]


def read_avro(path):
    done = subprocess.run(["node", READ_AVRO, path], capture_output=True, text=True)
    if done.returncode != 0:
        raise CaptureFailure(f"avsc could not read {path}: {done.stderr.strip()[-3000:]}")
    return json.loads(done.stdout)


def check_field_ids(fields, want, where):
    got = {field["name"]: field.get("field-id") for field in fields}
    if got != want:
        raise CaptureFailure(f"{where}: field ids {got}, Iceberg's spec gives {want}")


def write_files(workdir):
    """The Parquet file, its manifest and manifest list; returns (spec, metrics, paths)."""
    ensure_readers()
    spec = {"compression": "zstd", "row_group_rows_max": 2, "columns": EVERY_TYPE, "rows": ROWS,
            "snapshot_id": SNAPSHOT_ID, "parent_snapshot_id": PARENT_SNAPSHOT_ID, "sequence_number": SEQUENCE_NUMBER}
    paths = {kind: os.path.join(workdir, name) for kind, name in
             (("spec", "spec.json"), ("data", "data.parquet"), ("manifest", "m0.avro"), ("list", "snap.avro"))}
    spec["file_path"] = paths["data"]
    with open(paths["spec"], "w") as f:
        json.dump(spec, f)
    done = subprocess.run([PROBE, paths["spec"], paths["data"], paths["manifest"], paths["list"]],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise CaptureFailure(f"the probe failed: {done.stderr.strip()}")
    return spec, json.loads(done.stdout), paths


def iceberg_schema(columns):
    def type_of(c):
        return f"decimal({c['precision']}, {c['scale']})" if c["type"] == "decimal" else c["type"]
    return {"type": "struct", "schema-id": 0,
            "fields": [{"id": c["field_id"], "name": c["name"], "required": c["required"], "type": type_of(c)}
                       for c in columns]}


def as_map(entries):
    """An Iceberg map as avsc decodes it (array of key/value records) -> {key: value}."""
    return {entry["key"]: entry["value"] for entry in entries}


@scenario(suite="lake", invariants=(
    "an independent Avro reader (avsc) decodes the manifest; the header carries Iceberg's metadata",
    "every field of the manifest's Avro schema has the field id of Iceberg's spec",
    "the manifest entry's counts, sizes, split offsets and bounds are exact for the data file"))
def lake_iceberg_manifest_read_by_avsc():
    workdir = tempfile.mkdtemp(prefix="trellara-lake-")
    try:
        spec, metrics, paths = write_files(workdir)
        read = read_avro(paths["manifest"])
        meta = read["meta"]
        if read["codec"] != "null":
            raise CaptureFailure(f"manifest codec {read['codec']}")
        want_meta = {"schema-id": "0", "partition-spec": "[]", "partition-spec-id": "0", "format-version": "2",
                     "content": "data"}
        for key, value in want_meta.items():
            if meta.get(key) != value:
                raise CaptureFailure(f"manifest metadata {key} = {meta.get(key)!r}, expected {value!r}")
        if json.loads(meta["schema"]) != iceberg_schema(spec["columns"]):
            raise CaptureFailure(f"manifest metadata schema {meta['schema']}")

        entry_fields = read["writer_schema"]["fields"]
        check_field_ids(entry_fields, MANIFEST_ENTRY_IDS, "manifest_entry")
        data_file_schema = next(f for f in entry_fields if f["name"] == "data_file")["type"]
        check_field_ids(data_file_schema["fields"], DATA_FILE_IDS, "data_file")
        for field in data_file_schema["fields"]:
            if field["name"] in MAP_KEY_VALUE_IDS:
                array = field["type"][1]
                got = tuple(f["field-id"] for f in array["items"]["fields"])
                if array.get("logicalType") != "map" or got != MAP_KEY_VALUE_IDS[field["name"]]:
                    raise CaptureFailure(f"data_file.{field['name']}: key/value ids {got}, logicalType "
                                         f"{array.get('logicalType')}")
            if field["name"] == "split_offsets" and field["type"][1].get("element-id") != 133:
                raise CaptureFailure(f"split_offsets element id {field['type'][1].get('element-id')}")

        if len(read["records"]) != 1:
            raise CaptureFailure(f"{len(read['records'])} manifest entries, expected 1")
        entry = read["records"][0]
        if (entry["status"], entry["snapshot_id"], entry["sequence_number"], entry["file_sequence_number"]) != \
                (1, str(SNAPSHOT_ID), None, None):
            raise CaptureFailure(f"manifest entry header {entry}")
        data_file = entry["data_file"]
        rows, columns = spec["rows"], spec["columns"]
        row_group_starts = [int(g["columns"][0]["data_page_offset"]["bigint"])
                            for g in read_back(paths["data"])["footer"]["row_groups"]]
        want = {"content": 0, "file_path": paths["data"], "file_format": "PARQUET", "partition": {},
                "record_count": str(len(rows)), "file_size_in_bytes": str(os.path.getsize(paths["data"])),
                "key_metadata": None, "split_offsets": [str(o) for o in row_group_starts], "equality_ids": None,
                "sort_order_id": None}
        for key, value in want.items():
            if data_file[key] != value:
                raise CaptureFailure(f"data_file.{key} = {data_file[key]!r}, expected {value!r}")

        want_sizes = {m["field_id"]: str(m["column_size_bytes"]) for m in metrics["columns"]}
        if as_map(data_file["column_sizes"]) != want_sizes:
            raise CaptureFailure(f"column_sizes {data_file['column_sizes']}, the writer said {want_sizes}")
        values, nulls, nans, lower, upper = {}, {}, {}, {}, {}
        for c, column in enumerate(columns):
            cells = [row[c] for row in rows]
            fid = column["field_id"]
            values[fid] = str(len(rows))
            nulls[fid] = str(sum(v is None for v in cells))
            if column["type"] in ("float", "double"):
                nans[fid] = str(sum(v == "NaN" for v in cells))
            low, high = extremes(column, cells)
            if low is not None:
                lower[fid] = {"hex": iceberg_single_value(column, low).hex()}
                upper[fid] = {"hex": iceberg_single_value(column, high).hex()}
        for name, expected in (("value_counts", values), ("null_value_counts", nulls), ("nan_value_counts", nans),
                               ("lower_bounds", lower), ("upper_bounds", upper)):
            if as_map(data_file[name]) != expected:
                raise CaptureFailure(f"data_file.{name} = {as_map(data_file[name])}, expected {expected}")
        print(f"manifest: {os.path.getsize(paths['manifest'])} bytes, read by avsc, 1 entry for "
              f"{len(rows)} rows of {len(columns)} columns, every metric exact")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@scenario(suite="lake", invariants=(
    "an independent Avro reader (avsc) decodes the manifest list; the header carries the snapshot's metadata",
    "the manifest_file entry names the manifest's path and length and the snapshot's counts exactly"))
def lake_iceberg_manifest_list_read_by_avsc():
    workdir = tempfile.mkdtemp(prefix="trellara-lake-")
    try:
        spec, metrics, paths = write_files(workdir)
        read = read_avro(paths["list"])
        want_meta = {"snapshot-id": str(SNAPSHOT_ID), "parent-snapshot-id": str(PARENT_SNAPSHOT_ID),
                     "sequence-number": str(SEQUENCE_NUMBER), "format-version": "2"}
        for key, value in want_meta.items():
            if read["meta"].get(key) != value:
                raise CaptureFailure(f"manifest list metadata {key} = {read['meta'].get(key)!r}, expected {value!r}")
        fields = read["writer_schema"]["fields"]
        check_field_ids(fields, MANIFEST_FILE_IDS, "manifest_file")
        partitions = next(f for f in fields if f["name"] == "partitions")["type"][1]
        if partitions.get("element-id") != 508:
            raise CaptureFailure(f"partitions element id {partitions.get('element-id')}")
        check_field_ids(partitions["items"]["fields"], FIELD_SUMMARY_IDS, "field_summary")
        if len(read["records"]) != 1:
            raise CaptureFailure(f"{len(read['records'])} manifest_file entries, expected 1")
        want = {"manifest_path": paths["manifest"], "manifest_length": str(os.path.getsize(paths["manifest"])),
                "partition_spec_id": 0, "content": 0, "sequence_number": str(SEQUENCE_NUMBER),
                "min_sequence_number": str(SEQUENCE_NUMBER), "added_snapshot_id": str(SNAPSHOT_ID),
                "added_files_count": 1, "existing_files_count": 0, "deleted_files_count": 0,
                "added_rows_count": str(len(spec["rows"])), "existing_rows_count": "0", "deleted_rows_count": "0",
                "partitions": [], "key_metadata": None}
        if read["records"][0] != want:
            raise CaptureFailure(f"manifest_file {read['records'][0]}, expected {want}")
        if metrics["manifest_length"] != os.path.getsize(paths["manifest"]):
            raise CaptureFailure(f"the writer said the manifest is {metrics['manifest_length']} bytes")
        print(f"manifest list: {os.path.getsize(paths['list'])} bytes, read by avsc, every field exact")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    if not os.path.exists(PROBE):
        raise SystemExit(f"{PROBE} is missing: build it (cmake --build build --target trellara_parquet_probe)")
    run_scenarios([lake_iceberg_manifest_read_by_avsc, lake_iceberg_manifest_list_read_by_avsc])
