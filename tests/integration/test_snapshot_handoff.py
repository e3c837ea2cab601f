#!/usr/bin/env python3
"""Integration: the applier's side of the exact snapshot handoff and of holds (docs/snapshot.md
"The applier's rule", "Verify and filtered reseed: holds"), with real processes.

The source holds data before its flow exists; the target starts with empty tables. The copy of
each chunk is driven from here, statement by statement, with the copy protocol's own SQL
(docs/snapshot.md "The copy of one chunk": the chunk row FOR UPDATE on the target, a source
REPEATABLE READ transaction and its pg_current_snapshot(), the skip check, the range DELETE, the
rows, the chunk marked copied with its snapshot), so interleavings with source transactions and the
applier are exact, not left to timing. (`trellara snapshot` runs the same protocol.)

  snapshot_exported_visibility_boundary
      three chunks copied while source transactions are committed before a chunk's snapshot, in
      progress while it is taken (in its xip: committed on the source, invisible to the copy), and
      after it, including key-moving UPDATEs across chunks in both directions; the applier decides
      every change afterwards (all chunks copied, the batch path): what the copy holds is left out,
      the rest applied — a DELETE of the old key alone when only the old row's chunk misses the
      update. Source and target are then identical.
  snapshot_handoff_recorded_before_stream_start
      the applier runs from the start, chunks pending: it leaves changes of pending chunks out and
      records each (chunk, xid) in snapshot_skips in the same transaction (nothing of the table is
      applied); a copy sees them (skip check) and removes them. While a copy of a chunk is in
      flight (chunk row FOR UPDATE) the applier waits on that row (FOR SHARE) before deciding a
      transaction of the chunk committed after the copy's snapshot, then applies it. Identical at
      the end.
  snapshot_copy_beside_live_stream_converges
      a pgbench workload (updates, inserts, deletes, key moves across chunks) runs while eight
      chunks are copied one after another and the applier applies; a second table, so far only
      streamed, is registered mid-stream (the running applier reloads its registry) and copied:
      identical at the end.
  truncate_of_a_table_under_snapshot_applies_per_chunk
      TRUNCATE of a table being copied: the key range of a chunk copied before it is deleted, a
      chunk copied after it is left alone, a pending chunk gets a skip; identical at the end.
  registry_change_under_a_transaction_is_retried_not_quarantined
      a registration commits while an applier transaction waits in control_check (the batch path,
      then the one-at-a-time path): refused with TR010, registry reloaded, retried — never
      quarantined, never reported as a failure.
  hold_stops_applier_at_its_lsn_then_releases
      a hold requested at C (the holder holding the hold lock): the applier applies every
      transaction with commit LSN <= C, marks the hold reached, applies nothing after C until the
      holder releases the lock, then goes on; a hold below what it applied is marked passed; an
      idle applier reaches a hold once a relay progress marker covers it.
  negative_control_snapshot_apply_in_copy_is_caught
  negative_control_snapshot_skip_after_copy_is_caught
      the boundary scenario with defect.snapshot_apply_in_copy (a change the copy holds is applied
      again) and with defect.snapshot_skip_after_copy (a change the copy does not hold is left
      out): it must fail with each.

It must never signal a process it did not start (the appliers, psql sessions and pgbench are our
children, stopped by their Popen handles; clusters are stopped by the harness by PID).
"""

import json
import os
import select
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import (CaptureFailure, TRELLARA_BIN, assert_no_backend_crashes, lsn_to_int,  # noqa: E402
                             run_scenarios, scenario, wait_for)
from harness import PG_BIN  # noqa: E402
import flow_pair  # noqa: E402

EXIT_BLOCKED = 3
APPLY_TIMEOUT_S = 180
FLOW = "app"

ITEMS_DDL = "CREATE TABLE public.items (id bigint PRIMARY KEY, v int NOT NULL, note text);\n" \
            "CREATE TABLE public.extra (id bigint PRIMARY KEY, v int NOT NULL, note text);\n" \
            "CREATE TABLE public.unpublished (n int);\n"
THREE_CHUNKS = [(0, None, 100), (1, 100, 200), (2, 200, None)]


# ---- sessions ----------------------------------------------------------------------------

