#!/usr/bin/env python3
"""Integration: every Parquet file the lake writer produces is read back by independent readers
(npm hyparquet + hyparquet-compressors, tests/lake/read_parquet.mjs; and DuckDB through npm
@duckdb/node-api, tests/lake/read_parquet_duckdb.mjs), never by our own code, and agrees with what
was written, value for value.

Each scenario writes one file with build/bin/trellara_parquet_probe (core's ParquetWriter driven by
a JSON spec), reads it with node, and compares exactly: integers and timestamps as digits, floats
bit for bit (NaN, infinities, -0 included), decimals as their unscaled integers, strings and bytes
as themselves. The footer hyparquet parsed is checked too: physical and logical types, field ids,
repetition, codec, row groups, and each column chunk's null count and min/max against the values
of its own rows. The writer's Iceberg metrics (counts, bounds in Iceberg's single-value
serialization, split offsets, file size) are checked against values this script computes. DuckDB
then reads the same file: the SQL types it infers from the footer and every value, exactly
(it reads the int64 limits of a timestamp as ±infinity, so the extremes scenario gives it a copy of
the file with those two values moved to 0001-01-01 and 9999-12-31).

  lake_parquet_every_type_reads_back_exactly
      All 13 column types, optional, ZSTD, three row groups, nulls in every column.
  lake_parquet_required_columns_uncompressed
      Required columns (no definition levels), uncompressed pages.
  lake_parquet_nulls_across_row_groups_and_pages
      2 500 rows, 4 row groups, pages of 300 rows, null patterns (runs and alternations) that
      exercise both RLE and bit-packed definition levels; an all-null column has no bounds.
  lake_parquet_extreme_values
      int32/int64 limits, decimal(38) at its limits, negative decimals of every physical width,
      float/double NaN, infinities and -0, empty strings and binary, unicode, a 1 MiB string.
  lake_parquet_rejects_values_it_cannot_write_exactly
      A decimal beyond its precision and a string that is not UTF-8 end the probe with an error
      naming the column, its field id and the row, and no file is written.

It starts no server. It needs node and npm; the readers are installed from tests/lake/package-lock.json
with `npm ci` into tests/lake/node_modules when they are missing.
"""

import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from decimal import Decimal, localcontext

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import BUILD_DIR, SOURCE_DIR, CaptureFailure, run_scenarios, scenario  # noqa: E402
from lake_readers import ensure_readers  # noqa: E402,F401

PROBE = os.path.join(BUILD_DIR, "bin", "trellara_parquet_probe")
READERS_DIR = os.path.join(SOURCE_DIR, "tests", "lake")
READ_PARQUET = os.path.join(READERS_DIR, "read_parquet.mjs")
READ_PARQUET_DUCKDB = os.path.join(READERS_DIR, "read_parquet_duckdb.mjs")

PHYSICAL = {"boolean": "BOOLEAN", "int": "INT32", "long": "INT64", "float": "FLOAT", "double": "DOUBLE",
            "date": "INT32", "time": "INT64", "timestamp": "INT64", "timestamptz": "INT64",
            "string": "BYTE_ARRAY", "binary": "BYTE_ARRAY", "uuid": "FIXED_LEN_BYTE_ARRAY"}
LOGICAL = {"date": {"type": "DATE"}, "string": {"type": "STRING"}, "uuid": {"type": "UUID"},
           "time": {"type": "TIME", "isAdjustedToUTC": False, "unit": "MICROS"},
           "timestamp": {"type": "TIMESTAMP", "isAdjustedToUTC": False, "unit": "MICROS"},
           "timestamptz": {"type": "TIMESTAMP", "isAdjustedToUTC": True, "unit": "MICROS"}}


def probe(spec, workdir, name):
    """Runs the probe; returns (CompletedProcess, file path)."""
    spec_path = os.path.join(workdir, name + ".json")
    out_path = os.path.join(workdir, name + ".parquet")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    return subprocess.run([PROBE, spec_path, out_path], capture_output=True, text=True), out_path


