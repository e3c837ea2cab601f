#!/usr/bin/env python3
"""Integration: `trellara snapshot` — the initial copy, resumable by chunk (docs/snapshot.md).

Real source and target clusters per scenario. The source holds data before the flow exists:
  public.items   (id bigint PRIMARY KEY, n int, payload text, g int GENERATED ALWAYS AS (n * 2) STORED)
                 split into key-range chunks (--chunk-rows)
  public.nokey   (a text, b int), no key at all: copied whole, in one chunk
  public.textkey (k text PRIMARY KEY, v int): a key that cannot be split: one chunk
The target holds the same schema (pg_dump --schema-only), no rows.

Scenarios (seed names where the seed has one):
  - snapshot_copies_tables_and_reports_json: exit 0, JSON fields, row counts and contents exact,
    the keyless and text-keyed tables one chunk each, items several; registry rows written.
  - snapshot_duplicate_copy_attempt: a rerun with the same run id copies nothing (every chunk
    skipped) and the target is unchanged.
  - snapshot_invalid_state_regression: copying a handoff_ready table again under another run is
    refused without --force (states unchanged), done with it.
  - negative_control_snapshot_state_regression_is_caught: the same refusal checks with
    defect.snapshot_state_regression (a backward move let through without --force) must fail.
  - snapshot_incomplete_copy_resume: the snapshot process is stalled inside a chunk's COPY and
    killed with SIGKILL; the chunk in flight is lost, the rest is durable; a rerun copies only the
    missing chunks and the counts are exact.
  - snapshot_copy_failure_marked_recoverable: a target CHECK constraint makes one chunk fail: the
    table is failed_recoverable with last_error, the others are handoff_ready, the command exits
    non-zero naming the table and the rerun; after the fix the rerun finishes it.
  - negative_control_snapshot_failure_not_recorded_is_caught: the same failure checks with
    defect.snapshot_failure_not_recorded (the failure kept in memory, the table left copying) must fail.
  - snapshot_target_crash_during_copy: the target restarts while a chunk's COPY is in flight; the
    worker retries the transient failure and the run finishes exact.
  - snapshot_crash_before_handoff_record: killed between a table's `copied` and its handoff_ready
    record; the rerun copies nothing and records it.
  - snapshot_kill9_repeated_while_source_writes: the snapshot process (--jobs 2) is killed with
    SIGKILL six times while the source takes writes (four times with both workers inside a chunk's
    COPY, twice at a random moment), then finishes from where it was; then `trellara apply
    --until-caught-up` and source == target.
  - snapshot_kill9_repeated_beside_running_applier: the same with `trellara apply` following the
    log during the whole copy. The final comparison of both depends on the applier's
    handoff rule (core DecideSnapshotChange wired into applier/apply_*.cpp).
It must never leave a cluster running (the harness stops it by PID) nor signal a process it did
not start.
"""

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import (CaptureFailure, TRELLARA_BIN, assert_no_backend_crashes,  # noqa: E402
                             record_faults_from_output, run_scenarios, scenario, wait_for)
import flow_pair  # noqa: E402

ITEMS = 6000
CHUNK_ROWS = 500
SCHEMA = """
CREATE TABLE public.items (id bigint PRIMARY KEY, n int NOT NULL, payload text,
                           g int GENERATED ALWAYS AS (n * 2) STORED);
CREATE TABLE public.nokey (a text, b int);
CREATE TABLE public.textkey (k text PRIMARY KEY, v int);
"""
DATA = f"""
INSERT INTO public.items (id, n, payload) SELECT i, i % 1000, repeat(md5(i::text), 3) FROM generate_series(1, {ITEMS}) i;
INSERT INTO public.nokey SELECT 'row ' || i, i FROM generate_series(1, 700) i;
INSERT INTO public.nokey SELECT 'dup', 1 FROM generate_series(1, 3);
INSERT INTO public.textkey SELECT 'k' || i, i FROM generate_series(1, 300) i;
ANALYZE;
"""
TABLES = ["public.items", "public.nokey", "public.textkey"]
CONTENT = {
    "public.items": "SELECT count(*) || ':' || coalesce(md5(string_agg(id || ',' || n || ',' || coalesce(payload, 'N') "
                    "|| ',' || g, ';' ORDER BY id)), '') FROM public.items",
    "public.nokey": "SELECT count(*) || ':' || coalesce(md5(string_agg(a || ',' || b, ';' ORDER BY a, b)), '') "
                    "FROM public.nokey",
    "public.textkey": "SELECT count(*) || ':' || coalesce(md5(string_agg(k || ',' || v, ';' ORDER BY k)), '') "
                      "FROM public.textkey",
}


