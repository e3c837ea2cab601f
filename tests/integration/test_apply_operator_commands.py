#!/usr/bin/env python3
"""Integration: the operator commands around `trellara apply` — `status`, `verify` and
`quarantine list|replay-ready` — against a source and a target cluster.

Source: pgbench tables (copied to the target with pg_dump), a flow on a publication of the four
tables, a short pgbench run. Then:
  - after `apply --until-caught-up`, `status` says caught_up with lag 0 and the origin progress;
    `verify` matches every table (exit 0);
  - a row changed on the target makes `verify` exit 1 naming exactly that table;
  - a target row deleted before a source UPDATE needs it quarantines the transaction: `status`
    says blocked with the exact `quarantine replay-ready` command, `quarantine list` shows the
    boundary, `verify` refuses (exit 2, could not verify) instead of comparing, `replay-ready` with a wrong xid or
    LSN is refused and marks nothing;
  - after the repair, `replay-ready` marks the boundary, `status` says stopped with "run trellara
    apply", the next apply applies it and what followed, `verify` matches and status is caught_up;
  - a following applier is seen as running (it holds the flow's advisory lock), and not after it stops;
  - the target functions are not executable by PUBLIC; pg_monitor may read status.
It must never leave a cluster running (the harness stops it by PID).
"""

import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import CaptureFailure, TRELLARA_BIN, log_records, run_pgbench, verify_with_applier, wait_for  # noqa: E402
from flow_pair import FlowPair, run_trellara  # noqa: E402
from test_apply_end_to_end import PgbenchPair  # noqa: E402

EXIT_BLOCKED = 3
EXIT_MISMATCH = 1
EXIT_COULD_NOT_VERIFY = 2
ITEMS_DDL = "CREATE TABLE items (id bigint PRIMARY KEY, v text NOT NULL)"


class FlowLaterPair(FlowPair):
    """Source and target with table items and publication pub, but no flow yet (the scenario
    creates it): the configuration names the log directory create_flow will give flow `early`."""

    def __init__(self, name):
        super().__init__(name, source_sql=ITEMS_DDL, tables=("items",), flow="early", create_flow=False)

    def prepare(self):
        self.source.query("CREATE EXTENSION trellara")
        super().prepare()
        self.source.query(self.publication)

    def ready(self):
        self.log_dir = os.path.join(self.source.query("SHOW data_directory"), "pg_trellara", self.flow)
        self.config = self.write_config()


def verify(config, *args, expect=0):
    """verify beside a daemon applier (it compares at a point the applier is held at)."""
    result = verify_with_applier(config, args, timeout_s=120)
    if result.returncode != expect:
        raise CaptureFailure(f"trellara verify {' '.join(args)} exited {result.returncode}, expected {expect}\n"
                             f"stdout: {result.stdout[-3000:]}\nstderr: {result.stderr[-3000:]}")
    return result


def status(config):
    return json.loads(run_trellara(["status", "--config", config, "--format", "json"]).stdout)


def expect_caught_up(config, target, label):
    s = status(config)
    progress = target.query("SELECT pg_replication_origin_progress('trellara_app', false)")
    if s["state"] != "caught_up" or s["lag_records"] != 0 or s["lag_bytes"] != 0 or s["quarantined"] != 0 \
            or s["applied_commit_lsn"] != progress or s["consumer_offset"] != s["log_end_offset"]:
        raise CaptureFailure(f"{label}: status is not caught_up with lag 0 at origin progress {progress}: {s}")
    print(f"{label}: status {s['state']}, applied {s['applied_commit_lsn']}, consumer offset {s['consumer_offset']}, "
          f"lag {s['lag_records']} records; next: {s['next_action']}")