def read_back(path):
    done = subprocess.run(["node", READ_PARQUET, path], capture_output=True, text=True)
    if done.returncode != 0:
        raise CaptureFailure(f"hyparquet could not read {path}: {done.stderr.strip()[-3000:]}")
    return json.loads(done.stdout)


def unscaled_of(text, scale):
    with localcontext() as context:
        context.prec = 100  # the default 28 digits would round decimal(38) values
        value = Decimal(text).scaleb(scale)
    if value != value.to_integral_value():
        raise ValueError(f"test spec decimal {text} has more than {scale} fractional digits")
    return int(value)


def float_value(value, single):
    x = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}.get(value, value) if isinstance(value, str) \
        else float(value)
    return struct.unpack("<f", struct.pack("<f", x))[0] if single else x


def printable_float(x):
    if math.isnan(x):
        return {"float": "NaN"}
    if math.isinf(x):
        return {"float": "Infinity" if x > 0 else "-Infinity"}
    if x == 0 and math.copysign(1, x) < 0:
        return {"float": "-0"}
    return x


def expected_cell(column, value):
    """The value as read_parquet.mjs prints what hyparquet returns for it."""
    kind = column["type"]
    if value is None:
        return None
    if kind in ("boolean", "int"):
        return value
    if kind == "date":
        return {"days": value}
    if kind in ("long", "time"):
        return {"bigint": str(value)}
    if kind in ("timestamp", "timestamptz"):
        return {"micros": str(value)}
    if kind in ("float", "double"):
        return printable_float(float_value(value, kind == "float"))
    if kind == "decimal":
        return {"unscaled": str(unscaled_of(value, column["scale"]))}
    if kind == "string":
        return value
    if kind == "binary":
        return {"hex": value["hex"]}
    if kind == "uuid":
        return value.lower()
    raise ValueError(kind)


def same_cell(column, expected, actual):
    if column["type"] == "decimal" and expected is not None:
        if not isinstance(actual, dict) or actual.get("unscaled") != expected["unscaled"]:
            return False
        # hyparquet's own decimal conversion (a JS number): unscaled / 10^scale.
        number = int(expected["unscaled"]) / 10 ** column["scale"]
        return math.isclose(actual.get("decimal"), number, rel_tol=1e-15, abs_tol=0)
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    return expected == actual


def sort_key(column, value):
    """Parquet's sort order of the type, for the expected statistics (None for NaN: no bound)."""
    kind = column["type"]
    if kind in ("float", "double"):
        x = float_value(value, kind == "float")
        return None if math.isnan(x) else x
    if kind == "decimal":
        return unscaled_of(value, column["scale"])
    if kind == "string":
        return value.encode()
    if kind == "binary":
        return bytes.fromhex(value["hex"])
    if kind == "uuid":
        return bytes.fromhex(value.replace("-", ""))
    return value


def iceberg_single_value(column, key):
    """Iceberg spec, "Binary single-value serialization", written here from the spec."""
    kind = column["type"]
    if kind == "boolean":
        return b"\x01" if key else b"\x00"
    if kind in ("int", "date"):
        return struct.pack("<i", key)
    if kind in ("long", "time", "timestamp", "timestamptz"):
        return struct.pack("<q", key)
    if kind == "float":
        return struct.pack("<f", key)
    if kind == "double":
        return struct.pack("<d", key)
    if kind == "decimal":
        length = 1
        while not -(1 << (8 * length - 1)) <= key < (1 << (8 * length - 1)):
            length += 1
        return key.to_bytes(length, "big", signed=True)
    return key  # string, binary, uuid: their bytes


def extremes(column, values):
    keys = [sort_key(column, v) for v in values if v is not None]
    keys = [k for k in keys if k is not None]
    if not keys:
        return None, None
    low, high = min(keys), max(keys)
    if column["type"] in ("float", "double"):
        low = -0.0 if low == 0 else low    # a zero minimum is -0, a zero maximum +0
        high = 0.0 if high == 0 else high
    return low, high


