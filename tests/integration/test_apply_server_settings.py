#!/usr/bin/env python3
"""Integration: values of every awkward kind reach the target unchanged although the source and
the target run with other output settings than the defaults, and other settings than each other
(docs/apply.md "Server settings of source and target").

The source runs with DateStyle 'German, DMY', IntervalStyle sql_standard, extra_float_digits -3,
bytea_output escape and TimeZone Pacific/Chatham (+12:45/+13:45); the target with DateStyle
'SQL, MDY', IntervalStyle postgres_verbose, extra_float_digits 0 and TimeZone America/St_Johns
(-03:30). Each setting changes the text of some value type: values travel as text, so the
relay's plugin pins them while decoding and the applier's sessions pin the same (otherwise a
float loses digits, a German date is refused or read as another day, an interval's sign moves).
The target is restored with `pg_dump --schema-only`, the publication is FOR ALL TABLES.

  awkward_values_stream_between_servers_with_other_settings
      A table of 35 column types (money, xml, tsvector, int4multirange, timetz, cidr, macaddr8, the
      geometric types, "char", oid, pg_lsn, name, NaN/±Infinity/-0/denormal floats and numerics,
      ±infinity timestamps, 4713 BC and 5874897 AD dates, 300 kB TOASTed text and bytea, jsonb with
      non-ASCII text, 2-D and composite arrays, tsrange, enum arrays, a domain with a CHECK, a
      STORED generated column, an ALWAYS identity key), rows inserted, updated (TOASTed values left
      unchanged by UPDATEs of other columns) and deleted; a keyless REPLICA IDENTITY FULL table
      with duplicate rows (one of three deleted and one updated by ctid); REPLICA IDENTITY USING
      INDEX with a change of its key; rows moved between list partitions and into the DEFAULT
      partition; inheritance with `UPDATE ONLY parent`. Streamed and applied by `trellara apply
      --until-caught-up`: every table equals the source's (compared as JSON under one set of
      settings, so a difference in any value shows).
  awkward_values_snapshot_between_servers_with_other_settings
      The same tables with their rows written before the flow existed, copied by `trellara
      snapshot`, then changed by the stream: every table equals the source's after both.
  negative_control_unpinned_plugin_settings_are_caught
      With defect.plugin_output_settings_unpinned (the plugin decodes with the server's settings)
      the log holds values in the source's German dates and 12-digit floats, and the first
      scenario's checks fail.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capture_support import CaptureFailure, record_fault_fired, run_scenarios, scenario  # noqa: E402
from flow_pair import FlowPair, run_trellara  # noqa: E402

SOURCE_SETTINGS = {"DateStyle": "'German, DMY'", "IntervalStyle": "'sql_standard'", "extra_float_digits": "-3",
                   "bytea_output": "'escape'", "TimeZone": "'Pacific/Chatham'", "lc_monetary": "'C'"}
TARGET_SETTINGS = {"DateStyle": "'SQL, MDY'", "IntervalStyle": "'postgres_verbose'", "extra_float_digits": "0",
                   "TimeZone": "'America/St_Johns'", "lc_monetary": "'C'"}
DEFECT = "defect.plugin_output_settings_unpinned"

SCHEMA = r"""
CREATE SCHEMA ex;
CREATE TYPE ex.mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN ex.pos AS integer CHECK (VALUE > 0);
CREATE TYPE ex.pt AS (x float8, label text);
CREATE TABLE ex.t1 (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  m money, x xml, tv tsvector, mr int4multirange, ttz timetz, c cidr, m8 macaddr8,
  bx box, ci circle, pg polygon, ln line, ls lseg, pa path, ch "char", o oid, lsn pg_lsn, nm name,
  f4 real, f8 double precision, nu numeric, ts timestamp, tstz timestamptz, d date, iv interval,
  big text, bb bytea, js jsonb, g integer GENERATED ALWAYS AS (length(coalesce(nm::text, ''))) STORED,
  na numeric[], t2 text[][], cp ex.pt[], tr tsrange, me ex.mood[], dp ex.pos, bo boolean);