class Session:
    """One psql connection driven statement by statement: send() queues a statement without
    waiting (it may block on a lock), result() waits for its answer, run() does both. An ERROR in
    the answer raises CaptureFailure naming the statement."""

    def __init__(self, cluster, label):
        self.label = label
        self.proc = subprocess.Popen(
            ["stdbuf", "-oL", os.path.join(PG_BIN, "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=0",
             "-h", cluster.socket_dir, "-p", str(cluster.port), "-U", "postgres", "-d", "postgres"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.serial = 0
        self.buffer = b""
        self.pending = None

    def send(self, sql):
        if self.pending:
            raise CaptureFailure(f"session {self.label}: {self.pending[1]!r} is still waiting for its answer")
        self.serial += 1
        marker = f"__trellara_test_{self.serial}__"
        self.proc.stdin.write(f"{sql};\n\\echo {marker}\n".encode())
        self.proc.stdin.flush()
        self.pending = (marker, sql)

    def answered(self, wait_s=0.0):
        """Whether the pending statement's answer arrived (waiting at most wait_s)."""
        marker = (self.pending[0] + "\n").encode()
        deadline = time.monotonic() + wait_s
        while marker not in self.buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.proc.stdout.fileno()], [], [], max(0.0, left))
            if not ready:
                return False
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                raise CaptureFailure(f"session {self.label}: psql ended while waiting for {self.pending[1]!r}")
            self.buffer += chunk
        return True

    def result(self, timeout_s=60):
        marker, sql = self.pending
        if not self.answered(timeout_s):
            raise CaptureFailure(f"session {self.label}: no answer to {sql!r} within {timeout_s}s")
        text, _, self.buffer = self.buffer.partition((marker + "\n").encode())
        self.pending = None
        out = text.decode(errors="replace").strip()
        if "ERROR:" in out:
            raise CaptureFailure(f"session {self.label}: {sql!r} failed: {out}")
        return out

    def run(self, sql, timeout_s=60):
        self.send(sql)
        return self.result(timeout_s)

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()  # our own child, by its Popen handle
                self.proc.wait()


# ---- the flow pair -----------------------------------------------------------------------

class HandoffPair(flow_pair.FlowPair):
    """A source holding `items` rows before its flow exists, and a target with the same (empty)
    tables; stops both by PID."""

    def __init__(self, name, source_rows_sql):
        super().__init__(name, source_sql=ITEMS_DDL, flow=FLOW, with_source=False,
                         publication="CREATE PUBLICATION pub FOR TABLE public.items, public.extra")
        self.source_rows_sql = source_rows_sql
        self.sessions = []
        self.appliers = []

    def prepare(self):
        super().prepare()
        self.source.psql(self.source_rows_sql)  # data that exists before the flow: only a copy brings it

    def ready(self):
        # The applier bootstraps the target's trellara schema; run it once so the registry tables
        # exist before anything is registered.
        apply_until_caught_up(self, None, 0)

    def session(self, cluster, label):
        s = Session(cluster, label)
        self.sessions.append(s)
        return s

    def __exit__(self, exc_type, exc, tb):
        for proc in self.appliers:
            if proc.poll() is None:
                proc.kill()  # our own child
                proc.communicate(timeout=30)
        for s in self.sessions:
            s.close()
        return super().__exit__(exc_type, exc, tb)


def defect_env(defect):
    if not defect:
        return None
    return dict(os.environ, TRELLARA_FAULTS=f"{defect}:1:defect")


def apply_argv(pair, env, until_caught_up):
    argv = [TRELLARA_BIN]
    if env and "defect." in env.get("TRELLARA_FAULTS", ""):
        argv.append("--enable-test-defects")
    argv += ["apply", "--config", pair.config]
    if until_caught_up:
        argv.append("--until-caught-up")
    return argv


def apply_until_caught_up(pair, env, expect_code=0):
    result = subprocess.run(apply_argv(pair, env, True), capture_output=True, text=True, timeout=APPLY_TIMEOUT_S,
                            env=env)
    lines = [line for line in result.stdout.splitlines() if line.startswith("apply flow=")]
    print(f"apply --until-caught-up (exit {result.returncode}): {lines[-1] if lines else result.stderr.strip()[-600:]}")
    if result.returncode != expect_code:
        raise CaptureFailure(f"trellara apply exited {result.returncode}, expected {expect_code}\n"
                             f"stdout: {result.stdout[-2000:]}\nstderr: {result.stderr[-3000:]}")
    return result


def start_applier(pair, env=None):
    proc = subprocess.Popen(apply_argv(pair, env, False), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    pair.appliers.append(proc)
    wait_for("the applier's target session", lambda: proc.poll() is not None or pair.target.query(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'trellara/app'") == "1", 60)
    if proc.poll() is not None:
        out, err = proc.communicate()
        raise CaptureFailure(f"the applier exited {proc.returncode} at start: {err[-2000:]}")
    return proc


def stop_applier(proc, expect_code=0):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # our own child: stops at the next transaction boundary
    out, err = proc.communicate(timeout=120)
    print(f"applier stopped (exit {proc.returncode}): {out.strip().splitlines()[-1] if out.strip() else ''}")
    if proc.returncode != expect_code:
        raise CaptureFailure(f"the applier exited {proc.returncode}, expected {expect_code}: {err[-3000:]}")
    return out, err


def items_digest(cluster, table="items"):
    return cluster.query("SELECT count(*) || ' ' || coalesce(md5(string_agg(t::text, ',' ORDER BY id)), '-') "
                         f"FROM public.{table} t")


def assert_identical(pair, label):
    want, have = items_digest(pair.source, "extra"), items_digest(pair.target, "extra")
    if want != have:
        raise CaptureFailure(f"{label}: source and target differ in public.extra: source {want}, target {have}")
    want, have = items_digest(pair.source), items_digest(pair.target)
    print(f"{label}: source items {want}, target items {have}")
    if want != have:
        diff = pair.target.query("SELECT count(*) FROM public.items")
        raise CaptureFailure(f"{label}: source and target items differ (target holds {diff} rows); first source "
                             f"rows missing or different on the target: {first_differences(pair)}")
    quarantined = pair.target.query("SELECT count(*) FROM trellara.quarantine WHERE state <> 'resolved'")
    if quarantined != "0":
        raise CaptureFailure(f"{label}: {quarantined} quarantined transactions: "
                             f"{pair.target.query('SELECT xid, reason, detail FROM trellara.quarantine')}")


def first_differences(pair, limit=5):
    src = dict(line.split("|", 1) for line in pair.source.query("SELECT id, v || ',' || coalesce(note, '') FROM "
                                                                "public.items ORDER BY id").splitlines() if line)
    tgt = dict(line.split("|", 1) for line in pair.target.query("SELECT id, v || ',' || coalesce(note, '') FROM "
                                                                "public.items ORDER BY id").splitlines() if line)
    out = []
    for key in sorted(set(src) | set(tgt), key=int):
        if src.get(key) != tgt.get(key):
            out.append(f"id {key}: source {src.get(key)}, target {tgt.get(key)}")
            if len(out) >= limit:
                break
    return "; ".join(out)


# ---- the copy protocol, driven from here ---------------------------------------------------

def visible_in(snapshot_text, xid32):
    """core VisibleIn: the 32-bit xid widened to the 64-bit id nearest the snapshot's xmax."""
    xmin_text, xmax_text, xip_text = snapshot_text.split(":")
    xmin, xmax = int(xmin_text), int(xmax_text)
    xip = {int(x) for x in xip_text.split(",") if x}
    delta = (xid32 - (xmax & 0xFFFFFFFF)) & 0xFFFFFFFF
    if delta >= 1 << 31:
        delta -= 1 << 32
    xid = xmax + delta
    return xid < xmin or (xid < xmax and xid not in xip)


def range_predicate(lo, hi):
    parts = []
    if lo is not None:
        parts.append(f"id >= {lo}")
    if hi is not None:
        parts.append(f"id < {hi}")
    return " AND ".join(parts) if parts else "true"


class Copier:
    """The copy protocol of docs/snapshot.md on two sessions (target, source)."""

    def __init__(self, pair, table="items"):
        self.pair, self.table = pair, table
        self.t = pair.session(pair.target, f"copy-target-{table}")
        self.s = pair.session(pair.source, f"copy-source-{table}")
        self.chunks = {}

    def register(self, chunks, run_id="r1"):
        """Registers the table with `chunks` [(no, lo, hi)], all pending, under the control lock,
        bumping the control version in the same transaction."""
        self.chunks = {no: (lo, hi) for no, lo, hi in chunks}
        values = ", ".join(f"('{FLOW}', 'public', '{self.table}', {no}, {lo if lo is not None else 'NULL'}, "
                           f"{hi if hi is not None else 'NULL'}, 'pending')" for no, lo, hi in chunks)
        self.t.run("BEGIN")
        self.t.run(f"SELECT pg_advisory_xact_lock(hashtextextended('trellara control {FLOW}', 0))")
        self.t.run(f"INSERT INTO trellara.snapshot_runs (flow, run_id, kind, state) VALUES ('{FLOW}', '{run_id}', "
                   f"'snapshot', 'copying') ON CONFLICT DO NOTHING")
        self.t.run(f"INSERT INTO trellara.snapshot_tables (flow, schema_name, table_name, run_id, state, key_column, "
                   f"chunks) VALUES ('{FLOW}', 'public', '{self.table}', '{run_id}', 'copying', 'id', {len(chunks)})")
        self.t.run(f"INSERT INTO trellara.snapshot_chunks (flow, schema_name, table_name, chunk_no, lo, hi, state) "
                   f"VALUES {values}")
        bump_control(self.t)
        self.t.run("COMMIT")

    # Steps 1-4 of one chunk; finish() is step 5. Returns the snapshot, or None when already copied.
    def begin_copy(self, no):
        lo, hi = self.chunks[no]
        self.t.run("BEGIN")
        state = self.t.run(f"SELECT state FROM trellara.snapshot_chunks WHERE flow = '{FLOW}' AND schema_name = "
                           f"'public' AND table_name = '{self.table}' AND chunk_no = {no} FOR UPDATE")
        if state == "copied":
            self.t.run("COMMIT")
            return None
        for attempt in range(100):
            self.s.run("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            snapshot = self.s.run("SELECT pg_current_snapshot()")
            skips = [int(x) for x in self.t.run(
                f"SELECT xid FROM trellara.snapshot_skips WHERE flow = '{FLOW}' AND schema_name = 'public' AND "
                f"table_name = '{self.table}' AND chunk_no = {no}").split()]
            if all(visible_in(snapshot, x) for x in skips):
                break
            # A transaction the applier left out is not yet visible here: a newer snapshot.
            self.s.run("ROLLBACK")
            time.sleep(0.1)
        else:
            raise CaptureFailure(f"chunk {no}: no source snapshot saw every skipped transaction")
        self.t.run(f"DELETE FROM public.{self.table} WHERE {range_predicate(lo, hi)}")
        rows = self.s.run(f"SELECT string_agg(format('(%s, %s, %L)', id, v, note), ', ' ORDER BY id) "
                          f"FROM public.{self.table} WHERE {range_predicate(lo, hi)}")
        if rows:
            self.t.run(f"INSERT INTO public.{self.table} (id, v, note) VALUES {rows}")
        self.copying = (no, snapshot, rows.count("(") if rows else 0)
        return snapshot

    def finish(self):
        no, snapshot, count = self.copying
        self.t.run(f"UPDATE trellara.snapshot_chunks SET state = 'copied', snapshot = '{snapshot}', "
                   f"rows_copied = {count}, copied_at = now() WHERE flow = '{FLOW}' AND schema_name = 'public' AND "
                   f"table_name = '{self.table}' AND chunk_no = {no}")
        self.t.run(f"DELETE FROM trellara.snapshot_skips WHERE flow = '{FLOW}' AND schema_name = 'public' AND "
                   f"table_name = '{self.table}' AND chunk_no = {no}")
        self.t.run("COMMIT")
        self.s.run("COMMIT")
        print(f"copied chunk {no} of {self.table}: {count} rows in snapshot {snapshot}")

    def copy(self, no):
        if self.begin_copy(no) is not None:
            self.finish()


def bump_control(session):
    session.run(f"INSERT INTO trellara.apply_control (flow, version) VALUES ('{FLOW}', 1) ON CONFLICT (flow) DO "
                f"UPDATE SET version = trellara.apply_control.version + 1, updated_at = now()")


def skips_of(pair, chunk_no=None):
    where = f" AND chunk_no = {chunk_no}" if chunk_no is not None else ""
    return pair.target.query(f"SELECT count(*) FROM trellara.snapshot_skips WHERE flow = '{FLOW}'{where}")


# ---- scenarios -----------------------------------------------------------------------------

# Ids 1..300 except those ending in 5, which key moves and inserts use.
SPARSE_ROWS = "INSERT INTO public.items SELECT g, g, 'pre ' || g FROM generate_series(1, 300) g WHERE g % 10 <> 5;"


def boundary_run(label, env=None):
    """The visibility-boundary interleaving; returns the finished pair's applier result."""
    with HandoffPair(label, SPARSE_ROWS) as pair:
        src = pair.source
        copier = Copier(pair)
        copier.register(THREE_CHUNKS)
        # T0: committed before every chunk's snapshot (in every copy).
        src.query("BEGIN; INSERT INTO public.items VALUES (55, 1, 't0'); "
                  "UPDATE public.items SET v = v + 1 WHERE id = 150; COMMIT;")
        # T1: in progress while chunk 0's snapshot is taken (in its xip), committed right after.
        t1 = pair.session(src, "t1")
        t1.run("BEGIN")
        t1.run("INSERT INTO public.items VALUES (65, 1, 't1')")
        t1.run("UPDATE public.items SET v = v + 1000 WHERE id = 250")
        t1_xid = int(t1.run("SELECT txid_current() % 4294967296"))
        snapshot0 = copier.begin_copy(0)
        if visible_in(snapshot0, t1_xid):
            raise CaptureFailure(f"T1 (xid {t1_xid}) is visible in chunk 0's snapshot {snapshot0}: the scenario is void")
        copier.finish()
        t1.run("COMMIT")
        # T2: after chunk 0's copy, before chunk 1's: moves a row from chunk 0 to chunk 1.
        src.query("UPDATE public.items SET id = 125 WHERE id = 10;")
        copier.copy(1)
        # T3: after chunks 0 and 1: moves it back (1 -> 0), deletes in chunk 2 (before its copy).
        src.query("BEGIN; UPDATE public.items SET id = 35 WHERE id = 125; DELETE FROM public.items WHERE id = 250; "
                  "UPDATE public.items SET v = v + 7 WHERE id = 150; COMMIT;")
        copier.copy(2)
        # T4: after every copy: an insert and a move from chunk 2 to chunk 0.
        src.query("BEGIN; INSERT INTO public.items VALUES (205, 5, 't4'); "
                  "UPDATE public.items SET id = 95 WHERE id = 210; UPDATE public.items SET note = NULL WHERE id = 1; "
                  "COMMIT;")
        flow_pair.wait_log_covers_source(src, FLOW, timeout_s=90)
        if pair.target.query("SELECT count(*) FROM trellara.applied_transactions") != "0":
            raise CaptureFailure("the applier applied something before the scenario ran it")
        result = apply_until_caught_up(pair, env, 0)
        assert_identical(pair, label)
        if "snapshot_in_copy=0 " in result.stdout + " ":
            raise CaptureFailure(f"{label}: the applier left nothing out as in the copy: {result.stdout[-500:]}")
        assert_no_backend_crashes(pair.source, pair.target)
        return result


@scenario(seed_rows=["snapshot_exported_visibility_boundary"], suite="snapshot",
          invariants=["a streamed change is applied iff its transaction is not visible in its chunk's snapshot",
                      "target equals source"])
def snapshot_exported_visibility_boundary():
    boundary_run("snap-boundary")
    print("ok: snapshot_exported_visibility_boundary")


def applied_count(pair):
    return int(pair.target.query("SELECT count(*) FROM trellara.applied_transactions"))


@scenario(seed_rows=["snapshot_handoff_recorded_before_stream_start"], suite="snapshot",
          invariants=["changes to pending chunks are recorded as skips and seen by the copy's snapshot",
                      "target equals source"])
def snapshot_handoff_recorded_before_stream_start(env=None, label="snap-stream"):
    with HandoffPair(label, SPARSE_ROWS) as pair:
        src = pair.source
        copier = Copier(pair)
        copier.register(THREE_CHUNKS)
        applier = start_applier(pair, env)
        # T5 touches all three pending chunks: left out, one skip per chunk, nothing of items applied.
        before = applied_count(pair)
        src.query("UPDATE public.items SET v = v + 1 WHERE id IN (20, 120, 220);")
        wait_for("the applier to commit T5", lambda: applied_count(pair) > before, 60)
        if skips_of(pair) != "3":
            raise CaptureFailure(f"expected 3 skips (one per pending chunk), found {skips_of(pair)}: "
                                 f"{pair.target.query('SELECT * FROM trellara.snapshot_skips')}")
        if pair.target.query("SELECT count(*) FROM public.items") != "0":
            raise CaptureFailure("the applier wrote to chunks that were pending")
        copier.copy(0)
        if skips_of(pair, 0) != "0":
            raise CaptureFailure("the copy of chunk 0 did not remove its skips")
        # T6: chunk 0 copied (after T6? no: before) -> applied; chunk 1 pending -> skipped.
        before = applied_count(pair)
        src.query("BEGIN; UPDATE public.items SET v = v + 100 WHERE id = 30; "
                  "INSERT INTO public.items VALUES (135, 2, 't6'); COMMIT;")
        wait_for("the applier to commit T6", lambda: applied_count(pair) > before, 60)
        if skips_of(pair, 1) != "2":
            raise CaptureFailure(f"chunk 1 should hold the skips of T5 and T6, holds {skips_of(pair, 1)}")
        if pair.target.query("SELECT v FROM public.items WHERE id = 30") != "130":
            raise CaptureFailure(f"T6's update of a copied chunk was not applied: "
                                 f"{pair.target.query('SELECT * FROM public.items WHERE id = 30')}")
        # A copy of chunk 1 in flight: T7 commits after its snapshot; the applier must wait for the
        # copy (FOR SHARE on the chunk row), then apply T7.
        snapshot1 = copier.begin_copy(1)
        before = applied_count(pair)
        src.query("UPDATE public.items SET v = v + 1, note = 't7' WHERE id = 140;")
        wait_for("the applier to wait for the copy of chunk 1 (a lock wait on the target)", lambda: pair.target.query(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'trellara/app' AND "
            "wait_event_type = 'Lock'") == "1", 60)
        time.sleep(0.5)
        if applied_count(pair) != before:
            raise CaptureFailure("the applier committed T7 while the copy of its chunk was in flight")
        copier.finish()
        wait_for("the applier to commit T7 after the copy", lambda: applied_count(pair) > before, 60)
        if pair.target.query("SELECT note FROM public.items WHERE id = 140") != "t7":
            raise CaptureFailure(f"T7 (not in chunk 1's snapshot {snapshot1}) was not applied after the copy")
        copier.copy(2)
        # T8: after every copy: key moves across chunks both ways, an insert, a delete.
        src.query("BEGIN; UPDATE public.items SET id = 245 WHERE id = 40; UPDATE public.items SET id = 45 WHERE id = 240;"
                  " INSERT INTO public.items VALUES (5, 8, 't8'); DELETE FROM public.items WHERE id = 160; COMMIT;")
        flow_pair.wait_log_covers_source(src, FLOW, timeout_s=90)
        stop_applier(applier, 0)
        apply_until_caught_up(pair, env, 0)
        assert_identical(pair, label)
        if skips_of(pair) != "0":
            raise CaptureFailure(f"skips left after every chunk was copied: {skips_of(pair)}")
        assert_no_backend_crashes(pair.source, pair.target)
    print("ok: snapshot_handoff_recorded_before_stream_start")


LIVE_ROWS = "INSERT INTO public.items SELECT 3 * g, g, 'pre ' || g FROM generate_series(1, 1000) g;"
# Original ids are multiples of 3; a key move mirrors one to 3001 - id (1 mod 3: never taken, and
# its source no longer exists when it is drawn again), across chunks; inserts use ids 2 mod 3.
LIVE_SCRIPT = """\\set k random(1, 1000)
\\set m random(1, 1000)
\\set i random(1, 1000)
\\set d random(1, 3000)
BEGIN;
UPDATE items SET v = v + 1 WHERE id = 3 * :k;
UPDATE items SET id = 3001 - id WHERE id = 3 * :m;
INSERT INTO items VALUES (3 * :i - 1, :i, 'w') ON CONFLICT (id) DO UPDATE SET v = items.v + 1, note = 'again';
END;
DELETE FROM items WHERE id = :d;
INSERT INTO extra VALUES (:d, 1, 'x') ON CONFLICT (id) DO UPDATE SET v = extra.v + 1;
"""
LIVE_CHUNKS = [(0, None, 375)] + [(n, 375 * n, 375 * (n + 1)) for n in range(1, 7)] + [(7, 2625, None)]


def snapshot_copy_beside_live_stream_converges():
    with HandoffPair("snap-live", LIVE_ROWS) as pair:
        src = pair.source
        script = os.path.join(pair.work.name, "live.sql")
        with open(script, "w") as out:
            out.write(LIVE_SCRIPT)
        copier = Copier(pair)
        copier.register(LIVE_CHUNKS)
        applier = start_applier(pair)
        bench = subprocess.Popen([os.path.join(PG_BIN, "pgbench"), "-n", "-c", "3", "-j", "1", "-T", "600", "-R", "150", "--max-tries", "20",
                                  "-f", script, "-h", src.socket_dir, "-p", str(src.port), "-U", "postgres", "postgres"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(2)
            # public.extra (only streamed rows so far) is registered while the stream applies it:
            # the applier's transactions in flight are refused (TR010) and retried with the new
            # registry; its copy replaces what the stream wrote to each chunk.
            extra = Copier(pair, "extra")
            extra.register([(0, None, 1500), (1, 1500, None)], run_id="r2")
            for no, _, _ in LIVE_CHUNKS:
                copier.copy(no)
                if no in (0, 1):
                    extra.copy(no)
                time.sleep(0.5)
            time.sleep(2)
        finally:
            if bench.poll() is None:
                # Our own child. SIGTERM, not SIGINT: a shell that starts the suite in the background
                # without job control leaves SIGINT ignored in every process below it, pgbench
                # included (a clean-clone run started that way timed out here).
                bench.send_signal(signal.SIGTERM)
            out, err = bench.communicate(timeout=60)
        processed = [line for line in out.splitlines() if "processed" in line]
        print(f"pgbench: {processed[0] if processed else err.strip()[-300:]}")
        flow_pair.wait_log_covers_source(src, FLOW, timeout_s=90)
        _, err = stop_applier(applier, 0)
        if "event=registry_loaded version=2" not in err:
            raise CaptureFailure(f"the running applier did not reload the registry when public.extra was registered: "
                                 f"{err[-2000:]}")
        result = apply_until_caught_up(pair, None, 0)
        assert_identical(pair, "snap-live")
        dedup = pair.target.query("SELECT count(*) FROM trellara.applied_transactions")
        print(f"snap-live: {dedup} transactions applied or decided; last run: "
              f"{result.stdout.strip().splitlines()[-1]}")
        assert_no_backend_crashes(pair.source, pair.target)
    print("ok: snapshot_copy_beside_live_stream_converges")


def lock_waiters(pair):
    return pair.target.query("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'trellara/app' AND "
                             "wait_event_type = 'Lock'")


def truncate_of_a_table_under_snapshot_applies_per_chunk():
    """TRUNCATE of a table being copied: in a chunk copied before it, the chunk's key range is
    deleted; in a chunk copied after it, nothing (the copy is empty there); in a pending chunk, a
    skip is recorded and the copy made later holds the truncation."""
    with HandoffPair("snap-truncate", SPARSE_ROWS) as pair:
        src = pair.source
        copier = Copier(pair)
        copier.register(THREE_CHUNKS)
        copier.copy(0)
        src.query("BEGIN; TRUNCATE public.items; INSERT INTO public.items VALUES (5, 1, 'after'), (105, 1, 'after'); "
                  "COMMIT;")
        copier.copy(1)
        flow_pair.wait_log_covers_source(src, FLOW, timeout_s=90)
        apply_until_caught_up(pair, None, 0)
        if skips_of(pair, 2) != "1":
            raise CaptureFailure(f"the TRUNCATE should have left a skip in pending chunk 2, found {skips_of(pair, 2)}")
        have = pair.target.query("SELECT string_agg(id::text, ',' ORDER BY id) FROM public.items WHERE id < 200")
        if have != "5,105":
            raise CaptureFailure(f"after the TRUNCATE chunks 0 and 1 hold ids {have}, expected 5,105")
        copier.copy(2)
        assert_identical(pair, "snap-truncate")
        assert_no_backend_crashes(pair.source, pair.target)
    print("ok: truncate_of_a_table_under_snapshot_applies_per_chunk")


def registry_change_under_a_transaction_is_retried_not_quarantined():
    """A registration commits while an applier transaction waits in control_check (batch path, then
    one-at-a-time path): the transaction is refused with TR010, the registry reloaded, the
    transaction retried with it; nothing is quarantined."""
    with HandoffPair("snap-tr010", SPARSE_ROWS) as pair:
        src = pair.source
        copier = Copier(pair)
        copier.register(THREE_CHUNKS)
        applier = start_applier(pair)
        registrar = pair.session(pair.target, "registrar")
        for path, sql in (("batch", "INSERT INTO public.extra VALUES (1, 1, 'batch');"),
                          ("one-at-a-time", "UPDATE public.items SET v = v + 1 WHERE id = 20;")):
            registrar.run("BEGIN")
            registrar.run(f"SELECT pg_advisory_xact_lock(hashtextextended('trellara control {FLOW}', 0))")
            before = applied_count(pair)
            src.query(sql)
            wait_for(f"the applier's {path} transaction to wait in control_check", lambda: lock_waiters(pair) == "1", 60)
            bump_control(registrar)
            registrar.run("COMMIT")
            wait_for(f"the {path} transaction to commit after the registry reload", lambda: applied_count(pair) > before,
                     60)
        if skips_of(pair, 0) != "1":
            raise CaptureFailure(f"the retried transaction should have recorded a skip of pending chunk 0, found "
                                 f"{skips_of(pair, 0)}")
        for no, _, _ in THREE_CHUNKS:
            copier.copy(no)
        flow_pair.wait_log_covers_source(src, FLOW, timeout_s=90)
        _, err = stop_applier(applier, 0)
        for version in ("version=2", "version=3"):
            if f"event=registry_loaded {version}" not in err:
                raise CaptureFailure(f"the applier did not reload the registry at {version}: {err[-2000:]}")
        if "retrying alone after a failure" in err:
            raise CaptureFailure(f"a TR010 was reported as a failure: {err[-2000:]}")
        apply_until_caught_up(pair, None, 0)
        assert_identical(pair, "snap-tr010")
        assert_no_backend_crashes(pair.source, pair.target)
    print("ok: registry_change_under_a_transaction_is_retried_not_quarantined")


def request_hold(session, hold_id, lsn):
    session.run("BEGIN")
    session.run(f"SELECT pg_advisory_xact_lock(hashtextextended('trellara control {FLOW}', 0))")
    session.run(f"INSERT INTO trellara.apply_holds (flow, hold_id, lsn, state) VALUES ('{FLOW}', '{hold_id}', "
                f"'{lsn}', 'requested')")
    bump_control(session)
    session.run("COMMIT")


def remove_hold(session, hold_id):
    session.run("BEGIN")
    session.run(f"SELECT pg_advisory_xact_lock(hashtextextended('trellara control {FLOW}', 0))")
    session.run(f"DELETE FROM trellara.apply_holds WHERE flow = '{FLOW}' AND hold_id = '{hold_id}'")
    bump_control(session)
    session.run("COMMIT")


def hold_state(pair, hold_id):
    return pair.target.query(f"SELECT state || '|' || coalesce(applied_lsn::text, '') FROM trellara.apply_holds "
                             f"WHERE flow = '{FLOW}' AND hold_id = '{hold_id}'")


def hold_stops_applier_at_its_lsn_then_releases():
    with HandoffPair("snap-hold", "INSERT INTO public.items VALUES (1, 1, 'pre');") as pair:
        src = pair.source
        holder = pair.session(pair.target, "holder")
        holder.run(f"SELECT pg_advisory_lock(hashtextextended('trellara hold {FLOW}', 0))")
        src.query("INSERT INTO public.items SELECT g, g, 'before' FROM generate_series(1000, 1019) g;")
        hold_lsn = src.query("SELECT pg_current_wal_lsn()")
        src.query("INSERT INTO public.items SELECT g, g, 'after' FROM generate_series(2000, 2019) g;")
        src.query("UPDATE public.items SET note = 'after too' WHERE id = 1000;")
        request_hold(holder, "h1", hold_lsn)
        flow_pair.wait_log_covers_source(src, FLOW, timeout_s=90)
        applier = start_applier(pair)
        wait_for("hold h1 to be reached", lambda: hold_state(pair, "h1").startswith("reached"), 60)
        state = hold_state(pair, "h1")
        applied_lsn = state.split("|")[1]
        if lsn_to_int(applied_lsn) > lsn_to_int(hold_lsn):
            raise CaptureFailure(f"hold h1 at {hold_lsn} reached with applied_lsn {applied_lsn} beyond it")
        time.sleep(1.0)  # held: nothing after the hold's LSN may be applied meanwhile
        before = pair.target.query("SELECT count(*) FILTER (WHERE note = 'before') || ' ' || "
                                   "count(*) FILTER (WHERE note LIKE 'after%') FROM public.items")
        if before != "20 0":
            raise CaptureFailure(f"at hold h1 the target holds (before, after) = {before}, expected 20 0")
        status = subprocess.run([TRELLARA_BIN, "status", "--config", pair.config, "--format", "json"],
                                capture_output=True, text=True, timeout=60)
        held = json.loads(status.stdout).get("held") if status.returncode in (0, 1, 3) and status.stdout else None
        if not held or "h1" not in held:
            raise CaptureFailure(f"trellara status does not show the applier held at h1: {status.stdout[-1500:]} "
                                 f"{status.stderr[-500:]}")
        print(f"status while held: {held}")
        # The holder reads the target here, then releases: the applier goes on.
        remove_hold(holder, "h1")
        holder.run(f"SELECT pg_advisory_unlock(hashtextextended('trellara hold {FLOW}', 0))")
        wait_for("the applier to apply past the hold", lambda: pair.target.query(
            "SELECT count(*) FROM public.items WHERE note LIKE 'after%'") == "21", 60)
        # A hold below what the target already holds: passed.
        request_hold(holder, "h2", "0/10")
        wait_for("hold h2 to be marked passed", lambda: hold_state(pair, "h2").startswith("passed"), 60)
        remove_hold(holder, "h2")
        # An idle applier reaches a hold once a progress marker covers it: WAL the flow does not
        # publish moves the relay past the hold's LSN.
        holder.run(f"SELECT pg_advisory_lock(hashtextextended('trellara hold {FLOW}', 0))")
        idle_lsn = src.query("SELECT pg_current_wal_lsn()")
        request_hold(holder, "h3", idle_lsn)
        src.query("INSERT INTO public.unpublished SELECT generate_series(1, 1000);")
        wait_for("idle hold h3 to be reached through a progress marker",
                 lambda: hold_state(pair, "h3").startswith("reached"), 90, 0.5)
        src.query("INSERT INTO public.items VALUES (3000, 3, 'after idle hold');")
        flow_pair.wait_log_covers_source(src, FLOW, timeout_s=90)
        time.sleep(1.0)
        if pair.target.query("SELECT count(*) FROM public.items WHERE id = 3000") != "0":
            raise CaptureFailure("the applier applied a transaction after idle hold h3 while it was held")
        remove_hold(holder, "h3")
        holder.run(f"SELECT pg_advisory_unlock(hashtextextended('trellara hold {FLOW}', 0))")
        wait_for("the applier to apply past hold h3", lambda: pair.target.query(
            "SELECT count(*) FROM public.items WHERE id = 3000") == "1", 60)
        out, err = stop_applier(applier, 0)
        for event in ("event=held hold=h1", "event=hold_released hold=h1", "event=hold_passed hold=h2",
                      "event=held hold=h3"):
            if event not in err:
                raise CaptureFailure(f"the applier did not report {event}: {err[-2000:]}")
        # Rows that existed before the flow were never copied here: compare what the stream carried.
        missing = pair.target.query("SELECT count(*) FROM public.items")
        if missing != "41":
            raise CaptureFailure(f"the target holds {missing} items rows, expected the 41 streamed ones")
        assert_no_backend_crashes(pair.source, pair.target)
    print("ok: hold_stops_applier_at_its_lsn_then_releases")


def negative_control(defect):
    label = "snap-neg-" + defect.split(".")[-1].replace("_", "-")[:20]
    try:
        boundary_run(label, defect_env(defect))
    except CaptureFailure as caught:
        print(f"negative control {defect}: caught: {str(caught).splitlines()[0][:300]}")
        return
    raise CaptureFailure(f"negative control: with {defect} the handoff scenario passed anyway — it cannot catch "
                         f"that defect")


@scenario(suite="snapshot", defect="snapshot_apply_in_copy", pairs_with="snapshot_exported_visibility_boundary")
def negative_control_snapshot_apply_in_copy_is_caught():
    negative_control("defect.snapshot_apply_in_copy")
    print("ok: negative_control_snapshot_apply_in_copy_is_caught")


@scenario(suite="snapshot", defect="snapshot_skip_after_copy",
          pairs_with="snapshot_handoff_recorded_before_stream_start")
def negative_control_snapshot_skip_after_copy_is_caught():
    negative_control("defect.snapshot_skip_after_copy")
    print("ok: negative_control_snapshot_skip_after_copy_is_caught")


SCENARIOS = (snapshot_exported_visibility_boundary, snapshot_handoff_recorded_before_stream_start,
             snapshot_copy_beside_live_stream_converges, truncate_of_a_table_under_snapshot_applies_per_chunk,
             registry_change_under_a_transaction_is_retried_not_quarantined,
             hold_stops_applier_at_its_lsn_then_releases,
             negative_control_snapshot_apply_in_copy_is_caught, negative_control_snapshot_skip_after_copy_is_caught)

if __name__ == "__main__":
    run_scenarios(SCENARIOS)