def check_footer(spec, footer):
    columns = spec["columns"]
    schema = footer["schema"]
    if len(schema) != len(columns) + 1 or schema[0]["num_children"] != len(columns):
        raise CaptureFailure(f"schema has {len(schema)} elements for {len(columns)} columns")
    for column, element in zip(columns, schema[1:]):
        name = column["name"]
        want_physical = PHYSICAL.get(column["type"])
        want_logical = LOGICAL.get(column["type"])
        if column["type"] == "decimal":
            p = column["precision"]
            want_physical = "INT32" if p <= 9 else "INT64" if p <= 18 else "FIXED_LEN_BYTE_ARRAY"
            want_logical = {"type": "DECIMAL", "scale": column["scale"], "precision": p}
            if element["type_length"] is not None and element["type_length"] != min(
                    n for n in range(1, 17) if (1 << (8 * n - 1)) - 1 >= 10 ** p - 1):
                raise CaptureFailure(f"{name}: decimal({p}) stored in {element['type_length']} bytes, not the fewest")
        if element["type"] != want_physical:
            raise CaptureFailure(f"{name}: physical type {element['type']}, expected {want_physical}")
        if element["logical_type"] != want_logical:
            raise CaptureFailure(f"{name}: logical type {element['logical_type']}, expected {want_logical}")
        if element["field_id"] != column["field_id"]:
            raise CaptureFailure(f"{name}: field id {element['field_id']}, expected {column['field_id']}")
        want_repetition = "REQUIRED" if column.get("required") else "OPTIONAL"
        if element["repetition_type"] != want_repetition or element["name"] != name:
            raise CaptureFailure(f"{name}: element {element}")
        if column["type"] == "uuid" and element["type_length"] != 16:
            raise CaptureFailure(f"{name}: uuid of length {element['type_length']}")