CREATE TABLE ex.nokey (a integer, b text);
ALTER TABLE ex.nokey REPLICA IDENTITY FULL;
CREATE TABLE ex.uidx (id integer NOT NULL, code text NOT NULL, v text);
CREATE UNIQUE INDEX uidx_code ON ex.uidx (code);
ALTER TABLE ex.uidx REPLICA IDENTITY USING INDEX uidx_code;
CREATE TABLE ex.parted (k integer, region text, v text, PRIMARY KEY (k, region)) PARTITION BY LIST (region);
CREATE TABLE ex.parted_eu PARTITION OF ex.parted FOR VALUES IN ('eu');
CREATE TABLE ex.parted_us PARTITION OF ex.parted FOR VALUES IN ('us');
CREATE TABLE ex.parted_def PARTITION OF ex.parted DEFAULT;
CREATE TABLE ex.parent (id integer PRIMARY KEY, v text);
CREATE TABLE ex.child (extra text) INHERITS (ex.parent);
ALTER TABLE ex.child ADD PRIMARY KEY (id);
"""
# Every table the check compares; `ONLY ex.parent` apart from the tree.
TABLES = ("ex.t1", "ex.nokey", "ex.uidx", "ex.parted", "ex.parted_def", "ex.parent", "ONLY ex.parent", "ex.child")
SNAPSHOT_TABLES = ("ex.t1", "ex.nokey", "ex.uidx", "ex.parted_eu", "ex.parted_us", "ex.parted_def", "ex.parent",
                   "ex.child")

ROW = r"""INSERT INTO ex.t1 (m, x, tv, mr, ttz, c, m8, bx, ci, pg, ln, ls, pa, ch, o, lsn, nm, f4, f8, nu, ts, tstz, d,
  iv, big, bb, js, na, t2, cp, tr, me, dp, bo) VALUES
 ('$1,234.56', '<a b="1">t&amp;x</a>', to_tsvector('english', 'the quick brown foxes'), '{[1,3),[7,9)}',
  '10:11:12.345+05:30', '192.168.0.0/16', '08:00:2b:01:02:03:04:05', '((0,0),(1,2))', '<(1,1),2.5>',
  '((0,0),(1,0),(1,1))', '{1,-1,0}', '[(0,0),(3,4)]', '[(0,0),(1,1),(2,0)]', 'q', 4294967295, '16/B374D848',
  'a name', @f4@, @f8@, @nu@, @ts@, @tstz@, @d@, @iv@, @big@, @bb@,
  '{"k": "\u00e9\u4e2d", "n": 1.50, "e": [], "z": null}', '{1.10,NaN,-0.0}', '{{a,b},{"c d","e,f"}}',
  ARRAY[ROW(0.1, 'x')::ex.pt, ROW(NULL, 'y"z')::ex.pt], '[2026-01-01 10:00,infinity)', '{sad,happy}', 7, NULL)"""
ROW_VALUES = (
    dict(f4="'NaN'", f8="'-Infinity'", nu="'NaN'", ts="'infinity'", tstz="'-infinity'", d="'4713-01-01 BC'",
         iv="'-1 day +02:03:04'", big="repeat(md5('a'), 4000)", bb="decode(repeat(md5('b'), 3000), 'hex')"),
    dict(f4="'-0'", f8="1e-310", nu="'Infinity'", ts="'1999-12-31 23:59:59.999999'", tstz="'2026-03-29 02:30:00+02'",
         d="'0001-01-01'", iv="'-1 year -2 months +3 days'", big="''", bb="'\\x00ff5c'"),
    dict(f4="3.4028235e38", f8="0.1", nu="'-Infinity'", ts="'2038-01-19 03:14:08'", tstz="'2026-12-05 12:00:00+00'",
         d="'5874897-12-31'", iv="'1 year 2 months 3 days 04:05:06.789'", big="NULL", bb="NULL"),
    dict(f4="1.17549435e-38", f8="2.2250738585072014e-308", nu="123456789012345678901234567890.123456789",
         ts="'294276-12-31 23:59:59'", tstz="'1970-01-01 00:00:00+00'", d="'2000-02-29'", iv="'-00:00:00.000001'",
         big="repeat('x', 300000)", bb="decode(repeat('00', 200000), 'hex')"),
)


def row_sql(values):
    sql = ROW
    for name, value in values.items():
        sql = sql.replace("@" + name + "@", value)
    return sql


ROWS_SQL = ";\n".join(row_sql(values) for values in ROW_VALUES)
OTHER_ROWS = r"""
INSERT INTO ex.nokey VALUES (1, 'dup'), (1, 'dup'), (1, 'dup'), (2, NULL), (NULL, NULL);
INSERT INTO ex.uidx VALUES (1, 'a', 'x'), (2, 'b', 'y');
INSERT INTO ex.parted VALUES (1, 'eu', 'a'), (2, 'us', 'b'), (3, 'ap', 'c');
INSERT INTO ex.parent VALUES (1, 'p1');
INSERT INTO ex.child VALUES (2, 'c2', 'e2'), (3, 'c3', 'e3');
"""
CHANGES = r"""
BEGIN;
DELETE FROM ex.nokey WHERE ctid = (SELECT min(ctid) FROM ex.nokey WHERE a = 1);
UPDATE ex.nokey SET b = 'one' WHERE ctid = (SELECT max(ctid) FROM ex.nokey WHERE a = 1);
UPDATE ex.nokey SET b = 'was null' WHERE a IS NULL;
DELETE FROM ex.nokey WHERE a = 2;
COMMIT;
UPDATE ex.uidx SET code = 'c', v = 'z' WHERE id = 1;
DELETE FROM ex.uidx WHERE code = 'b';
UPDATE ex.parted SET region = 'us' WHERE k = 1;
UPDATE ex.parted SET region = 'zz' WHERE k = 2;
UPDATE ex.parent SET v = v || '!';
UPDATE ONLY ex.parent SET v = 'only';
DELETE FROM ex.child WHERE id = 3;
UPDATE ex.t1 SET bo = true WHERE id IN (1, 4);
UPDATE ex.t1 SET nm = 'renamed', f8 = 'NaN', iv = iv * -1 WHERE id = 2;
UPDATE ex.t1 SET big = big || 'y', tstz = tstz + interval '1 microsecond' WHERE id = 1;
DELETE FROM ex.t1 WHERE id = 3;
"""
# One set of output settings for reading both sides, whatever the servers' own.
READ_SETTINGS = ("SET DateStyle = ISO; SET IntervalStyle = postgres; SET extra_float_digits = 3; SET TimeZone = UTC; "
                 "SET bytea_output = hex; ")


class SettingsPair(FlowPair):
    """Source and target with their own output settings; the target restored from the source's
    schema by `pg_dump --schema-only`. `before_flow`: SQL run on the source before the flow exists
    (rows a snapshot copies)."""

    def __init__(self, name, before_flow="", source_env=None, defects=False):
        source_settings = dict(SOURCE_SETTINGS)
        if defects:
            source_settings["trellara.enable_test_defects"] = "on"
        super().__init__(name, source_sql=SCHEMA, target_sql="", source_settings=source_settings,
                         target_settings=TARGET_SETTINGS, source_env=source_env)
        self.before_flow = before_flow

    def prepare(self):
        super().prepare()
        self.restore_source_schema_into_target()
        for cluster, settings in ((self.source, SOURCE_SETTINGS), (self.target, TARGET_SETTINGS)):
            shown = cluster.query("SHOW DateStyle")
            if shown.replace(" ", "") != settings["DateStyle"].strip("'").replace(" ", ""):
                raise CaptureFailure(f"{cluster.name} runs with DateStyle {shown!r}, not the scenario's setting")
        if self.before_flow:
            self.source.psql(self.before_flow)


def rows_json(cluster, table):
    return cluster.query(READ_SETTINGS + f"SELECT coalesce(string_agg(r, E'\\n' ORDER BY r), '') FROM "
                         f"(SELECT row_to_json(z)::text AS r FROM {table} z) s")


def assert_tables_equal(pair, label):
    differ = []
    for table in TABLES:
        source_rows, target_rows = rows_json(pair.source, table), rows_json(pair.target, table)
        if source_rows != target_rows:
            differ.append(f"{table}:\n  source {source_rows[:700]}\n  target {target_rows[:700]}")
    if differ:
        raise CaptureFailure(f"{label}: {len(differ)} table(s) differ between source and target:\n" + "\n".join(differ))
    counts = {table: pair.target.query(f"SELECT count(*) FROM {table}") for table in TABLES}
    print(f"{label}: every table equals the source's ({counts})")


def log_bytes_hold(log_dir, needle):
    """How many of the log's segment files hold `needle`."""
    found = 0
    for name in os.listdir(log_dir):
        path = os.path.join(log_dir, name)
        if name.startswith("segment-") and name.endswith(".log"):
            with open(path, "rb") as segment:
                found += needle in segment.read()
    return found


