#!/usr/bin/env python3
"""Integration: `trellara apply` copies a pgbench workload from the source's log to a second
cluster exactly once, and fails closed on a target that diverged.

Source cluster: pgbench tables (copied to the target with pg_dump before the flow exists), a flow
on a publication of the four tables, `pgbench -c 4 -t N`. Once the flow's log durably covers the
source's WAL position, `trellara apply --until-caught-up` runs against the target (a cluster
without the trellara extension: the applier bootstraps its own schema). Then:
  - every table's row count and order-independent md5 match source vs target;
  - a second run applies nothing (the consumer offset is past everything) and changes nothing;
  - a third run with the consumer offset file removed re-reads the whole log and skips every
    transaction as a duplicate (dedup rows), changing nothing;
  - quarantine: a target row a later source UPDATE needs is deleted; apply exits 3 naming table,
    key, xid and commit LSN; the quarantine row exists; no dedup row, origin progress or consumer
    offset moved past it, and a later source transaction is not applied; after repair and
    trellara.quarantine_replay_ready(xid, lsn) the next run applies it and the tables match.
It prints what it measured. It must never leave a cluster running (the harness stops it by PID).
"""

import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import CaptureFailure, TRELLARA_BIN, log_records, lsn_to_int, run_pgbench, wait_for  # noqa: E402
from flow_pair import FlowPair, run_trellara, table_digest  # noqa: E402
from harness import PG_BIN  # noqa: E402

TRANSACTIONS_PER_CLIENT = int(os.environ.get("TRELLARA_PGBENCH_TRANSACTIONS", "250"))
CLIENTS = 4
TABLES = ("pgbench_accounts", "pgbench_branches", "pgbench_tellers", "pgbench_history")
EXIT_BLOCKED = 3


class PgbenchPair(FlowPair):
    """pgbench tables on the source (`pgbench -i -s 1`), the same schema and initial rows on the
    target (pg_dump) before the flow exists, a flow on a publication of the four tables, and the
    pair's flow.toml naming source and target."""

    def __init__(self, name):
        super().__init__(name, tables=TABLES)

    def prepare(self):
        run_pgbench(self.source, ["-i", "-s", "1", "-q"])
        dump = subprocess.run([os.path.join(PG_BIN, "pg_dump"), "-h", self.source.socket_dir, "-p",
                               str(self.source.port), "-U", "postgres", "-t", "pgbench_*", "postgres"],
                              capture_output=True, text=True, check=True)
        self.target.psql(dump.stdout)


def digests(cluster):
    return {table: table_digest(cluster, table) for table in TABLES}


def summary(result):
    """The fields of the applier's last `apply flow=...` line ({} without one)."""
    lines = [line for line in result.stdout.splitlines() if line.startswith("apply flow=")]
    return dict(item.split("=", 1) for item in lines[-1].split()[1:]) if lines else {}


def origin_progress(target):
    text = target.query("SELECT pg_replication_origin_progress('trellara_app', false)")
    return lsn_to_int(text) if text else 0