def check_file(spec, path, metrics, read):
    """Every value, the footer's statistics and the writer's Iceberg metrics."""
    columns, rows = spec["columns"], spec["rows"]
    footer = read["footer"]
    check_footer(spec, footer)
    if len(read["rows"]) != len(rows):
        raise CaptureFailure(f"hyparquet read {len(read['rows'])} rows, {len(rows)} were written")
    for r, (want_row, got_row) in enumerate(zip(rows, read["rows"])):
        for column, want in zip(columns, want_row):
            expected = expected_cell(column, want)
            actual = got_row.get(column["name"])
            if not same_cell(column, expected, actual):
                raise CaptureFailure(f"row {r} column {column['name']} ({column['type']}): wrote {want!r}, "
                                     f"hyparquet read {actual!r} (expected {expected!r})")

    codec = "UNCOMPRESSED" if spec.get("compression") == "uncompressed" else "ZSTD"
    group_rows = spec.get("row_group_rows_max", 1_000_000)
    want_groups = [rows[i:i + group_rows] for i in range(0, len(rows), group_rows)]
    groups = footer["row_groups"]
    if len(groups) != len(want_groups):
        raise CaptureFailure(f"{len(groups)} row groups, expected {len(want_groups)}")
    for g, (group, group_rows_list) in enumerate(zip(groups, want_groups)):
        if int(group["num_rows"]["bigint"]) != len(group_rows_list):
            raise CaptureFailure(f"row group {g}: num_rows {group['num_rows']}, expected {len(group_rows_list)}")
        for c, (column, chunk) in enumerate(zip(columns, group["columns"])):
            values = [row[c] for row in group_rows_list]
            stats = chunk["statistics"]
            where = f"row group {g} column {column['name']}"
            if chunk["codec"] != codec or chunk["path_in_schema"] != [column["name"]]:
                raise CaptureFailure(f"{where}: codec {chunk['codec']}, path {chunk['path_in_schema']}")
            if int(stats["null_count"]["bigint"]) != sum(v is None for v in values):
                raise CaptureFailure(f"{where}: null_count {stats['null_count']}")
            low, high = extremes(column, values)
            if low is None:
                if stats["min_value"] is not None or stats["max_value"] is not None:
                    raise CaptureFailure(f"{where}: bounds {stats['min_value']}..{stats['max_value']} of no value")
                continue
            # hyparquet decodes min_value/max_value with the column's logical type; compare through
            # the same printable forms as the values.
            for label, key, got in (("min", low, stats["min_value"]), ("max", high, stats["max_value"])):
                if not stat_matches(column, key, got):
                    raise CaptureFailure(f"{where}: {label}_value {got!r}, expected {key!r}")

    # The writer's Iceberg metrics against this script's own computation from the spec.
    if metrics["record_count"] != len(rows) or metrics["file_size_bytes"] != os.path.getsize(path):
        raise CaptureFailure(f"metrics {metrics['record_count']} rows / {metrics['file_size_bytes']} bytes; "
                             f"file has {len(rows)} rows / {os.path.getsize(path)} bytes")
    offsets = [int(group["columns"][0]["data_page_offset"]["bigint"]) for group in groups]
    if metrics["split_offsets"] != offsets:
        raise CaptureFailure(f"split offsets {metrics['split_offsets']}, row groups start at {offsets}")
    for c, (column, m) in enumerate(zip(columns, metrics["columns"])):
        values = [row[c] for row in rows]
        where = f"Iceberg metrics of {column['name']}"
        if m["field_id"] != column["field_id"] or m["value_count"] != len(rows) or \
                m["null_count"] != sum(v is None for v in values):
            raise CaptureFailure(f"{where}: {m}")
        if column["type"] in ("float", "double"):
            nans = sum(1 for v in values if v is not None and math.isnan(float_value(v, column["type"] == "float")))
            if m.get("nan_count") != nans:
                raise CaptureFailure(f"{where}: nan_count {m.get('nan_count')}, expected {nans}")
        low, high = extremes(column, values)
        want_low = None if low is None else iceberg_single_value(column, low).hex()
        want_high = None if high is None else iceberg_single_value(column, high).hex()
        if m.get("lower_bound_hex") != want_low or m.get("upper_bound_hex") != want_high:
            raise CaptureFailure(f"{where}: bounds {m.get('lower_bound_hex')}..{m.get('upper_bound_hex')}, "
                                 f"expected {want_low}..{want_high}")


def stat_matches(column, key, got):
    """A statistic as hyparquet decodes it (read_parquet.mjs keeps string/binary ones as hex)."""
    kind = column["type"]
    if kind in ("float", "double"):
        return printable_float(key) == got
    if kind == "decimal":
        # hyparquet turns a decimal statistic into a JS number, as it does values.
        return isinstance(got, (int, float)) and math.isclose(got, key / 10 ** column["scale"], rel_tol=1e-15)
    if kind in ("string", "binary"):
        return got == {"hex": key.hex()}
    if kind == "uuid":
        h = key.hex()
        return got == f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    if kind in ("long", "time"):
        return got == {"bigint": str(key)}
    if kind in ("timestamp", "timestamptz"):
        return got == {"micros": str(key)}
    if kind == "date":
        return got == {"days": key}
    return type(got) is type(key) and got == key


DUCKDB_TYPES = {"boolean": "BOOLEAN", "int": "INTEGER", "long": "BIGINT", "float": "FLOAT", "double": "DOUBLE",
                "date": "DATE", "time": "TIME", "timestamp": "TIMESTAMP", "timestamptz": "TIMESTAMP WITH TIME ZONE",
                "string": "VARCHAR", "binary": "BLOB", "uuid": "UUID"}