def operator_commands_report_verify_and_release_quarantine():
    with PgbenchPair("ops") as pair:
        source, target, log_dir, config = pair.source, pair.target, pair.log_dir, pair.config

        # Before any apply the target has no state: status says so and names the command.
        early = run_trellara(["status", "--config", config])
        if "state:               stopped" not in early.stdout or "trellara apply --config" not in early.stdout:
            raise CaptureFailure(f"status before any apply: {early.stdout}")

        run_pgbench(source, ["-c", "2", "-j", "2", "-t", "100", "-n"])
        pair.wait_log_covers_source()
        pair.apply()

        # 1. caught up, lag 0; verify matches.
        expect_caught_up(config, target, "after apply")
        text = run_trellara(["status", "--config", config]).stdout
        for part in ("state:               caught_up", "lag:                 0 records, 0 bytes", "next action:"):
            if part not in text:
                raise CaptureFailure(f"text status lacks {part!r}: {text}")
        verified = json.loads(verify(config, "--format", "json").stdout)
        if not verified["match"] or len(verified["tables"]) != 4 or verified["mismatching_tables"]:
            raise CaptureFailure(f"verify after apply did not match all four tables: {verified}")
        accounts = next(t for t in verified["tables"] if t["table"] == "public.pgbench_accounts")
        if accounts["source"]["rows"] != 100000 or accounts["target"]["rows"] != 100000 or accounts["status"] != "match":
            raise CaptureFailure(f"verify of pgbench_accounts: {accounts}")
        print(f"verify matched: {[(t['table'], t['source']['rows']) for t in verified['tables']]}")

        # 2. a changed target row: verify names exactly that table and exits 1.
        target.query("UPDATE public.pgbench_branches SET bbalance = bbalance + 1 WHERE bid = 1")
        differs = verify(config, expect=EXIT_MISMATCH)
        if "public.pgbench_branches" not in differs.stderr or "pgbench_accounts" in differs.stderr \
                or "MISMATCH  public.pgbench_branches" not in differs.stdout:
            raise CaptureFailure(f"verify did not name exactly pgbench_branches: {differs.stdout} {differs.stderr}")
        print(f"verify after a target change: {differs.stderr.strip()}")
        target.query("UPDATE public.pgbench_branches SET bbalance = bbalance - 1 WHERE bid = 1")

        # 3. quarantine: the target lost a row a later source UPDATE needs.
        target.query("DELETE FROM public.pgbench_accounts WHERE aid = 42")
        xid = int(source.query("BEGIN; UPDATE pgbench_accounts SET abalance = abalance + 7 WHERE aid = 42; "
                               "SELECT txid_current(); COMMIT").splitlines()[0])
        source.query("INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (1, 1, 43, 777777, now())")
        pair.wait_log_covers_source()
        failing = next(r for r in log_records(log_dir) if r["type"] == "envelope" and r["xid"] == xid)
        commit_lsn = failing["commit_lsn"]
        pair.apply(expect=EXIT_BLOCKED)

        s = status(config)
        command = f"trellara quarantine replay-ready --config {config} --xid {xid} --commit-lsn {commit_lsn}"
        if s["state"] != "blocked" or s["quarantined"] != 1 or s["lag_records"] < 2 or command not in s["next_action"] \
                or s["blocked_at"] != {"xid": xid, "commit_lsn": commit_lsn, "reason": "zero_rows_matched"} \
                or "(aid)=(42)" not in s["next_action"]:
            raise CaptureFailure(f"status while quarantined: expected blocked with {command!r}: {s}")
        print(f"blocked: lag {s['lag_records']} records; next: {s['next_action']}")

        listed = json.loads(run_trellara(["quarantine", "list", "--config", config, "--format", "json"]).stdout)
        if len(listed) != 1 or listed[0]["xid"] != xid or listed[0]["commit_lsn"] != commit_lsn \
                or listed[0]["state"] != "quarantined" or listed[0]["reason"] != "zero_rows_matched":
            raise CaptureFailure(f"quarantine list: {listed}")
        listed_text = run_trellara(["quarantine", "list", "--config", config]).stdout
        if command not in listed_text or "public.pgbench_accounts" not in listed_text:
            raise CaptureFailure(f"quarantine list (text) lacks the command or the table: {listed_text}")

        # No applier beside it: a blocked flow is named before a missing applier.
        blocked_verify = run_trellara(["verify", "--config", config, "--timeout", "30"], expect=EXIT_COULD_NOT_VERIFY)
        if "blocked" not in blocked_verify.stderr or command not in blocked_verify.stderr:
            raise CaptureFailure(f"verify while blocked: {blocked_verify.stderr}")

        for wrong_xid, wrong_lsn in ((xid + 1, commit_lsn), (xid, "0/1")):
            refused = run_trellara(["quarantine", "replay-ready", "--config", config, "--xid", str(wrong_xid),
                                    "--commit-lsn", wrong_lsn], expect=1)
            if "refused" not in refused.stderr:
                raise CaptureFailure(f"a wrong boundary was not refused clearly: {refused.stderr}")
        if target.query(f"SELECT state FROM trellara.quarantine WHERE xid = {xid}") != "quarantined":
            raise CaptureFailure("a refused replay-ready changed the quarantine row")
        print(f"wrong boundary refused: {refused.stderr.strip()}")

        # 4. repair, replay-ready, resume, verify.
        aid, bid, balance, filler = source.query(
            "SELECT aid, bid, abalance - 7, filler FROM pgbench_accounts WHERE aid = 42").split("|")
        target.query(f"INSERT INTO public.pgbench_accounts VALUES ({aid}, {bid}, {balance}, '{filler}')")
        marked = run_trellara(["quarantine", "replay-ready", "--config", config, "--xid", str(xid), "--commit-lsn",
                               commit_lsn])
        if "marked replay-ready" not in marked.stdout:
            raise CaptureFailure(f"replay-ready output: {marked.stdout}")
        again = run_trellara(["quarantine", "replay-ready", "--config", config, "--xid", str(xid), "--commit-lsn",
                              commit_lsn])
        if "already replay-ready" not in again.stdout:
            raise CaptureFailure(f"a second replay-ready was not a no-op: {again.stdout}")
        s = status(config)
        if s["state"] != "stopped" or s["replay_ready"] != 1 or "trellara apply --config" not in s["next_action"]:
            raise CaptureFailure(f"status after replay-ready: {s}")
        print(f"after replay-ready: {s['state']}; next: {s['next_action']}")

        resumed = pair.apply()
        if "applied=2 " not in resumed.stdout:
            raise CaptureFailure(f"the resumed apply did not apply the two held transactions: {resumed.stdout}")
        expect_caught_up(config, target, "after replay")
        final = verify(config)
        if final.stdout.count("match     ") != 4:
            raise CaptureFailure(f"verify after replay: {final.stdout}")
        print(final.stdout.strip())

        # 5. a following applier is detected through its advisory lock: running/caught_up, not stopped.
        follower = subprocess.Popen([TRELLARA_BIN, "apply", "--config", config], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        try:
            wait_for("status to see the following applier", lambda: status(config)["applier_running"], 30)
            s = status(config)
            if s["state"] != "caught_up" or "running applier" not in s["next_action"]:
                raise CaptureFailure(f"status with a following applier: {s}")
            print(f"following applier: status {s['state']}, running {s['applier_running']}; next: {s['next_action']}")
            follower.send_signal(signal.SIGTERM)   # our own child, by its Popen handle
            follower.communicate(timeout=30)
        finally:
            if follower.poll() is None:
                follower.kill()
                follower.wait()
        if status(config)["applier_running"]:
            raise CaptureFailure("status still reports a running applier after it stopped")

        # 6. privileges: nothing for PUBLIC; pg_monitor may read.
        target.query("CREATE ROLE plain_user LOGIN; CREATE ROLE monitor_user LOGIN IN ROLE pg_monitor")
        grants = target.query(
            "SELECT has_function_privilege('plain_user', 'trellara.quarantine_replay_ready(bigint, pg_lsn)', 'EXECUTE'), "
            "has_function_privilege('plain_user', 'trellara.apply_status()', 'EXECUTE'), "
            "has_function_privilege('plain_user', 'trellara.quarantine_list()', 'EXECUTE'), "
            "has_function_privilege('monitor_user', 'trellara.apply_status()', 'EXECUTE'), "
            "has_function_privilege('monitor_user', 'trellara.quarantine_replay_ready(bigint, pg_lsn)', 'EXECUTE'), "
            "has_function_privilege('plain_user', 'trellara.quarantine_replay_ready(bigint, pg_lsn, text)', 'EXECUTE'), "
            "has_function_privilege('plain_user', 'trellara.require_one_row(bigint)', 'EXECUTE')")
        if grants != "f|f|f|t|f|f|f":
            raise CaptureFailure(f"target function privileges (plain x3, monitor status, monitor replay, plain "
                                 f"replay with flow, plain row check): {grants}")
        seen = target.psql("SELECT recorded_state FROM trellara.apply_status()",
                           args=("-U", "monitor_user")).stdout.strip()
        if seen != "stopped":   # recorded by the following applier when SIGTERM stopped it
            raise CaptureFailure(f"pg_monitor member reading trellara.apply_status(): {seen!r}")

        pair.check_no_crashes()
        print("ok: operator_commands_report_verify_and_release_quarantine")


def applier_started_before_the_relay_waits_for_the_log_directory():
    """A daemon `trellara apply` started before the flow exists (a script or a service unit that
    runs right after create_flow, or before it) waits for the relay to create the log directory,
    then applies; `--until-caught-up` refuses at once, naming flow.log_directory. Until 2026-12-02
    the daemon exited with "another applier of flow ... is running on this log" in that window."""
    with FlowLaterPair("early") as pair:
        source, target, log_dir, config = pair.source, pair.target, pair.log_dir, pair.config
        refused = pair.apply(expect=1)
        if "does not exist yet" not in refused.stderr or "flow.log_directory" not in refused.stderr:
            raise CaptureFailure(f"--until-caught-up without a log directory: {refused.stderr}")

        err_path = os.path.join(pair.work.name, "apply.err")
        with open(err_path, "w") as err:
            applier = subprocess.Popen([TRELLARA_BIN, "apply", "--config", config], stdout=subprocess.DEVNULL,
                                       stderr=err)
        try:
            def said_waiting():
                if applier.poll() is not None:
                    raise CaptureFailure(f"the daemon applier exited {applier.returncode} before the flow existed: "
                                         f"{open(err_path).read()}")
                return "event=waiting" in open(err_path).read()
            wait_for("the daemon applier to say it waits for the log directory", said_waiting, 30)
            if os.path.exists(log_dir):
                raise CaptureFailure(f"{log_dir} exists before the flow was created")
            source.query("SELECT trellara.create_flow('early', 'pub')")
            if source.query("SELECT log_directory FROM trellara.flows WHERE name = 'early'") != log_dir:
                raise CaptureFailure("the flow's log directory is not the one the config names")
            source.query("INSERT INTO items SELECT g, md5(g::text) FROM generate_series(1, 500) g")

            def applied():
                if applier.poll() is not None:
                    raise CaptureFailure(f"the daemon applier exited {applier.returncode} after the flow was created: "
                                         f"{open(err_path).read()}")
                return target.query("SELECT count(*) FROM items") == "500"
            wait_for("the daemon applier to apply the flow's first transaction", applied, 60)
        finally:
            if applier.poll() is None:
                applier.send_signal(signal.SIGTERM)   # our own child, by its Popen handle
            code = applier.wait(timeout=60)
        if code != 0:
            raise CaptureFailure(f"the daemon applier ended with {code} on SIGTERM: {open(err_path).read()}")
        pair.assert_same_data(("items",), "after the daemon applied")
        pair.check_no_crashes()
        print("ok: applier_started_before_the_relay_waits_for_the_log_directory (waited, then applied 500 rows; "
              "--until-caught-up refused: " + refused.stderr.strip().splitlines()[-1][:160] + ")")


if __name__ == "__main__":
    operator_commands_report_verify_and_release_quarantine()
    applier_started_before_the_relay_waits_for_the_log_directory()