FAULTS_SEEN = {}  # fault point -> times fired, as the `trellara` processes run by trellara() said at exit


def trellara(*args, expect=0, env=None, timeout=300):
    argv = [TRELLARA_BIN, *args]
    if env and "defect." in env.get("TRELLARA_FAULTS", ""):
        argv.insert(1, "--enable-test-defects")  # a defect needs the explicit test-only switch (fault.h)
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env or dict(os.environ))
    for point, count in record_faults_from_output(result.stderr).items():
        FAULTS_SEEN[point] = FAULTS_SEEN.get(point, 0) + count
    if expect is not None and result.returncode != expect:
        raise CaptureFailure(f"trellara {' '.join(args)} exited {result.returncode}, expected {expect}\n"
                             f"stdout: {result.stdout[-3000:]}\nstderr: {result.stderr[-3000:]}")
    return result


def snapshot_json(config, *args, expect=0, env=None):
    result = trellara("snapshot", "--config", config, "--format", "json", "--chunk-rows", str(CHUNK_ROWS), *args,
                      expect=expect, env=env)
    try:
        return json.loads(result.stdout), result
    except json.JSONDecodeError as error:
        raise CaptureFailure(f"snapshot --format json printed no JSON ({error}): {result.stdout!r} {result.stderr!r}")


def by_table(summary):
    return {t["table"]: t for t in summary["tables"]}


class Pair(flow_pair.FlowPair):
    """A source with data and a flow, a target with the schema, and the flow's config file. A
    scenario that kills one server process itself sets `expected_crash` (only that one may be
    reported)."""

    def __init__(self, name, extra_items=0):
        super().__init__(name, source_sql=SCHEMA + DATA, target_sql=SCHEMA,
                         publication="CREATE PUBLICATION pub FOR TABLE public.items, public.nokey, public.textkey")
        self.extra_items = extra_items
        self.expected_crash = None

    def prepare(self):
        super().prepare()
        if self.extra_items:
            self.source.psql(f"INSERT INTO public.items (id, n, payload) SELECT i, i % 1000, md5(i::text) "
                             f"FROM generate_series({ITEMS + 1_000_000}, {ITEMS + 1_000_000 + self.extra_items - 1}) i; "
                             f"ANALYZE public.items")

    def __exit__(self, *exc):
        try:
            if self.source is not None and self.target is not None:
                if self.expected_crash:
                    others = [line for line in self.source.backend_crashes() if self.expected_crash not in line]
                    if others:
                        raise CaptureFailure(f"backends crashed on {self.source.name}: {others}")
                    assert_no_backend_crashes(self.target)
                else:
                    assert_no_backend_crashes(self.source, self.target)
        finally:
            super().__exit__(*exc)

    def expect_same(self, label, tables=TABLES):
        for table in tables:
            src, tgt = self.source.query(CONTENT[table]), self.target.query(CONTENT[table])
            if src != tgt:
                raise CaptureFailure(f"{label}: {table} differs: source {src}, target {tgt}")

    def states(self):
        rows = self.target.query("SELECT schema_name || '.' || table_name || '=' || state FROM trellara.snapshot_tables "
                                 "ORDER BY 1")
        return dict(line.split("=") for line in rows.splitlines() if line)

    def chunk_states(self, table="items"):
        return self.target.query(f"SELECT string_agg(state, ',' ORDER BY chunk_no) FROM trellara.snapshot_chunks "
                                 f"WHERE table_name = '{table}'").split(",")


