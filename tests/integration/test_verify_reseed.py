#!/usr/bin/env python3
"""Integration: `trellara verify` at an exact held point and `trellara reseed --where` (docs/snapshot.md
"Verify and filtered reseed: holds").

Each scenario starts a source (pgbench scale 1 plus `items` (int key) and `tags` (text key)) and a
target with the same tables — the target's `items` has a target-owned column `note` the source
lacks — a flow over all of them, and `trellara apply` as a daemon.

  verify_matches_while_source_and_applier_live
      a rate-limited pgbench workload runs on the source and the applier follows it; verify (JSON,
      small chunks, 3 jobs) exits 0, every table matches, pgbench_accounts was compared in several
      chunks, pgbench_history (no key) and tags (text key) in one; rows/s are reported per side.
  verify_names_corrupted_row_key_range
      one target row of pgbench_accounts changed directly: verify exits 1 naming a key range of at
      most 1000 rows that holds that aid, with the reseed command; running that command repairs it
      and verify exits 0.
  verify_without_applier_exits_2
      with no applier running verify exits 2 saying so (within --timeout), leaving no hold row.
  verify_retries_a_passed_hold
      (always with the stand-in below) the first two holds are answered 'passed': verify retries
      with a new slot each time and matches at the third point.
  filtered_reseed_preserves_out_of_scope_rows
      target rows of `items` damaged inside (id <= 200: a changed row, a missing row, an extra row)
      and outside (id 500) the filter; `reseed --where 'id <= 200'` repairs the inside, leaves id
      500 as it was, keeps every row's target-owned `note`, resolves the open quarantine row naming
      items at or before its point (not the one naming tags); a second reseed of id 500 and verify
      exit 0 end it.
  negative_control_reseed_delete_ignores_filter_is_caught
      the same checks with defect.reseed_delete_ignores_filter (the delete step of reseed --where
      without the filter: every unstaged target row goes): they must fail.
  verify_does_not_compare_a_table_still_being_copied
      (stand-in) a table whose snapshot_tables state is not handoff_ready is reported `copying`, not
      compared: exit 2 naming it when the rest matches, 1 when another table differs.
  verify_and_reseed_hostile_identifiers
      (stand-in) schema, table and column names with a comma, a quote, a semicolon and mixed case:
      chunks, narrowing and the printed (shell- and SQL-quoted) reseed command work.
  verify_table_without_int_key_is_one_chunk
      `tags` (text primary key) is compared as one chunk; a damaged row makes verify exit 1 naming
      the whole table with a reseed command without --where.

TRELLARA_APPLY_BIN: the applier's binary (default TRELLARA_BIN).
TRELLARA_HOLD_SIMULATION=1: until the applier answers holds (applier/apply_*.cpp), a Python
stand-in plays its part: it holds the applier's advisory lock (so apply_status says running),
marks each requested hold `reached` and then waits on the hold lock shared, like the applier. The
target is then only written by `apply --until-caught-up` before each verify and the workload is
paused while verifying (the stand-in cannot stop a real applier at C).
Clusters are stopped by PID by the harness; the applier is our child, stopped by its Popen handle.
"""

import json
import os
import shlex
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import (CaptureFailure, PsqlSession, TRELLARA_BIN, assert_no_backend_crashes,  # noqa: E402
                             run_pgbench, run_scenarios, scenario, wait_for, checks_fail_under_defect)
from harness import PG_BIN  # noqa: E402
import flow_pair  # noqa: E402

SIMULATE = os.environ.get("TRELLARA_HOLD_SIMULATION") == "1"
# The applier's binary (default: the one under test); another build may stand in for it while the
# two sides of holds are developed apart.
APPLY_BIN = os.environ.get("TRELLARA_APPLY_BIN", TRELLARA_BIN)
EXIT_MISMATCH = 1
EXIT_COULD_NOT_VERIFY = 2

EXTRA_DDL_SOURCE = """
CREATE TABLE public.items (id int PRIMARY KEY, name text NOT NULL, qty int NOT NULL);
CREATE TABLE public.tags (code text PRIMARY KEY, label text);
"""
EXTRA_DDL_TARGET = """
CREATE TABLE public.items (id int PRIMARY KEY, name text NOT NULL, qty int NOT NULL, note text);
CREATE TABLE public.tags (code text PRIMARY KEY, label text);
"""
TABLES = "pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history, items, tags"