def duckdb_cell(column, value):
    """The value as read_parquet_duckdb.mjs prints what DuckDB returns for it."""
    kind = column["type"]
    if value is None or kind in ("boolean", "int", "string"):
        return value
    if kind in ("long", "date", "time", "timestamp", "timestamptz"):
        return str(value)
    if kind in ("float", "double"):
        return printable_float(float_value(value, kind == "float"))
    if kind == "decimal":
        return unscaled_of(value, column["scale"])
    if kind == "binary":
        return value["hex"]
    if kind == "uuid":
        return value.lower()
    raise ValueError(kind)


def check_with_duckdb(spec, path):
    """DuckDB's read_parquet: the types it infers from the footer and every value."""
    done = subprocess.run(["node", READ_PARQUET_DUCKDB, path], capture_output=True, text=True)
    if done.returncode != 0:
        raise CaptureFailure(f"DuckDB could not read {path}: {done.stderr.strip()[-3000:]}")
    read = json.loads(done.stdout)
    columns = spec["columns"]
    types = [c["type"] for c in read["columns"]]
    want_types = [f"DECIMAL({c['precision']},{c['scale']})" if c["type"] == "decimal" else DUCKDB_TYPES[c["type"]]
                  for c in columns]
    if types != want_types or [c["name"] for c in read["columns"]] != [c["name"] for c in columns]:
        raise CaptureFailure(f"DuckDB read the columns as {read['columns']}, expected types {want_types}")
    if len(read["rows"]) != len(spec["rows"]):
        raise CaptureFailure(f"DuckDB read {len(read['rows'])} rows, {len(spec['rows'])} were written")
    for r, (want_row, got_row) in enumerate(zip(spec["rows"], read["rows"])):
        for column, want, got in zip(columns, want_row, got_row):
            expected = duckdb_cell(column, want)
            if column["type"] == "decimal" and got is not None:
                got = unscaled_of(got, column["scale"])
            if expected != got or isinstance(expected, bool) != isinstance(got, bool):
                raise CaptureFailure(f"DuckDB: row {r} column {column['name']} ({column['type']}): wrote {want!r}, "
                                     f"read {got!r} (expected {expected!r})")