def expect(condition, message):
    if not condition:
        raise CaptureFailure(message)


def snapshot_copies_tables_and_reports_json():
    with Pair("snap-json") as p:
        summary, _ = snapshot_json(p.config)
        expect(set(summary) >= {"run_id", "state", "tables"}, f"JSON lacks fields: {summary}")
        expect(summary["state"] == "handoff_ready" and summary["run_id"].startswith("snap-"), f"run: {summary}")
        tables = by_table(summary)
        expect(set(tables) == set(TABLES), f"tables: {list(tables)}")
        for name, t in tables.items():
            expect(set(t) >= {"table", "state", "rows", "chunks", "chunks_copied", "chunks_skipped", "seconds"},
                   f"table fields: {t}")
            expect(t["state"] == "handoff_ready" and t["chunks_copied"] == t["chunks"] and t["chunks_skipped"] == 0,
                   f"{name}: {t}")
        expect(tables["public.items"]["chunks"] >= 5 and tables["public.items"]["rows"] == ITEMS,
               f"items should be split into chunks of ~{CHUNK_ROWS} rows: {tables['public.items']}")
        expect(tables["public.nokey"]["chunks"] == 1 and tables["public.nokey"]["rows"] == 703, f"{tables['public.nokey']}")
        expect(tables["public.textkey"]["chunks"] == 1, f"textkey has a text key: one chunk: {tables['public.textkey']}")
        p.expect_same("after the first snapshot")
        key = p.target.query("SELECT coalesce(key_column, '-') FROM trellara.snapshot_tables ORDER BY table_name")
        expect(key.splitlines() == ["id", "-", "-"], f"key columns: {key}")
        version = int(p.target.query("SELECT version FROM trellara.apply_control WHERE flow = 'app'"))
        expect(version >= 3, f"apply_control.version was bumped once per registration: {version}")
        snaps = p.target.query("SELECT count(*) FROM trellara.snapshot_chunks WHERE state = 'copied' AND snapshot ~ '^\\d+:\\d+:'")
        expect(int(snaps) == sum(t["chunks"] for t in tables.values()), f"every chunk records its snapshot: {snaps}")
        # Text format: the progress and summary are on stdout, and a --table outside the publication is refused.
        text = trellara("snapshot", "--config", p.config)
        expect("handoff_ready" in text.stdout, f"text summary: {text.stdout}")
        bad = trellara("snapshot", "--config", p.config, "--table", "public.nope", expect=2)
        expect("public.nope" in bad.stderr and "publication" in bad.stderr, f"unknown table: {bad.stderr}")
        # A table that joins the publication later is copied with --table, in a new run; the
        # others are not touched.
        p.source.psql("CREATE TABLE public.late (id int PRIMARY KEY, v text); "
                      "INSERT INTO public.late SELECT i, 'v' || i FROM generate_series(1, 1200) i; "
                      "ALTER PUBLICATION pub ADD TABLE public.late")
        p.target.psql("CREATE TABLE public.late (id int PRIMARY KEY, v text)")
        late, _ = snapshot_json(p.config, "--table", "public.late")
        expect(late["run_id"] != summary["run_id"] and [t["table"] for t in late["tables"]] == ["public.late"]
               and late["tables"][0]["rows"] == 1200 and late["tables"][0]["chunks"] >= 2, f"late table: {late}")
        expect(p.target.query("SELECT count(*) FROM public.late") == "1200", "late table copied")
        print(f"snapshot run {summary['run_id']}: " + ", ".join(f"{n} {t['chunks']} chunks {t['rows']} rows"
                                                                for n, t in tables.items()))