def trellara(*args, expect=0, timeout_s=300, env=None):
    """`trellara args`; `env` naming a defect in TRELLARA_FAULTS adds the test-only switch."""
    started = time.monotonic()
    binary = APPLY_BIN if args[0] == "apply" else TRELLARA_BIN
    switch = ["--enable-test-defects"] if env and "defect." in env.get("TRELLARA_FAULTS", "") else []
    result = subprocess.run([binary, *switch, *args], capture_output=True, text=True, timeout=timeout_s, env=env)
    if result.returncode != expect:
        raise CaptureFailure(f"trellara {' '.join(args)} exited {result.returncode}, expected {expect}\n"
                             f"stdout: {result.stdout[-4000:]}\nstderr: {result.stderr[-4000:]}")
    print(f"trellara {args[0]} exit {result.returncode} in {time.monotonic() - started:.1f}s")
    return result


class HoldStandIn:
    """Plays the applier's side of holds (TRELLARA_HOLD_SIMULATION=1) against a target that
    nothing else writes while verify/reseed run."""

    def __init__(self, target, flow="app", pass_first=0):
        self.target, self.flow = target, flow
        self.pass_first = pass_first  # answer this many holds 'passed' first (the applier was beyond them)
        self.stop = threading.Event()
        self.running_lock = PsqlSession(target)
        self.holds = PsqlSession(target)
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def __enter__(self):
        self.running_lock.query(f"SELECT pg_advisory_lock(hashtextextended('trellara apply {self.flow}', 0))")
        self.thread.start()
        return self

    def loop(self):
        while not self.stop.is_set():
            if self.pass_first > 0:
                if self.holds.query("UPDATE trellara.apply_holds SET state = 'passed', applied_lsn = lsn + 1, "
                                    f"updated_at = now() WHERE flow = '{self.flow}' AND state = 'requested' "
                                    "RETURNING hold_id"):
                    self.pass_first -= 1
                time.sleep(0.1)
                continue
            answered = self.holds.query(
                "UPDATE trellara.apply_holds SET state = 'reached', applied_lsn = lsn, updated_at = now() "
                f"WHERE flow = '{self.flow}' AND state = 'requested' RETURNING hold_id")
            if answered:
                # Like the applier: wait until the holder lets go.
                self.holds.query(f"SELECT pg_advisory_lock_shared(hashtextextended('trellara hold {self.flow}', 0)); "
                                 f"SELECT pg_advisory_unlock_shared(hashtextextended('trellara hold {self.flow}', 0))",
                                 timeout_s=600)
            time.sleep(0.1)

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=30)
        self.holds.close()
        self.running_lock.close()
        return False