def stream_and_check(pair, env=None):
    pair.source.psql(ROWS_SQL)
    pair.source.psql(OTHER_ROWS)
    pair.source.psql(CHANGES)
    pair.wait_log_covers_source(120)
    result = pair.apply(env=env)
    if "quarantine" in result.stderr:
        raise CaptureFailure(f"something was quarantined: {result.stderr[-1500:]}")
    assert_tables_equal(pair, "after the stream")


@scenario(suite="apply", invariants=("values of 35 column types equal the source's on a target with other output "
                                     "settings", "keyless, USING INDEX, partitioned and inherited tables equal the "
                                     "source's", "nothing quarantined"))
def awkward_values_stream_between_servers_with_other_settings():
    with SettingsPair("settings-stream") as pair:
        stream_and_check(pair)
        pair.check_no_crashes()
    print("ok: awkward_values_stream_between_servers_with_other_settings")


@scenario(suite="snapshot", invariants=("a snapshot copies values of 35 column types unchanged between servers "
                                        "with other output settings", "the stream on top keeps them equal"))
def awkward_values_snapshot_between_servers_with_other_settings():
    with SettingsPair("settings-snapshot", before_flow=ROWS_SQL + ";\n" + OTHER_ROWS) as pair:
        pair.apply()  # the target's state (origin, dedup table) before the copy
        command = ["snapshot", "--config", pair.config, "--format", "json", "--chunk-rows", "2"]
        for table in SNAPSHOT_TABLES:
            command += ["--table", table]
        copied = run_trellara(command, what="trellara snapshot")
        print(f"snapshot ({copied.seconds:.1f}s): {copied.stdout.strip()[-400:]}")
        assert_tables_equal(pair, "after the snapshot")
        pair.source.psql(CHANGES)
        pair.wait_log_covers_source(120)
        pair.apply()
        assert_tables_equal(pair, "after the stream on top of the snapshot")
        pair.check_no_crashes()
    print("ok: awkward_values_snapshot_between_servers_with_other_settings")