@scenario(seed_rows=["snapshot_duplicate_copy_attempt"], suite="snapshot",
          invariants=["a rerun with the same run id copies no chunk and reports every chunk skipped"])
def snapshot_duplicate_copy_attempt():
    with Pair("snap-dup") as p:
        first, _ = snapshot_json(p.config, "--run-id", "r1")
        before = {t: p.target.query(CONTENT[t]) for t in TABLES}
        copied_at = p.target.query("SELECT string_agg(copied_at::text, ',' ORDER BY table_name, chunk_no) "
                                   "FROM trellara.snapshot_chunks")
        again, _ = snapshot_json(p.config, "--run-id", "r1")
        expect(again["run_id"] == "r1" and again["state"] == "handoff_ready", f"rerun: {again}")
        for name, t in by_table(again).items():
            expect(t["chunks_copied"] == 0 and t["chunks_skipped"] == t["chunks"] == by_table(first)[name]["chunks"],
                   f"rerun of r1 must copy nothing and skip every chunk: {t}")
            expect(t["rows"] == by_table(first)[name]["rows"], f"rows: {t}")
        expect(copied_at == p.target.query("SELECT string_agg(copied_at::text, ',' ORDER BY table_name, chunk_no) "
                                           "FROM trellara.snapshot_chunks"), "no chunk was written again")
        expect(before == {t: p.target.query(CONTENT[t]) for t in TABLES}, "target unchanged by the rerun")
        # Without --run-id (no unfinished run), a finished table is reported skipped too.
        default, _ = snapshot_json(p.config)
        expect(all(t["chunks_copied"] == 0 for t in default["tables"]), f"default rerun: {default}")
        p.expect_same("after the duplicate attempts")


@scenario(seed_rows=["snapshot_invalid_state_regression"], suite="snapshot",
          invariants=["a backward state move is refused without --force and leaves every state unchanged"])
def snapshot_invalid_state_regression():
    with Pair("snap-regress") as p:
        snapshot_json(p.config, "--run-id", "r1")
        expect_backward_copy_refused(p)
        forced, _ = snapshot_json(p.config, "--run-id", "r2", "--table", "public.items", "--force")
        t = by_table(forced)["public.items"]
        expect(t["state"] == "handoff_ready" and t["chunks_copied"] == t["chunks"], f"forced copy: {t}")
        expect(p.target.query("SELECT run_id FROM trellara.snapshot_tables WHERE table_name = 'items'") == "r2",
               "re-registered under r2")
        p.expect_same("after the forced copy")


def expect_backward_copy_refused(p, env=None):
    """The refusal checks of snapshot_invalid_state_regression: after run r1 finished, copying
    public.items again under run r2 without --force exits 1 naming the table, its state and
    --force, and leaves the table handoff_ready, owned by r1, its rows uncopied."""
    copied_at = p.target.query("SELECT string_agg(copied_at::text, ',' ORDER BY chunk_no) FROM trellara.snapshot_chunks "
                               "WHERE table_name = 'items'")
    refused = trellara("snapshot", "--config", p.config, "--run-id", "r2", "--table", "public.items", expect=None,
                       env=env)
    expect(refused.returncode == 1, f"copying a handoff_ready table again without --force exited {refused.returncode}, "
                                    f"expected 1 (refused): {refused.stdout[-800:]} {refused.stderr[-800:]}")
    expect("handoff_ready" in refused.stderr and "--force" in refused.stderr and "public.items" in refused.stderr,
           f"refusal names the table, the states and --force: {refused.stderr}")
    expect(p.states()["public.items"] == "handoff_ready", f"state unchanged: {p.states()}")
    expect(p.target.query("SELECT run_id FROM trellara.snapshot_tables WHERE table_name = 'items'") == "r1",
           "still owned by r1")
    expect(p.target.query("SELECT count(*) FROM trellara.snapshot_runs WHERE run_id = 'r2'") in ("0", "1"), "")
    expect(copied_at == p.target.query("SELECT string_agg(copied_at::text, ',' ORDER BY chunk_no) FROM "
                                       "trellara.snapshot_chunks WHERE table_name = 'items'"),
           "the refused run copied no chunk")