def apply_copies_pgbench_once_and_quarantines_divergence():
    with PgbenchPair("apply") as pair:
        source, target, log_dir, config_path = pair.source, pair.target, pair.log_dir, pair.config
        bad_path = pair.write_config(path=os.path.join(pair.work.name, "bad.toml"), target_conninfo="x",
                                     apply_settings={"session_replication_role": "local"}, with_source=False)
        refused = run_trellara(["apply", "--config", bad_path], expect=None)
        if refused.returncode != 2 or "apply.session_replication_role" not in refused.stderr \
                or '"replica"' not in refused.stderr:
            raise CaptureFailure(f"a bad setting was not refused naming it and its values: {refused.stderr}")
        print(f"bad configuration refused: {refused.stderr.strip()}")

        result = run_pgbench(source, ["-c", str(CLIENTS), "-j", "2", "-t", str(TRANSACTIONS_PER_CLIENT), "-n"])
        processed = [line for line in result.stdout.splitlines() if "processed" in line]
        print(f"pgbench: {processed[0].strip() if processed else result.stdout[-300:]}")
        pair.wait_log_covers_source()

        # 1. catch-up apply copies everything.
        first = summary(pair.apply())
        if int(first["applied"]) < CLIENTS * TRANSACTIONS_PER_CLIENT:
            raise CaptureFailure(f"the first apply applied {first['applied']} transactions, pgbench committed "
                                 f"{CLIENTS * TRANSACTIONS_PER_CLIENT}")
        pair.assert_same_data(TABLES, "after the first apply")
        applied_rows = int(target.query("SELECT count(*) FROM trellara.applied_transactions WHERE flow = 'app'"))
        if applied_rows != int(first["applied"]):
            raise CaptureFailure(f"{applied_rows} dedup rows for {first['applied']} applied transactions")
        progress = origin_progress(target)
        last_commit = max(lsn_to_int(r["commit_lsn"]) for r in log_records(log_dir) if r["type"] == "envelope")
        if progress != last_commit:
            raise CaptureFailure(f"origin progress {progress:X} is not the last logged commit {last_commit:X}")
        print(f"dedup rows {applied_rows}, origin progress = last logged commit")

        # 2. a second run has nothing to do.
        before = digests(target)
        second = summary(pair.apply())
        if second["applied"] != "0" or second["skipped_duplicates"] != "0":
            raise CaptureFailure(f"the second apply was not a no-op: {second}")
        if digests(target) != before:
            raise CaptureFailure("the second apply changed target data")

        # 2b. a following applier holds the flow: a second one is refused; SIGTERM stops the first.
        follower = subprocess.Popen([TRELLARA_BIN, "apply", "--config", config_path], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        try:
            wait_for("the following applier to report caught_up", lambda: target.query(
                "SELECT state FROM trellara.apply_status WHERE flow = 'app'") == "caught_up" and
                target.query("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'trellara/app'") == "1",
                30)
            second_applier = pair.apply(expect=1)
            if "another applier of flow app is running" not in second_applier.stderr:
                raise CaptureFailure(f"a second applier was not refused clearly: {second_applier.stderr}")
            # A second applier of the same log pointed at another target database: the target's
            # advisory lock cannot see it, the lock in the log directory must refuse it.
            target.query("CREATE DATABASE other_target")
            other_config = pair.write_config(path=os.path.join(pair.work.name, "other.toml"),
                                             target_conninfo=target.conninfo(dbname="other_target"), with_source=False)
            other_applier = pair.apply(expect=1, config=other_config)
            for part in ("another applier of flow app is running on this log", "consumers/.applier.lock",
                         f"pid {follower.pid}"):
                if part not in other_applier.stderr:
                    raise CaptureFailure(f"an applier of the same log into another database was not refused by the "
                                         f"log directory lock ({part!r} missing): {other_applier.stderr}")
            if target.query("SELECT count(*) FROM pg_stat_activity WHERE datname = 'other_target'") != "0" or \
                    target.query("SELECT count(*) FROM pg_namespace WHERE nspname = 'trellara'",
                                 dbname="other_target") != "0":
                raise CaptureFailure("the refused applier touched the other target database")
            follower.send_signal(signal.SIGTERM)   # our own child, by its Popen handle
            out, err = follower.communicate(timeout=30)
        finally:
            if follower.poll() is None:
                follower.kill()
                follower.wait()
        if follower.returncode != 0 or "state=stopped" not in out:
            raise CaptureFailure(f"SIGTERM did not stop the following applier cleanly (exit {follower.returncode}): "
                                 f"{out[-500:]} {err[-500:]}")
        print(f"following applier: refused a second applier, stopped on SIGTERM: {out.strip().splitlines()[-1]}")

        # 3. without its consumer offset the applier re-reads the log and skips every transaction.
        os.remove(os.path.join(log_dir, "consumers", "applier"))
        third = summary(pair.apply())
        if third["applied"] != "0" or third["skipped_duplicates"] != first["applied"]:
            raise CaptureFailure(f"re-reading the whole log did not skip exactly {first['applied']} duplicates: {third}")
        if digests(target) != before:
            raise CaptureFailure("re-reading the whole log changed target data")

        # 4. quarantine: the target lost a row that a later source UPDATE needs.
        target.query("DELETE FROM public.pgbench_accounts WHERE aid = 42")
        xid = int(source.query("BEGIN; UPDATE pgbench_accounts SET abalance = abalance + 7 WHERE aid = 42; "
                               "SELECT txid_current(); COMMIT").splitlines()[0])
        source.query("INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (1, 1, 43, 777777, now())")
        pair.wait_log_covers_source()
        records = log_records(log_dir)
        failing = next(r for r in records if r["type"] == "envelope" and r["xid"] == xid)
        commit_lsn = failing["commit_lsn"]
        offset_before = int(target.query("SELECT consumer_offset FROM trellara.apply_status WHERE flow = 'app'"))
        result = pair.apply(expect=EXIT_BLOCKED)
        message = result.stderr
        for part in ("public.pgbench_accounts", "(aid)=(42)", f"transaction {xid}", commit_lsn, "matched 0 rows",
                     f"trellara.quarantine_replay_ready({xid}, '{commit_lsn}')"):
            if part not in message:
                raise CaptureFailure(f"the quarantine message lacks {part!r}: {message}")
        row = target.query(f"SELECT reason, state, attempts FROM trellara.quarantine WHERE flow = 'app' AND xid = {xid} "
                           f"AND commit_lsn = '{commit_lsn}'")
        if row != "zero_rows_matched|quarantined|1":
            raise CaptureFailure(f"quarantine row of xid {xid} is {row!r}")
        past = target.query(f"SELECT count(*) FROM trellara.applied_transactions WHERE commit_lsn >= '{commit_lsn}'")
        if past != "0" or origin_progress(target) >= lsn_to_int(commit_lsn):
            raise CaptureFailure(f"dedup rows ({past}) or origin progress moved past the quarantined commit")
        status = target.query("SELECT state, consumer_offset FROM trellara.apply_status WHERE flow = 'app'")
        state, offset_after = status.split("|")
        if state != "blocked" or int(offset_after) > failing["offset"] or int(offset_after) < offset_before:
            raise CaptureFailure(f"apply status {status!r}: expected blocked with the consumer offset at most "
                                 f"{failing['offset']} (the quarantined envelope)")
        # 777777 is outside pgbench's own deltas (-5000..5000), so no workload row can match.
        if target.query("SELECT count(*) FROM public.pgbench_history WHERE delta = 777777") != "0":
            raise CaptureFailure("a transaction after the quarantined one was applied")
        print(f"quarantined xid {xid} commit {commit_lsn}: {message.strip()}")

        # A second attempt while still quarantined is refused without retrying.
        result = pair.apply(expect=EXIT_BLOCKED)
        if "halted at a transaction quarantined earlier" not in result.stderr:
            raise CaptureFailure(f"a run while quarantined did not report the halt: {result.stderr}")

        # 5. repair, mark replay-ready (exact boundary only), resume.
        refused = target.psql(f"SELECT trellara.quarantine_replay_ready({xid + 1}, '{commit_lsn}')", check=False)
        if refused.returncode == 0:
            raise CaptureFailure("quarantine_replay_ready accepted a wrong xid")
        source_row = source.query("SELECT aid, bid, abalance - 7, filler FROM pgbench_accounts WHERE aid = 42")
        aid, bid, balance, filler = source_row.split("|")
        target.query(f"INSERT INTO public.pgbench_accounts VALUES ({aid}, {bid}, {balance}, '{filler}')")
        target.query(f"SELECT trellara.quarantine_replay_ready({xid}, '{commit_lsn}')")
        resumed = summary(pair.apply())
        if resumed["applied"] != "2":
            raise CaptureFailure(f"after replay-ready the applier applied {resumed['applied']} transactions, expected 2")
        if target.query(f"SELECT state FROM trellara.quarantine WHERE xid = {xid}") != "resolved":
            raise CaptureFailure("the replayed quarantine row is not resolved")
        pair.assert_same_data(TABLES, "after replay")

        # 6. schema check before first use: a target column of a type that would store the source's
        # values differently (varchar drops char(n)'s padding semantics) is refused before any
        # statement runs, not left to the target's input function.
        target.query("ALTER TABLE public.pgbench_branches ALTER COLUMN filler TYPE character varying(88)")
        xid = int(source.query("BEGIN; UPDATE pgbench_branches SET bbalance = bbalance + 1 WHERE bid = 1; "
                               "SELECT txid_current(); COMMIT").splitlines()[0])
        pair.wait_log_covers_source()
        commit_lsn = next(r for r in log_records(log_dir) if r["type"] == "envelope" and r["xid"] == xid)["commit_lsn"]
        result = pair.apply(expect=EXIT_BLOCKED)
        for part in ("schema", "column filler of public.pgbench_branches is character(88) on the source but "
                     "character varying(88) on the target", f"transaction {xid}"):
            if part not in result.stderr:
                raise CaptureFailure(f"the schema mismatch message lacks {part!r}: {result.stderr}")
        row = target.query(f"SELECT reason, sqlstate IS NULL FROM trellara.quarantine WHERE xid = {xid}")
        if row != "schema_mismatch|t":
            raise CaptureFailure(f"schema mismatch quarantine row is {row!r} (expected schema_mismatch, no SQLSTATE: "
                                 f"nothing was executed)")
        target.query("ALTER TABLE public.pgbench_branches ALTER COLUMN filler TYPE character(88)")
        target.query(f"SELECT trellara.quarantine_replay_ready({xid}, '{commit_lsn}')")
        resumed = summary(pair.apply())
        if resumed["applied"] != "1":
            raise CaptureFailure(f"after the schema repair the applier applied {resumed['applied']}, expected 1")
        pair.assert_same_data(TABLES, "after the schema repair")
        print(f"schema mismatch: quarantined xid {xid} before executing it, applied after the repair")

        relay = source.query("SELECT state, consecutive_failures FROM trellara.status() WHERE flow = 'app'")
        if not relay.startswith("running|0"):
            raise CaptureFailure(f"the source flow is not running cleanly: {relay}")
        pair.check_no_crashes()
        print("ok: apply_copies_pgbench_once_and_quarantines_divergence")


if __name__ == "__main__":
    apply_copies_pgbench_once_and_quarantines_divergence()