def write_and_compare(spec, name, duckdb=True):
    ensure_readers()
    workdir = tempfile.mkdtemp(prefix="trellara-lake-")
    try:
        done, path = probe(spec, workdir, name)
        if done.returncode != 0:
            raise CaptureFailure(f"the probe failed on spec {name}: {done.stderr.strip()}")
        metrics = json.loads(done.stdout)
        read = read_back(path)
        check_file(spec, path, metrics, read)
        readers = "hyparquet"
        if duckdb:
            check_with_duckdb(spec, path)
            readers += " and DuckDB"
        print(f"{name}: {len(spec['rows'])} rows, {len(read['footer']['row_groups'])} row groups, "
              f"{os.path.getsize(path)} bytes, read back exactly by {readers}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def column(name, field_id, kind, required=False, precision=None, scale=None):
    c = {"name": name, "field_id": field_id, "type": kind, "required": required}
    if precision is not None:
        c.update(precision=precision, scale=scale)
    return c


EVERY_TYPE = [
    column("flag", 1, "boolean"), column("n", 2, "int"), column("big", 3, "long"), column("ratio", 4, "float"),
    column("amount", 5, "double"), column("price", 6, "decimal", precision=9, scale=2),
    column("total", 7, "decimal", precision=18, scale=4), column("huge", 8, "decimal", precision=38, scale=10),
    column("day", 9, "date"), column("at_time", 10, "time"), column("at", 11, "timestamp"),
    column("at_tz", 12, "timestamptz"), column("label", 13, "string"), column("blob", 14, "binary"),
    column("id", 15, "uuid"),
]


@scenario(suite="lake", invariants=(
    "every Iceberg primitive type reads back exactly through independent readers (hyparquet, DuckDB)",
    "physical type, logical type, field id and repetition of every column are as Iceberg's spec maps them",
    "column chunk null counts and min/max are the true ones of each row group",
    "the writer's Iceberg metrics (counts, single-value bounds, split offsets, size) are exact"))
def lake_parquet_every_type_reads_back_exactly():
    rows = [
        [True, 1, 2, 0.5, 1.25, "12.34", "-99.0001", "1.0000000001", 19_700, 0, 1_700_000_000_000_000,
         1_700_000_000_000_001, "store-7", {"hex": "00ff10"}, "123e4567-e89b-12d3-a456-426614174000"],
        [False, -7, -3_000_000_000, -1.5, -2.75, "-0.01", "0.0000", "-12345678901234567890.1234567891", -1,
         86_399_999_999, -1, 0, "ünïcödé €", {"hex": ""}, "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF"],
        [None] * 15,
        [True, 0, 0, 0.0, 0.0, "0", "1", "0", 0, 1, 0, -62_135_596_800_000_000, "", {"hex": "7f"},
         "00000000-0000-0000-0000-000000000000"],
        [None, 2_147_483_647, None, None, 3.5, None, "12345678901234.5678", None, None, None, None, None, "x",
         None, None],
    ]
    write_and_compare({"compression": "zstd", "row_group_rows_max": 2, "columns": EVERY_TYPE, "rows": rows},
                      "every_type")


@scenario(suite="lake", invariants=(
    "required columns (no definition levels) in uncompressed pages read back exactly",))
def lake_parquet_required_columns_uncompressed():
    columns = [column("id", 1, "long", required=True), column("name", 2, "string", required=True),
               column("ok", 3, "boolean", required=True), column("price", 4, "decimal", True, 12, 3),
               column("u", 5, "uuid", required=True), column("at", 6, "timestamptz", required=True)]
    rows = [[i, f"name {i}", i % 3 == 0, f"{i * 7 - 500}.{i % 1000:03d}",
             f"{i:08x}-0000-4000-8000-{i * 7919:012x}", 1_600_000_000_000_000 + i * 1_000_003] for i in range(1, 1201)]
    rows[5][3] = "-0.001"  # a negative fraction of a unit
    write_and_compare({"compression": "uncompressed", "row_group_rows_max": 500, "page_rows_max": 128,
                       "columns": columns, "rows": rows}, "required_uncompressed")


@scenario(suite="lake", invariants=(
    "definition levels (RLE runs and bit-packed groups) put every null where it was written, across pages "
    "and row groups",
    "a column with no value has null counts and no bounds"))
def lake_parquet_nulls_across_row_groups_and_pages():
    columns = [column("k", 1, "int", required=True), column("every_third", 2, "long"),
               column("runs", 3, "string"), column("alternating", 4, "double"), column("nothing", 5, "date"),
               column("sparse", 6, "decimal", precision=30, scale=5)]
    rows = []
    for i in range(2500):
        rows.append([
            i,
            None if i % 3 == 0 else i * 1_000_000_007,
            None if (i // 37) % 2 else f"run {i // 37}",
            None if i % 2 else i / 7,
            None,
            f"-{i}.{i % 100000:05d}" if i % 97 == 5 else None,
        ])
    write_and_compare({"compression": "zstd", "row_group_rows_max": 700, "page_rows_max": 300, "columns": columns,
                       "rows": rows}, "nulls")


@scenario(suite="lake", invariants=(
    "integer, decimal and floating extremes, empty values and unicode read back exactly",))
def lake_parquet_extreme_values():
    i32, i64 = 2 ** 31, 2 ** 63
    d38 = "9" * 28 + "." + "9" * 10
    columns = [column("i", 1, "int"), column("l", 2, "long"), column("f", 3, "float"), column("d", 4, "double"),
               column("d4", 5, "decimal", precision=4, scale=4), column("d9", 6, "decimal", precision=9, scale=0),
               column("d18", 7, "decimal", precision=18, scale=6), column("d19", 8, "decimal", precision=19, scale=0),
               column("d38", 9, "decimal", precision=38, scale=10), column("s", 10, "string"),
               column("b", 11, "binary"), column("ts", 12, "timestamp"), column("day", 13, "date")]
    rows = [
        [-i32, -i64, "-Infinity", "-Infinity", "-0.9999", "-999999999", "-999999999999.999999",
         "-9999999999999999999", "-" + d38, "", {"hex": ""}, -i64, -i32],
        [i32 - 1, i64 - 1, "Infinity", "Infinity", "0.9999", "999999999", "999999999999.999999",
         "9999999999999999999", d38, "日本語のテキスト 😀 e\u0301", {"hex": "00" * 32}, i64 - 1, i32 - 1],
        [0, 0, "NaN", "NaN", "-0.0001", "-1", "-0.000001", "-1", "-0.0000000001", "\u0000nul inside",
         {"hex": "ff" * 3}, 0, 0],
        [-1, -1, -0.0, -0.0, "0", "0", "0", "0", "0", "x" * (1 << 20), {"hex": "80"}, 1, 1],
        [1, 1, 3.4028234663852886e38, 1.7976931348623157e308, None, None, None, None, None, "🙂", None, None, None],
        [None, None, 1.401298464324817e-45, 5e-324, "-0.5", "-128", "-129.5", "-32768", "-12.5", "e\u0301", None,
         None, None],
    ]
    write_and_compare({"compression": "zstd", "row_group_rows_max": 4, "columns": columns, "rows": rows},
                      "extremes", duckdb=False)
    # DuckDB reads the int64 limits of a timestamp as -infinity/infinity (its own reserved values),
    # so it checks the same file without them.
    ts = [c["name"] for c in columns].index("ts")
    for row in rows:
        if row[ts] is not None and abs(row[ts]) >= i64 - 1:
            row[ts] = 253_402_300_799_999_999 if row[ts] > 0 else -62_135_596_800_000_000  # 9999-12-31, 0001-01-01
    write_and_compare({"compression": "zstd", "row_group_rows_max": 4, "columns": columns, "rows": rows},
                      "extremes_duckdb_range")


@scenario(suite="lake", invariants=(
    "a decimal beyond its precision is an error naming column, field id and row; no file is written",
    "a string that is not UTF-8 is an error naming column, field id and row; no file is written"))
def lake_parquet_rejects_values_it_cannot_write_exactly():
    workdir = tempfile.mkdtemp(prefix="trellara-lake-")
    try:
        columns = [column("id", 1, "long", required=True), column("price", 7, "decimal", precision=5, scale=2),
                   column("note", 9, "string")]
        # The probe parses decimal text at precision 38: the check against the column's precision
        # is the writer's.
        cases = [
            ("decimal_precision", [[1, "1.00", "a"], [2, "999.99", "b"], [3, "1000.00", "c"]],
             ["price", "field id 7", "decimal(5, 2)", "1000.00"]),
            ("not_utf8", [[1, None, "ok"], [2, None, {"hex": "636166e9"}]],
             ["column 'note' (field id 9, string)", "row 1 ", "not valid UTF-8", "caf\\xe9"]),
        ]
        for name, rows, needles in cases:
            done, path = probe({"compression": "zstd", "columns": columns, "rows": rows}, workdir, name)
            if done.returncode != 1:
                raise CaptureFailure(f"{name}: the probe exited {done.returncode}, expected 1: {done.stderr}")
            missing = [n for n in needles if n not in done.stderr]
            if missing:
                raise CaptureFailure(f"{name}: the error does not name {missing}: {done.stderr.strip()}")
            if os.path.exists(path):
                raise CaptureFailure(f"{name}: a file was written although the writer refused a row")
            print(f"{name}: refused as expected: {done.stderr.strip()}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    if not os.path.exists(PROBE):
        raise SystemExit(f"{PROBE} is missing: build it (cmake --build build --target trellara_parquet_probe)")
    run_scenarios([lake_parquet_every_type_reads_back_exactly, lake_parquet_required_columns_uncompressed,
                   lake_parquet_nulls_across_row_groups_and_pages, lake_parquet_extreme_values,
                   lake_parquet_rejects_values_it_cannot_write_exactly])