def expect_defect_caught(defect, checks, what):
    """Runs `checks` (a clean scenario's checks, with `defect` switched on) and passes only if they
    fail after the defect point fired; a defect that never fired is a harness failure."""
    FAULTS_SEEN.clear()
    try:
        checks()
    except CaptureFailure as caught:
        if not FAULTS_SEEN.get(f"defect.{defect}"):
            raise CaptureFailure(f"harness failure, not a caught defect: defect.{defect} never fired; the checks "
                                 f"failed on their own: {caught}")
        print(f"negative control: with defect.{defect} ({what}) the checks fail — caught: {str(caught)[:600]}")
        return
    if not FAULTS_SEEN.get(f"defect.{defect}"):
        raise CaptureFailure(f"harness failure, not a caught defect: defect.{defect} never fired")
    raise CaptureFailure(f"negative control: with defect.{defect} ({what}) the clean checks passed — they cannot "
                         f"catch that defect")


@scenario(suite="snapshot", defect="snapshot_state_regression", fault_points=("defect.snapshot_state_regression",),
          pairs_with="snapshot_invalid_state_regression",
          invariants=["the refusal checks fail when a backward state move is let through without --force"])
def negative_control_snapshot_state_regression_is_caught():
    with Pair("snap-regress-defect") as p:
        snapshot_json(p.config, "--run-id", "r1")
        env = dict(os.environ, TRELLARA_FAULTS="defect.snapshot_state_regression:1:defect")
        expect_defect_caught("snapshot_state_regression", lambda: expect_backward_copy_refused(p, env),
                             "a handoff_ready table copied again under another run without --force")


@scenario(seed_rows=["snapshot_incomplete_copy_resume"], suite="snapshot",
          invariants=["kill -9 inside a chunk loses only that chunk; the rerun copies only what is missing"])