class VerifyPair(flow_pair.FlowPair):
    """Source and target clusters with the tables above, a flow, a config naming both, and an
    applier (daemon, or the stand-in plus `apply --until-caught-up` runs)."""

    def __init__(self, name, source_settings=None):
        super().__init__(name, publication=f"CREATE PUBLICATION pub FOR TABLE {TABLES}",
                         source_settings=source_settings)
        self.applier = None
        self.stand_in = None

    def prepare(self):
        run_pgbench(self.source, ["-i", "-s", "1", "-q"])
        self.source.psql(EXTRA_DDL_SOURCE)
        self.source.psql("INSERT INTO items SELECT g, 'item ' || g, g % 17 FROM generate_series(1, 1000) g "
                         "WHERE g % 7 <> 0; INSERT INTO tags SELECT 'tag-' || g, 'label ' || g "
                         "FROM generate_series(1, 300) g; ANALYZE")
        dump = subprocess.run([os.path.join(PG_BIN, "pg_dump"), "-h", self.source.socket_dir, "-p",
                               str(self.source.port), "-U", "postgres", "-t", "pgbench_*", "postgres"],
                              capture_output=True, text=True, check=True)
        self.target.psql(dump.stdout)
        self.target.psql(EXTRA_DDL_TARGET)
        self.target.psql("INSERT INTO items (id, name, qty, note) SELECT g, 'item ' || g, g % 17, 'kept-' || g "
                         "FROM generate_series(1, 1000) g WHERE g % 7 <> 0; "
                         "INSERT INTO tags SELECT 'tag-' || g, 'label ' || g FROM generate_series(1, 300) g")

    def ready(self):
        # The applier's state on the target (apply_status row, holds table).
        trellara("apply", "--config", self.config, "--until-caught-up")

    def start_applier(self, env=None):
        if SIMULATE:
            self.stand_in = HoldStandIn(self.target).__enter__()
            return
        self.applier = subprocess.Popen([APPLY_BIN, "apply", "--config", self.config], env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wait_for("the applier to run", lambda: self.target.query(
            "SELECT applier_running FROM trellara.apply_status() WHERE flow = 'app'") == "t", 60)

    def stop_applier(self):
        if self.stand_in:
            self.stand_in.__exit__(None, None, None)
            self.stand_in = None
        if self.applier:
            if self.applier.poll() is None:
                self.applier.terminate()  # our own child, by its Popen handle
            _, err = self.applier.communicate(timeout=60)
            self.applier = None
            print(f"applier stopped: {err.strip()[-300:]}")
            return err
        return ""

    def settle(self):
        """Simulation only: the target applies everything the source committed before a verify."""
        if not SIMULATE:
            return
        self.wait_log_covers_source(timeout_s=90)
        standing_in = self.stand_in is not None
        if standing_in:  # it holds the applier's lock: `apply` would refuse to run beside it
            self.stop_applier()
        trellara("apply", "--config", self.config, "--until-caught-up")
        if standing_in:
            self.start_applier()

    def verify(self, *extra, expect=0):
        self.settle()
        result = trellara("verify", "--config", self.config, "--format", "json", *extra, expect=expect)
        return json.loads(result.stdout) if result.stdout.strip() else None, result

    def __exit__(self, exc_type, exc, tb):
        self.stop_applier()
        return super().__exit__(exc_type, exc, tb)


def table(report, name):
    for t in report["tables"]:
        if t["table"] == name:
            return t
    raise CaptureFailure(f"verify did not report {name}: {report}")


def start_workload(pair):
    script = os.path.join(pair.work.name, "load.sql")
    with open(script, "w") as out:
        out.write("\\set aid random(1, 100000)\n\\set d random(-100, 100)\n\\set i random(1, 1000)\n"
                  "BEGIN;\nUPDATE pgbench_accounts SET abalance = abalance + :d WHERE aid = :aid;\n"
                  "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (1, 1, :aid, :d, now());\n"
                  "UPDATE items SET qty = qty + 1 WHERE id = :i;\nEND;\n")
    return subprocess.Popen([os.path.join(PG_BIN, "pgbench"), "-h", pair.source.socket_dir, "-p", str(pair.source.port),
                             "-U", "postgres", "-n", "-c", "2", "-j", "1", "-R", "100", "-T", "3600", "-f", script,
                             "postgres"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def stop_workload(load):
    if load.poll() is None:
        load.terminate()  # our own child
    load.communicate(timeout=60)


def verify_matches_while_source_and_applier_live():
    with VerifyPair("verify-live") as pair:
        pair.start_applier()
        load = None if SIMULATE else start_workload(pair)
        try:
            if load:
                time.sleep(3)
            report, _ = pair.verify("--chunk-rows", "20000", "--jobs", "3")
            second, _ = pair.verify("--chunk-rows", "20000", "--jobs", "3")
        finally:
            if load:
                stop_workload(load)
        for r in (report, second):
            if not r["match"] or r["mismatching_tables"]:
                raise CaptureFailure(f"verify under load did not match: {json.dumps(r)[:3000]}")
        accounts = table(report, "public.pgbench_accounts")
        if accounts["chunks"] < 2 or accounts["source"]["rows"] != 100000 or accounts["key_column"] != "aid":
            raise CaptureFailure(f"pgbench_accounts was not compared in key-range chunks: {accounts}")
        for name in ("public.pgbench_history", "public.tags"):
            if table(report, name)["chunks"] != 1:
                raise CaptureFailure(f"{name} has no int key and must be one chunk: {table(report, name)}")
        if report["source"]["rows_per_second"] <= 0 or report["target"]["rows_per_second"] <= 0:
            raise CaptureFailure(f"verify did not report rows/s per side: {report['source']} {report['target']}")
        print(f"verify matched at {report['consistent_lsn']} and {second['consistent_lsn']}: source "
              f"{report['source']['rows_per_second']:.0f} rows/s, target {report['target']['rows_per_second']:.0f} rows/s")
        pair.source.psql("SELECT 1")
        assert_no_backend_crashes(pair.source, pair.target)
        print("ok: verify_matches_while_source_and_applier_live")


def verify_names_corrupted_row_key_range():
    with VerifyPair("verify-corrupt") as pair:
        pair.start_applier()
        pair.target.psql("UPDATE pgbench_accounts SET filler = 'corrupted by the test' WHERE aid = 54321")
        report, result = pair.verify("--chunk-rows", "20000", expect=EXIT_MISMATCH)
        if report["mismatching_tables"] != ["public.pgbench_accounts"]:
            raise CaptureFailure(f"verify did not name exactly pgbench_accounts: {report['mismatching_tables']}")
        ranges = table(report, "public.pgbench_accounts")["mismatching_ranges"]
        if len(ranges) != 1:
            raise CaptureFailure(f"expected one mismatching range: {ranges}")
        r = ranges[0]
        if not (r["lo"] is not None and r["hi"] is not None and r["lo"] <= 54321 < r["hi"]) \
                or r["source_rows"] > 1000 or r["target_rows"] > 1000 or not r["narrowed"]:
            raise CaptureFailure(f"the range does not hold aid 54321 within 1000 rows: {r}")
        if "trellara reseed" not in r["reseed"] or "--where" not in r["reseed"]:
            raise CaptureFailure(f"no reseed command for the range: {r}")
        print(f"verify named {r['key_column']} in [{r['lo']}, {r['hi']}) ({r['source_rows']} rows): {r['reseed']}")
        text = trellara("verify", "--config", pair.config, "--chunk-rows", "20000", expect=EXIT_MISMATCH)
        if "54321" not in text.stdout and str(r["lo"]) not in text.stdout:
            raise CaptureFailure(f"text output does not name the range: {text.stdout}")
        # The printed command repairs it.
        if not r["reseed"].startswith("trellara reseed "):
            raise CaptureFailure(f"unexpected reseed command: {r['reseed']}")
        pair.settle()
        # This build's binary, whatever `trellara` is on PATH.
        subprocess.run(r["reseed"].replace("trellara", shlex.quote(TRELLARA_BIN), 1), shell=True, check=True,
                       timeout=300)
        filler = pair.target.query("SELECT filler FROM pgbench_accounts WHERE aid = 54321")
        if "corrupted" in filler:
            raise CaptureFailure("reseed did not repair aid 54321")
        final, _ = pair.verify()
        if not final["match"]:
            raise CaptureFailure(f"verify after the reseed: {final}")
        print("ok: verify_names_corrupted_row_key_range")


def verify_retries_a_passed_hold():
    """Always with the stand-in (no real applier): it answers the first two holds 'passed'; verify
    retries with new slots and compares at the third point."""
    with VerifyPair("verify-passed") as pair:
        with HoldStandIn(pair.target, pass_first=2):
            result = trellara("verify", "--config", pair.config, "--format", "json")
        report = json.loads(result.stdout)
        if not report["match"] or report["hold_attempts"] != 3:
            raise CaptureFailure(f"verify after two passed holds: {report}")
        if "retrying with a new slot" not in result.stderr:
            raise CaptureFailure(f"verify did not say it retried: {result.stderr}")
        left = pair.target.query("SELECT count(*) FROM trellara.apply_holds")
        if left != "0":
            raise CaptureFailure(f"verify left {left} hold rows behind")
        print("ok: verify_retries_a_passed_hold")


def verify_does_not_compare_a_table_still_being_copied():
    """With the stand-in (a real applier would act on the registry row): a table whose snapshot
    copy is not handoff_ready is not compared; verify exits 2 naming it although the others match,
    and 1 when another table differs."""
    with VerifyPair("verify-copying") as pair:
        pair.target.psql("INSERT INTO trellara.snapshot_tables (flow, schema_name, table_name, run_id, state, chunks) "
                         "VALUES ('app', 'public', 'tags', 'r1', 'copying', 1); "
                         "UPDATE tags SET label = 'not yet copied' WHERE code = 'tag-1'")
        with HoldStandIn(pair.target):
            result = trellara("verify", "--config", pair.config, "--format", "json", expect=EXIT_COULD_NOT_VERIFY)
            report = json.loads(result.stdout)
            tags = table(report, "public.tags")
            if tags["status"] != "copying" or tags["snapshot_state"] != "copying" or report["mismatching_tables"] \
                    or "public.tags (snapshot copying)" not in result.stderr:
                raise CaptureFailure(f"a table being copied: {tags} {result.stderr}")
            pair.target.psql("UPDATE items SET qty = 99 WHERE id = 1")
            result = trellara("verify", "--config", pair.config, expect=EXIT_MISMATCH)
            if "COPYING   public.tags" not in result.stdout or "public.items" not in result.stderr:
                raise CaptureFailure(f"a mismatch beside a table being copied: {result.stdout} {result.stderr}")
        print("ok: verify_does_not_compare_a_table_still_being_copied")


HOSTILE_DDL = """
CREATE SCHEMA "We,ird";
CREATE TABLE "We,ird"."Ta""ble" ("c,1" bigint PRIMARY KEY, "v;x" text, "Mixed" numeric);
INSERT INTO "We,ird"."Ta""ble" SELECT g, 'it''s ' || g, g / 3.0 FROM generate_series(1, 3000) g;
"""


def verify_and_reseed_hostile_identifiers():
    """With the stand-in: a table whose schema, name and columns need quoting (comma, quote,
    semicolon, mixed case) is compared in chunks, a damaged row is narrowed, and the printed reseed
    command (shell- and SQL-quoted) repairs it."""
    with VerifyPair("verify-hostile") as pair:
        pair.source.psql(HOSTILE_DDL)
        pair.target.psql(HOSTILE_DDL)
        pair.source.psql('ALTER PUBLICATION pub ADD TABLE "We,ird"."Ta""ble"')
        name = 'We,ird.Ta"ble'
        pair.target.psql('UPDATE "We,ird"."Ta""ble" SET "v;x" = \'damaged\' WHERE "c,1" = 2500')
        with HoldStandIn(pair.target):
            result = trellara("verify", "--config", pair.config, "--table", name, "--chunk-rows", "1000", "--format",
                              "json", expect=EXIT_MISMATCH)
            ranges = table(json.loads(result.stdout), name)["mismatching_ranges"]
            lo, hi = ranges[0]["lo"], ranges[0]["hi"]  # None: unbounded (the last chunk)
            if len(ranges) != 1 or not ((lo is None or lo <= 2500) and (hi is None or 2500 < hi)) \
                    or max(ranges[0]["source_rows"], ranges[0]["target_rows"]) > 1000:
                raise CaptureFailure(f"hostile table ranges: {ranges}")
            subprocess.run(ranges[0]["reseed"].replace("trellara", shlex.quote(TRELLARA_BIN), 1), shell=True,
                           check=True, timeout=300)
            trellara("verify", "--config", pair.config, "--table", name)
        print(f"hostile identifiers: {ranges[0]['reseed']}")
        print("ok: verify_and_reseed_hostile_identifiers")


def verify_without_applier_exits_2():
    with VerifyPair("verify-noapplier") as pair:
        started = time.monotonic()
        _, result = pair.verify("--timeout", "10", expect=EXIT_COULD_NOT_VERIFY)
        if "no applier is running" not in result.stderr or "trellara apply" not in result.stderr:
            raise CaptureFailure(f"exit 2 without saying no applier runs: {result.stderr}")
        if time.monotonic() - started > 60:
            raise CaptureFailure("verify without an applier took too long")
        left = pair.target.query("SELECT count(*) FROM trellara.apply_holds")
        if left != "0":
            raise CaptureFailure(f"verify left {left} hold rows behind")
        print(f"no applier: {result.stderr.strip()[:300]}")
        print("ok: verify_without_applier_exits_2")


def check_filtered_reseed(pair, env=None, outputs=None):
    """The filtered reseed scenario's checks; `env` (TRELLARA_FAULTS naming a defect) goes to every
    reseed run, whose stderr (it reports the fault points that fired) is appended to `outputs`,
    even when a check fails."""
    outputs = [] if outputs is None else outputs

    def reseed(*args):
        result = trellara("reseed", "--config", pair.config, "--table", "public.items", *args, env=env)
        outputs.append(result.stderr)
        return result

    pair.start_applier()
    pair.target.psql("UPDATE items SET qty = -1, name = 'damaged' WHERE id = 10; DELETE FROM items WHERE id = 20; "
                     "INSERT INTO items (id, name, qty, note) VALUES (7, 'extra', 0, 'extra'); "
                     "UPDATE items SET qty = -5 WHERE id = 500")
    # Open quarantine rows: one of items at an early boundary, one of tags.
    for lsn, relation in (("0/10", "public.items"), ("0/11", "public.tags")):
        pair.target.psql(
            "INSERT INTO trellara.quarantine (flow, commit_lsn, xid, origin_sysid, reason, detail, checksum, "
            f"attempts, state, message, next_step) VALUES ('app', '{lsn}', 1, 0, 'zero_rows_matched', "
            f"'UPDATE on {relation} matched 0 rows', '\\x00', 1, 'replay_ready', 'test row', 'none')")
    pair.settle()
    out = reseed("--where", "id <= 200", "--format", "json")
    summary = json.loads(out.stdout)
    print(f"reseed: {summary}")
    rows = dict(line.split("|", 1) for line in pair.target.query(
        "SELECT id, name || '/' || qty || '/' || coalesce(note, 'NULL') FROM items WHERE id IN (7, 10, 20, 500, 600) "
        "ORDER BY id").splitlines())
    expected = {"10": "item 10/10/kept-10", "20": "item 20/3/NULL", "500": "item 500/-5/kept-500",
                "600": "item 600/5/kept-600"}
    if rows != expected:
        raise CaptureFailure(f"after reseed --where 'id <= 200': {rows}, expected {expected}")
    kept = pair.target.query("SELECT count(*) FROM items WHERE note = 'kept-' || id")
    if kept != str(1000 - 142 - 1):  # every row but the one the reseed re-inserted
        raise CaptureFailure(f"target-owned notes kept on {kept} rows")
    states = pair.target.query("SELECT commit_lsn || '=' || state FROM trellara.quarantine ORDER BY commit_lsn")
    if states.split() != ["0/10=resolved", "0/11=replay_ready"]:
        raise CaptureFailure(f"quarantine states after the reseed: {states}")
    if summary["quarantines_resolved"] != 1 or summary["deleted"] != 1:
        raise CaptureFailure(f"reseed summary: {summary}")
    pair.target.psql("DELETE FROM trellara.quarantine")
    reseed("--where", "id = 500")
    final, _ = pair.verify()
    if not final["match"]:
        raise CaptureFailure(f"verify after the reseeds: {final}")


@scenario(seed_rows=["filtered_reseed_preserves_out_of_scope_rows"], suite="snapshot",
          invariants=["rows outside the filter and target-only columns keep their values", "verify exits 0 after"])
def filtered_reseed_preserves_out_of_scope_rows():
    with VerifyPair("reseed-filter") as pair:
        check_filtered_reseed(pair)
        print("ok: filtered_reseed_preserves_out_of_scope_rows")


@scenario(suite="snapshot", defect="reseed_delete_ignores_filter",
          pairs_with="filtered_reseed_preserves_out_of_scope_rows",
          fault_points=("defect.reseed_delete_ignores_filter",),
          invariants=["with the defect the filtered reseed checks fail"])
def negative_control_reseed_delete_ignores_filter_is_caught():
    # The paired defect of filtered_reseed_preserves_out_of_scope_rows (applier/commands/reseed_command.cpp):
    # the delete step of reseed --where leaves out the filter. The clean scenario's checks must fail.
    point = "defect.reseed_delete_ignores_filter"
    with VerifyPair("reseed-unfiltered") as pair:
        caught = checks_fail_under_defect(point, "filtered reseed", lambda env, outputs: check_filtered_reseed(
            pair, env, outputs))
        print(f"{point} caught: {str(caught)[:400]}")


def back_to_back_holds_do_not_wait_on_each_other():
    """A verify started right after another one ended can take the hold lock before the applier,
    held at the first verify's hold, has polled it free. Fault point apply.before_hold_lock_wait
    (stall, 8 s) holds the applier just before that wait, so the second verify always gets there
    first. The applier must see the first hold's row gone and go on to the second hold; waiting for
    the lock alone (the bug CI hit after a reseed) left both waiting on each other until the second
    verify's --timeout."""
    if SIMULATE:
        print("back_to_back_holds_do_not_wait_on_each_other needs the real applier: not run in simulation")
        return
    with VerifyPair("verify-back-to-back") as pair:
        pair.start_applier(env=dict(os.environ, TRELLARA_FAULTS="apply.before_hold_lock_wait:1:stall",
                                    TRELLARA_FAULT_STALL_MS="8000"))
        first, _ = pair.verify("--table", "public.tags")
        started = time.monotonic()
        second, result = pair.verify("--table", "public.tags", "--timeout", "40")
        if not first["match"] or not second["match"]:
            raise CaptureFailure(f"back-to-back verifies: {first} / {second}")
        if first["consistent_lsn"] == second["consistent_lsn"]:
            raise CaptureFailure(f"the second verify reported the first one's point: {first} / {second}")
        print(f"second verify held and matched {time.monotonic() - started:.1f} s after the first ended")
        err = pair.stop_applier()
        if "fault point apply.before_hold_lock_wait: stall" not in err:
            raise CaptureFailure(f"the applier never stalled before its hold lock wait: {err[-1000:]}")
        print("ok: back_to_back_holds_do_not_wait_on_each_other")


def verify_of_an_idle_flow_asks_the_relay_for_its_point():
    """On an idle flow the applier reaches a verify's source point only when the log covers it,
    and nothing is logged but the relay's progress markers. With trellara.progress_interval = 1h
    on the source, a verify that did not ask the relay for a marker (trellara.request_progress)
    would wait out its --timeout and exit 2; asking, it holds and matches at once."""
    if SIMULATE:
        print("verify_of_an_idle_flow_asks_the_relay_for_its_point needs the real relay and applier: not run in "
              "simulation")
        return
    with VerifyPair("verify-idle", source_settings={"trellara.progress_interval": "'1h'"}) as pair:
        pair.start_applier()
        for attempt in (1, 2):  # the second one on a flow idle since the first
            started = time.monotonic()
            report, result = pair.verify("--table", "public.tags", "--timeout", "60")
            if not report["match"]:
                raise CaptureFailure(f"verify of an idle flow did not match: {report}")
            if "could not ask the relay" in result.stderr or "is not running" in result.stderr:
                raise CaptureFailure(f"verify did not ask the relay for a progress marker: {result.stderr[-1500:]}")
            print(f"verify {attempt} of an idle flow (progress_interval 1h) held at {report['consistent_lsn']} and "
                  f"matched in {time.monotonic() - started:.1f} s")
        print("ok: verify_of_an_idle_flow_asks_the_relay_for_its_point")


def verify_table_without_int_key_is_one_chunk():
    with VerifyPair("verify-textkey") as pair:
        pair.start_applier()
        report, _ = pair.verify("--table", "public.tags")
        tags = table(report, "public.tags")
        if len(report["tables"]) != 1 or tags["chunks"] != 1 or tags["key_column"] is not None or not tags["match"]:
            raise CaptureFailure(f"--table public.tags: {report}")
        pair.target.psql("UPDATE tags SET label = 'damaged' WHERE code = 'tag-42'")
        report, _ = pair.verify("--table", "public.tags", expect=EXIT_MISMATCH)
        ranges = table(report, "public.tags")["mismatching_ranges"]
        if len(ranges) != 1 or ranges[0]["lo"] is not None or "--where" in ranges[0]["reseed"]:
            raise CaptureFailure(f"a text-key table must be reported whole: {ranges}")
        pair.target.psql("UPDATE tags SET label = 'label 42' WHERE code = 'tag-42'")
        pair.verify("--table", "public.tags")
        print("ok: verify_table_without_int_key_is_one_chunk")


if __name__ == "__main__":
    run_scenarios([verify_without_applier_exits_2, verify_retries_a_passed_hold,
                   verify_does_not_compare_a_table_still_being_copied, verify_and_reseed_hostile_identifiers,
                   verify_table_without_int_key_is_one_chunk, back_to_back_holds_do_not_wait_on_each_other,
                   verify_of_an_idle_flow_asks_the_relay_for_its_point,
                   verify_names_corrupted_row_key_range, filtered_reseed_preserves_out_of_scope_rows,
                   negative_control_reseed_delete_ignores_filter_is_caught,
                   verify_matches_while_source_and_applier_live])