@scenario(suite="apply", defect="plugin_output_settings_unpinned",
          pairs_with="awkward_values_stream_between_servers_with_other_settings",
          invariants=("the first scenario's checks fail when the plugin decodes with the source server's settings",))
def negative_control_unpinned_plugin_settings_are_caught():
    with SettingsPair("settings-defect", source_env={"TRELLARA_FAULTS": f"{DEFECT}:1:defect"}, defects=True) as pair:
        try:
            stream_and_check(pair)
            caught = None
        except CaptureFailure as failure:
            caught = failure
        # The defect's effect, in the log's bytes (values are stored as their text): the first row's date in
        # the source's German style, where the pinned plugin writes "4713-01-01 BC".
        german = log_bytes_hold(pair.log_dir, b"01.01.4713 BC")
        if not german:
            raise CaptureFailure(f"harness failure, not a caught defect: {DEFECT} left no German-style date in the "
                                 f"log (the checks {'failed: ' + str(caught)[:800] if caught else 'passed'})")
        record_fault_fired(DEFECT)
        if caught is None:
            raise CaptureFailure(f"with {DEFECT} the checks still passed: they cannot catch that defect")
        print(f"negative control: {german} log segment(s) hold German dates; caught: {str(caught)[:400]}")
    print("ok: negative_control_unpinned_plugin_settings_are_caught")


if __name__ == "__main__":
    run_scenarios((awkward_values_stream_between_servers_with_other_settings,
                   awkward_values_snapshot_between_servers_with_other_settings,
                   negative_control_unpinned_plugin_settings_are_caught))