def snapshot_incomplete_copy_resume():
    with Pair("snap-resume") as p:
        env = dict(os.environ, TRELLARA_FAULTS="snapshot.during_table_copy:4:stall", TRELLARA_FAULT_STALL_MS="300000")
        proc = subprocess.Popen([TRELLARA_BIN, "snapshot", "--config", p.config, "--run-id", "r1", "--table",
                                 "public.items", "--jobs", "1", "--chunk-rows", str(CHUNK_ROWS), "--format", "json"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        try:
            wait_for("three chunks copied and the fourth in flight",
                     lambda: p.target.query("SELECT count(*) FROM trellara.snapshot_chunks WHERE state = 'copied'") == "3"
                     and p.target.query("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'COPY %FROM STDIN'") == "1",
                     60)
            time.sleep(0.5)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.communicate()
        chunks = p.chunk_states()
        expect(chunks[:3] == ["copied"] * 3 and set(chunks[3:]) == {"pending"},
               f"after kill -9 the first three chunks are copied and the rest pending: {chunks}")
        expect(p.states()["public.items"] == "copying", f"{p.states()}")
        partial = int(p.target.query("SELECT count(*) FROM public.items"))
        copied_rows = int(p.target.query("SELECT sum(rows_copied) FROM trellara.snapshot_chunks"))
        expect(partial == copied_rows, f"the chunk in flight left nothing: {partial} rows vs {copied_rows} recorded")
        # The default resumes the one unfinished run.
        summary, _ = snapshot_json(p.config, "--table", "public.items")
        t = by_table(summary)["public.items"]
        expect(summary["run_id"] == "r1", f"resumed r1: {summary}")
        expect(t["chunks_skipped"] == 3 and t["chunks_copied"] == t["chunks"] - 3 and t["rows"] == ITEMS,
               f"rerun copies only the missing chunks: {t}")
        p.expect_same("after the resume", ["public.items"])
        expect(p.target.query("SELECT state FROM trellara.snapshot_runs WHERE run_id = 'r1'") == "handoff_ready",
               "run r1 (one table) is finished")
        # The other tables: a new run (r1 is finished), items reported skipped.
        rest, _ = snapshot_json(p.config)
        expect(rest["run_id"] != "r1" and by_table(rest)["public.items"]["chunks_copied"] == 0, f"{rest}")
        expect(set(p.states().values()) == {"handoff_ready"}, f"{p.states()}")
        p.expect_same("after the whole run")


def expect_copy_failure_recorded(p, env=None):
    """The failure checks of snapshot_copy_failure_marked_recoverable: a target CHECK constraint
    makes one chunk of public.items fail; the command exits 1 naming the table, the cause and the
    rerun; the registry durably records the table and the run failed_recoverable with last_error;
    the other tables finish."""
    p.target.query("ALTER TABLE public.items ADD CONSTRAINT no_777 CHECK (n <> 777)")
    summary, result = snapshot_json(p.config, "--run-id", "r1", expect=1, env=env)
    t = by_table(summary)
    expect(t["public.items"]["state"] == "failed_recoverable", f"{summary}")
    expect(t["public.nokey"]["state"] == "handoff_ready" and t["public.textkey"]["state"] == "handoff_ready",
           f"the other tables continue: {summary}")
    expect("public.items" in result.stderr and "--run-id r1" in result.stderr and "no_777" in result.stderr,
           f"the error names the table, the cause and the rerun: {result.stderr}")
    last_error = p.target.query("SELECT last_error FROM trellara.snapshot_tables WHERE table_name = 'items'")
    expect("no_777" in last_error, f"last_error: {last_error}")
    expect(p.target.query("SELECT state FROM trellara.snapshot_runs WHERE run_id = 'r1'") == "failed_recoverable", "")


@scenario(seed_rows=["snapshot_copy_failure_marked_recoverable"], suite="snapshot",
          invariants=["a failing chunk leaves its table failed_recoverable with its error; a rerun finishes it"])
def snapshot_copy_failure_marked_recoverable():
    with Pair("snap-fail") as p:
        expect_copy_failure_recorded(p)
        p.target.query("ALTER TABLE public.items DROP CONSTRAINT no_777")
        summary, _ = snapshot_json(p.config, "--run-id", "r1")
        t = by_table(summary)["public.items"]
        expect(summary["state"] == "handoff_ready" and t["state"] == "handoff_ready" and t["chunks_skipped"] > 0
               and t["chunks_copied"] > 0, f"after the fix: {summary}")
        p.expect_same("after the fix")


@scenario(suite="snapshot", defect="snapshot_failure_not_recorded",
          fault_points=("defect.snapshot_failure_not_recorded",), pairs_with="snapshot_copy_failure_marked_recoverable",
          invariants=["the failure checks fail when a table's copy failure is not recorded in the registry"])
def negative_control_snapshot_failure_not_recorded_is_caught():
    with Pair("snap-fail-defect") as p:
        env = dict(os.environ, TRELLARA_FAULTS="defect.snapshot_failure_not_recorded:1:defect")
        expect_defect_caught("snapshot_failure_not_recorded", lambda: expect_copy_failure_recorded(p, env),
                             "the failed table left copying with no last_error")


def snapshot_kill9_repeated_while_source_writes():
    kill9_repeated_while_source_writes(applier_running=False)


@scenario(suite="snapshot", invariants=["kill -9 of the snapshot process, repeated, while the source takes writes "
                                        "and the applier runs: the last rerun finishes, verify exits 0",
                                        "target equals source"])
def snapshot_kill9_repeated_beside_running_applier():
    kill9_repeated_while_source_writes(applier_running=True)


def kill9_repeated_while_source_writes(applier_running):
    with Pair("snap-kill" + ("-apply" if applier_running else ""), extra_items=100_000) as p:
        stop = threading.Event()
        errors = []

        def writer():
            rng = random.Random(7)
            next_id = ITEMS + 1
            while not stop.is_set():
                try:
                    i = rng.randint(1, ITEMS)
                    p.source.psql(f"BEGIN; UPDATE public.items SET n = n + 1, payload = 'w' || {i} WHERE id = {i}; "
                                  f"INSERT INTO public.items (id, n, payload) VALUES ({next_id}, 1, 'new'); "
                                  f"DELETE FROM public.items WHERE id = {rng.randint(1, ITEMS)}; "
                                  f"UPDATE public.textkey SET v = v + 1 WHERE k = 'k{rng.randint(1, 300)}'; "
                                  f"INSERT INTO public.nokey VALUES ('w', {next_id}); COMMIT;")
                    next_id += 1
                except Exception as error:  # noqa: BLE001
                    errors.append(str(error))
                    return

        thread = threading.Thread(target=writer)
        thread.start()
        applier = None
        kills = 0
        try:
            rng = random.Random(11)
            for round_no in range(6):
                env = dict(os.environ)
                stalled = round_no < 4
                if stalled:  # both workers stall inside a chunk's COPY (their 3rd and 4th chunk) and are killed there
                    env.update(TRELLARA_FAULTS="snapshot.during_table_copy:3:stall,snapshot.during_table_copy:4:stall",
                               TRELLARA_FAULT_STALL_MS="300000")
                proc = subprocess.Popen([TRELLARA_BIN, "snapshot", "--config", p.config, "--jobs", "2",
                                         "--chunk-rows", "2000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        env=env)
                if stalled:
                    wait_for("two chunks' COPY in flight", lambda: p.target.query(
                        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'COPY %FROM STDIN'") == "2", 60)
                    if applier_running and applier is None:
                        # The stream runs beside the copy from the moment the tables are registered
                        # (before that, an UPDATE of a row the target does not hold yet would be
                        # quarantined: registration comes first).
                        applier_log = open(os.path.join(p.work.name, "apply.log"), "w")
                        applier = subprocess.Popen([TRELLARA_BIN, "apply", "--config", p.config],
                                                   stdout=applier_log, stderr=subprocess.STDOUT)
                    time.sleep(0.2)
                else:  # anywhere
                    time.sleep(rng.uniform(0.05, 0.4))
                if proc.poll() is None:
                    os.kill(proc.pid, signal.SIGKILL)
                    kills += 1
                proc.communicate()
                print(f"round {round_no}: chunks copied so far: " + p.target.query(
                    "SELECT count(*) FILTER (WHERE state = 'copied') || '/' || count(*) FROM trellara.snapshot_chunks"))
            summary, _ = snapshot_json(p.config, "--jobs", "2")
            expect(summary["state"] == "handoff_ready", f"the final run finishes: {summary}")
        finally:
            stop.set()
            thread.join()
        if applier is not None:
            if applier.poll() is not None:
                with open(os.path.join(p.work.name, "apply.log")) as log:
                    raise CaptureFailure(f"the applier stopped during the snapshot: {log.read()[-2000:]}")
            # The end state: verify, live beside the applier, at one exact point.
            p.wait_log_covers_source()
            verify = subprocess.run([TRELLARA_BIN, "verify", "--config", p.config], capture_output=True, text=True,
                                    timeout=300)
            print(verify.stdout.strip()[-800:])
            if verify.returncode != 0:
                applier.send_signal(signal.SIGTERM)
                applier.communicate(timeout=60)
                raise CaptureFailure(f"verify after the repeated kills exited {verify.returncode}, expected 0: "
                                     f"{verify.stdout[-1500:]} {verify.stderr[-1500:]}")
            applier.send_signal(signal.SIGTERM)
            try:
                applier.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                os.kill(applier.pid, signal.SIGKILL)
                applier.communicate()
        expect(not errors, f"the source writer failed: {errors}")
        expect(kills >= 4, f"snapshot processes were killed mid-run ({kills})")
        expect(any(t["chunks_skipped"] > 0 for t in summary["tables"]), f"the final run resumed: {summary}")
        chunks = p.target.query("SELECT count(*) FILTER (WHERE state <> 'copied') FROM trellara.snapshot_chunks")
        expect(chunks == "0", f"every chunk copied: {chunks} not")
        print(f"snapshot killed {kills} times while the source took writes, then finished: "
              + ", ".join(f"{t['table']} {t['chunks']} chunks ({t['chunks_skipped']} skipped)" for t in summary["tables"]))
        # Depends on the applier's handoff rule (docs/snapshot.md "The applier's rule"): the stream
        # applies exactly the changes each chunk's snapshot did not see.
        p.wait_log_covers_source()
        trellara("apply", "--config", p.config, "--until-caught-up", timeout=600)
        p.expect_same("after the snapshot and apply --until-caught-up")


@scenario(seed_rows=["snapshot_target_crash_during_copy"], suite="snapshot",
          invariants=["a target restart inside a COPY loses only the chunk in flight; the copy converges exactly"])
def snapshot_target_crash_during_copy():
    """The target restarts (immediate shutdown, crash recovery) while a chunk's COPY is in flight:
    the worker's failure is transient (connection lost), it reconnects with backoff and copies the
    chunk again; the command still exits 0 with exact counts."""
    with Pair("snap-tcrash") as p:
        env = dict(os.environ, TRELLARA_FAULTS="snapshot.during_table_copy:3:stall", TRELLARA_FAULT_STALL_MS="4000")
        proc = subprocess.Popen([TRELLARA_BIN, "snapshot", "--config", p.config, "--jobs", "1", "--chunk-rows",
                                 str(CHUNK_ROWS), "--format", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env)
        try:
            wait_for("a chunk's COPY in flight", lambda: p.target.query(
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'COPY %FROM STDIN'") != "0", 60)
            p.target.restart_immediate()
            out, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.communicate()
        expect(proc.returncode == 0, f"snapshot survives a target restart (exit {proc.returncode}): {err[-2000:]}")
        expect("transient failure" in err, f"the retry is reported: {err[-2000:]}")
        summary = json.loads(out)
        expect(summary["state"] == "handoff_ready", f"{summary}")
        p.expect_same("after the target restart")


def snapshot_crash_before_handoff_record():
    """Killed (fault point crash = SIGKILL) after a table's chunks are all copied but before its
    handoff_ready is written: the table stays copied; a rerun copies nothing and records it."""
    with Pair("snap-handoff") as p:
        env = dict(os.environ, TRELLARA_FAULTS="snapshot.before_handoff_record:1:crash")
        crashed = trellara("snapshot", "--config", p.config, "--chunk-rows", str(CHUNK_ROWS), "--run-id", "r1",
                           expect=-signal.SIGKILL, env=env)
        states = p.states()
        expect(states["public.items"] == "copied" and "handoff_ready" not in states.values(),
               f"after the crash: {states} {crashed.stderr[-500:]}")
        summary, _ = snapshot_json(p.config)
        expect(summary["run_id"] == "r1" and summary["state"] == "handoff_ready", f"{summary}")
        expect(all(t["chunks_copied"] == 0 and t["chunks_skipped"] == t["chunks"] for t in summary["tables"]),
               f"the rerun copied nothing: {summary}")
        p.expect_same("after the handoff record")


if __name__ == "__main__":
    run_scenarios([snapshot_copies_tables_and_reports_json, snapshot_duplicate_copy_attempt,
                   snapshot_invalid_state_regression, negative_control_snapshot_state_regression_is_caught,
                   snapshot_incomplete_copy_resume, snapshot_copy_failure_marked_recoverable,
                   negative_control_snapshot_failure_not_recorded_is_caught, snapshot_target_crash_during_copy,
                   snapshot_crash_before_handoff_record, snapshot_kill9_repeated_while_source_writes,
                   snapshot_kill9_repeated_beside_running_applier])
