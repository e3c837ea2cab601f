#!/usr/bin/env python3
"""Transient target failures are retried, never quarantined; the daemon outlives target and source
restarts (DESIGN §2 "transient target errors").

Real clusters, the real `trellara apply` daemon (no --until-caught-up), one source + target pair
per scenario (FlowPair of test_apply_robustness.py, whose helpers are reused, not changed):

- target_immediate_restart_while_daemon_applies_converges: a 12 000-transaction ledger backlog;
  while the daemon applies it the target's postmaster gets SIGQUIT (what `pg_ctl stop -m immediate`
  does) and the same data directory is started again. The SAME applier process (same PID) logs a
  structured `event=retry` line (state reconnecting or retrying: which one a fast reconnect prints
  depends on timing), reconnects, converges to the source exactly
  (each table by count and md5, dedup rows = the log's transactions, origin progress = the last
  commit, no duplicate ledger effect) and nothing is quarantined. The oracle workload
  (tests/integration/oracle.py, 300 transactions ahead of the backlog) is checked after converging.
- deadlock_with_a_local_target_transaction_is_retried_and_applied: a source transaction updates
  row 1 then row 2 (with 1 100 filler rows between, so it is chunked and takes the one-at-a-time
  path, where a failure used to be quarantined). On the target a local session takes row 2, then
  waits for row 1 while the applier holds it; the applier then waits for row 2. The order is forced
  with an advisory lock held by the test (an ALWAYS trigger on row 1 waits for it), never by
  sleeping, and the local session's deadlock_timeout is an hour, so the applier is the one that
  detects the deadlock (40P01). The daemon retries (structured line, SQLSTATE 40P01), applies the
  transaction once the local session commits, and nothing is quarantined.
- negative_control_transient_failure_quarantined_is_caught: the same deadlock with
  defect.apply_transient_quarantined (a transient failure treated as the transaction's own) must
  fail those checks (it is quarantined).
- status_shows_reconnecting_and_retrying_with_the_last_error: the target stopped (kept) while the
  daemon follows: `trellara status` (which cannot reach the target either) says `reconnecting`
  with the last error; started again, the daemon catches up. Then the target is made read-only
  (ALTER SYSTEM default_transaction_read_only + reload, as during a failover): status says
  `retrying` with SQLSTATE 25006 and nothing is applied or quarantined; writable again, the daemon
  converges.
- source_restart_while_daemon_runs_converges: the source's postmaster is stopped immediately while
  the daemon applies (the relay dies with it and recovers its log on restart); the source starts
  again, more transactions are written, and the same daemon converges.

Waits are conditions with generous ceilings, never sleeps against a timing.
"""

import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import (CaptureFailure, TRELLARA_BIN, log_records, log_transactions, wait_for, run_scenarios,  # noqa: E402
                             scenario)
import harness.cluster as hc  # noqa: E402
import oracle  # noqa: E402
from test_apply_robustness import (FlowPair, LEDGER_DDL, LEDGER_TABLES, assert_each_transaction_applied_once,  # noqa: E402
                                   assert_ledger_has_no_duplicate_effects, assert_same_data, run_ledger_workload,
                                   wait_log_covers_source)

CONVERGE_TIMEOUT_S = 180


class Daemon:
    """`trellara apply` following the log, our child; stderr to a file read while it runs."""

    def __init__(self, pair, env=None):
        self.err_path = os.path.join(pair.work.name, "apply.err")
        self.err = open(self.err_path, "w")
        # A defect in TRELLARA_FAULTS needs the explicit switch (docs/decisions.md).
        switch = ["--enable-test-defects"] if env and "defect." in env.get("TRELLARA_FAULTS", "") else []
        self.proc = subprocess.Popen([TRELLARA_BIN, *switch, "apply", "--config", pair.config], stdout=subprocess.DEVNULL,
                                     stderr=self.err, text=True, env=env)
        self.pid = self.proc.pid

    def stderr(self):
        with open(self.err_path) as f:
            return f.read()

    def retry_lines(self):
        return [line for line in self.stderr().splitlines() if "event=retry" in line]

    def require_alive(self, label):
        if self.proc.poll() is not None:
            raise CaptureFailure(f"{label}: the applier {self.pid} exited {self.proc.returncode}: {self.stderr()[-2000:]}")

    def stop(self):
        """SIGTERM to our own child; it must exit 0."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise CaptureFailure(f"the applier did not stop on SIGTERM: {self.stderr()[-1000:]}")
        self.err.close()
        return self.proc.returncode


def applied_count(target):
    text = target.psql("SELECT count(*) FROM trellara.applied_transactions", check=False).stdout.strip()
    return int(text) if text.isdigit() else -1


def log_completed(log_dir):
    logged, _ = log_transactions(log_records(log_dir))
    return len(logged)


def wait_converged(pair, daemon, label):
    want = log_completed(pair.log_dir)

    def done():
        daemon.require_alive(label)
        return applied_count(pair.target) >= want
    wait_for(f"{label}: the applier to commit all {want} logged transactions", done, CONVERGE_TIMEOUT_S, 0.2)


def assert_nothing_quarantined(target, label):
    rows = target.query("SELECT count(*) FROM trellara.quarantine")
    if rows != "0":
        raise CaptureFailure(f"{label}: a transient failure was quarantined: "
                             + target.query("SELECT xid, reason, sqlstate, detail FROM trellara.quarantine"))


def stop_keeping_data(cluster):
    """Fast shutdown of our own postmaster by PID (harness), keeping the data directory."""
    pid = cluster._read_postmaster_pid() or cluster.pid
    if pid is None or not cluster._is_our_postmaster(pid):
        raise CaptureFailure(f"cluster {cluster.name} has no running postmaster to stop")
    cluster._signal_and_wait(pid)
    cluster.pid = None


def start_again(cluster):
    cluster._run_as_postgres([f"{hc.PG_BIN}/pg_ctl", "start", "-D", cluster.data_dir, "-l", cluster.log_path, "-w",
                              "-t", str(hc.START_TIMEOUT_S)], what="pg_ctl start of the same data directory")
    cluster.pid = cluster._read_postmaster_pid()
    cluster._write_state()


def status_json(pair):
    result = subprocess.run([TRELLARA_BIN, "status", "--config", pair.config, "--format", "json"],
                            capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise CaptureFailure(f"trellara status exited {result.returncode}: {result.stderr[-1000:]}")
    return json.loads(result.stdout)


def assert_converged(pair, label, committed=None):
    assert_same_data(pair.source, pair.target, LEDGER_TABLES, label)
    assert_each_transaction_applied_once(pair.target, pair.log_dir, label)
    assert_ledger_has_no_duplicate_effects(pair.target, label)
    assert_nothing_quarantined(pair.target, label)
    if committed is not None and int(pair.target.query("SELECT count(*) FROM public.ledger")) != committed:
        raise CaptureFailure(f"{label}: the target ledger does not hold every source transaction")


@scenario(suite="transient_retry", invariants=("the daemon reconnects after a target restart and converges", "nothing quarantined") + oracle.INVARIANTS)
def target_immediate_restart_while_daemon_applies_converges():
    with FlowPair("retry-target", LEDGER_DDL + oracle.DDL, LEDGER_TABLES + oracle.TABLES) as pair:
        work = oracle.Oracle()
        work.setup(pair)
        work.run(pair, 300)
        committed = run_ledger_workload(pair, 12000)
        daemon = Daemon(pair)
        try:
            wait_for("the daemon to commit 1 000 transactions", lambda: applied_count(pair.target) >= 1000, 120, 0.01)
            before = applied_count(pair.target)
            old = pair.target.restart_immediate()
            print(f"target postmaster {old} stopped immediately with {before} transactions applied, started again")
            wait_converged(pair, daemon, "after the target restart")
            daemon.require_alive("after the target restart")
            lines = daemon.retry_lines()
            print(f"retry lines: {len(lines)}; first: {lines[0] if lines else None}")
            # The outcome, not an intermediate state: the failure was counted as a structured retry.
            # Whether its state reads reconnecting (the connection was found lost) or retrying (the
            # server's shutdown error arrived first and the first reconnect succeeded) depends on
            # timing alone.
            if not any(("state=reconnecting" in line or "state=retrying" in line) and "attempt=" in line
                       and "next_wait_ms=" in line for line in lines):
                raise CaptureFailure("no structured retry line: " + daemon.stderr()[-2000:])
            if "event=resumed" not in daemon.stderr():
                raise CaptureFailure("the daemon did not say it resumed: " + daemon.stderr()[-2000:])
            assert_converged(pair, "after the target restart", committed)
            work.check(pair, "oracle after the target restart")
            code = daemon.stop()
            if code != 0:
                raise CaptureFailure(f"the daemon exited {code} on SIGTERM, expected 0")
            print(f"same applier process {daemon.pid} converged after the target restart; nothing quarantined")
        finally:
            daemon.stop() if daemon.proc.poll() is None else None
        pair.check_no_crashes()
    print("ok: target_immediate_restart_while_daemon_applies_converges")


DEADLOCK_DDL = """
CREATE TABLE public.pair (id int PRIMARY KEY, v int NOT NULL);
CREATE TABLE public.filler (id int PRIMARY KEY, note text);
INSERT INTO public.pair VALUES (1, 0), (2, 0);
"""
DEADLOCK_TABLES = ("public.pair", "public.filler")
DEADLOCK_LOCK_KEY = 424242
# On the target only: after the applier's UPDATE of row 1, wait until the test releases the
# advisory lock. Enabled ALWAYS so that it fires under session_replication_role = replica.
TARGET_TRIGGER = f"""
CREATE FUNCTION public.wait_for_test() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_catalog.pg_advisory_xact_lock_shared({DEADLOCK_LOCK_KEY});
  RETURN NULL;
END $$;
CREATE TRIGGER wait_for_test AFTER UPDATE ON public.pair FOR EACH ROW WHEN (NEW.id = 1)
  EXECUTE FUNCTION public.wait_for_test();
ALTER TABLE public.pair ENABLE ALWAYS TRIGGER wait_for_test;
"""


class AsyncPsql:
    """A psql session fed statements without waiting for them (our child); its progress is read
    from pg_stat_activity by application_name."""

    def __init__(self, cluster, name):
        env = dict(cluster.env(), PGAPPNAME=name)
        self.name = name
        self.proc = subprocess.Popen([f"{hc.PG_BIN}/psql", "-X", "-q", "-v", "ON_ERROR_STOP=0"], stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)

    def send(self, sql):
        self.proc.stdin.write(sql + "\n")
        self.proc.stdin.flush()

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.stderr.read()


def activity(cluster, application_name):
    return cluster.query(f"SELECT state, coalesce(wait_event_type, ''), coalesce(wait_event, '') FROM pg_stat_activity "
                         f"WHERE application_name = '{application_name}'")


def provoke_deadlock(pair, env=None):
    """Runs the deadlock between the applier and a local target transaction. Returns (daemon, local,
    gate, outcome) once the applier has either logged a retry of the deadlock or quarantined it;
    the local transaction is still open then (the caller commits it)."""
    pair.target.psql(TARGET_TRIGGER)
    # The test's advisory lock, held while the order of the row locks is set up.
    gate = AsyncPsql(pair.target, "test-gate")
    local = AsyncPsql(pair.target, "test-local")
    gate.send(f"SELECT pg_advisory_lock({DEADLOCK_LOCK_KEY});")
    wait_for("the gate session to hold the advisory lock", lambda: pair.target.query(
        f"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = {DEADLOCK_LOCK_KEY} "
        f"AND granted") == "1", 30)
    pair.source.psql("BEGIN; UPDATE public.pair SET v = v + 1 WHERE id = 1; "
                     "INSERT INTO public.filler SELECT g, 'filler ' || g FROM generate_series(1, 1100) g; "
                     "UPDATE public.pair SET v = v + 10 WHERE id = 2; COMMIT;")
    wait_log_covers_source(pair.source)
    daemon = Daemon(pair, env)
    # 1. The applier has updated row 1 and waits for the gate (advisory lock).
    wait_for("the applier to hold row 1 and wait for the test's advisory lock",
             lambda: activity(pair.target, "trellara/app").endswith("|Lock|advisory"), 120, 0.05)
    # 2. The local transaction takes row 2, then waits for row 1 (held by the applier).
    local.send("SET deadlock_timeout = '1h'; BEGIN; UPDATE public.pair SET v = v WHERE id = 2; "
               "UPDATE public.pair SET v = v WHERE id = 1;")
    wait_for("the local transaction to hold row 2 and wait for row 1",
             lambda: activity(pair.target, "test-local").endswith("|Lock|transactionid"), 60, 0.05)
    # 3. The applier goes on to row 2, held by the local transaction: a deadlock the applier
    # detects (its deadlock_timeout is the server's 1 s; the local one's is an hour).
    gate.send(f"SELECT pg_advisory_unlock({DEADLOCK_LOCK_KEY});")

    def outcome():
        if any("sqlstate=40P01" in line for line in daemon.retry_lines()):
            return "retried"
        if pair.target.query("SELECT count(*) FROM trellara.quarantine") != "0":
            return "quarantined"
        # The chunked transaction is applied early (docs/apply.md "Early apply"): a failure that is
        # not retried there (the negative control's defect makes the deadlock one) abandons the
        # early attempt — ROLLBACK, the local transaction gets row 1 — and the one-at-a-time path
        # then waits for row 1 behind the local transaction, neither retrying nor quarantining.
        if "event=early_abandoned" in daemon.stderr():
            return "abandoned early"
        return None
    result = wait_for("the applier to retry or quarantine the deadlocked transaction", outcome, 120, 0.1)
    # 4. The local transaction got row 1 when the applier rolled back.
    wait_for("the local transaction to finish its UPDATE of row 1",
             lambda: activity(pair.target, "test-local").startswith("idle in transaction"), 60, 0.05)
    return daemon, local, gate, result


def check_deadlock_retried(pair, daemon, local, outcome):
    """The clean outcome: retried (structured line), not quarantined while the local transaction
    was open, applied exactly once after it committed."""
    quarantined = pair.target.query("SELECT count(*) FROM trellara.quarantine")
    local.send("COMMIT;")
    if outcome != "retried" or quarantined != "0":
        raise CaptureFailure(f"the deadlocked transaction was {outcome} ({quarantined} quarantine rows): "
                             + pair.target.query("SELECT xid, reason, sqlstate FROM trellara.quarantine"))
    wait_converged(pair, daemon, "after the deadlock")
    line = next(line for line in daemon.retry_lines() if "sqlstate=40P01" in line)
    print(f"retry line: {line[:400]}")
    if "kind=deadlock_detected" not in line or "state=retrying" not in line:
        raise CaptureFailure(f"the retry line does not name the deadlock: {line}")
    for t in DEADLOCK_TABLES:
        digest = f"SELECT count(*), md5(string_agg(x::text, ',' ORDER BY x::text)) FROM {t} x"
        if pair.source.query(digest) != pair.target.query(digest):
            raise CaptureFailure(f"{t} differs after the deadlock retry")
    if pair.target.query("SELECT v FROM public.pair ORDER BY id") != "1\n10":
        raise CaptureFailure("the deadlocked transaction was not applied exactly once")
    assert_each_transaction_applied_once(pair.target, pair.log_dir, "after the deadlock")


@scenario(suite="transient_retry", invariants=("a deadlock is retried, never quarantined", "applied exactly once"))
def deadlock_with_a_local_target_transaction_is_retried_and_applied():
    with FlowPair("retry-deadlock", DEADLOCK_DDL, DEADLOCK_TABLES) as pair:
        daemon = local = gate = None
        try:
            daemon, local, gate, outcome = provoke_deadlock(pair)
            check_deadlock_retried(pair, daemon, local, outcome)
            code = daemon.stop()
            if code != 0:
                raise CaptureFailure(f"the daemon exited {code} on SIGTERM, expected 0")
        finally:
            for session in (local, gate):
                if session is not None:
                    session.close()
            if daemon is not None and daemon.proc.poll() is None:
                daemon.stop()
        pair.check_no_crashes()
    print("ok: deadlock_with_a_local_target_transaction_is_retried_and_applied")


@scenario(suite="transient_retry", defect="apply_transient_quarantined", pairs_with="deadlock_with_a_local_target_transaction_is_retried_and_applied", invariants=("the deadlock checks fail when a transient failure is quarantined",))
def negative_control_transient_failure_quarantined_is_caught():
    """With defect.apply_transient_quarantined a transient failure is treated as the transaction's
    own: the same deadlock must fail the checks above."""
    with FlowPair("retry-negdeadlock", DEADLOCK_DDL, DEADLOCK_TABLES) as pair:
        daemon = local = gate = None
        try:
            env = dict(os.environ, TRELLARA_FAULTS="defect.apply_transient_quarantined:1:defect")
            daemon, local, gate, outcome = provoke_deadlock(pair, env)
            try:
                check_deadlock_retried(pair, daemon, local, outcome)
            except CaptureFailure as caught:
                print(f"negative control: caught: {str(caught).splitlines()[0][:300]}")
            else:
                raise CaptureFailure("negative control: with transient failures quarantined the deadlock scenario "
                                     "passed anyway — it cannot catch that defect")
        finally:
            for session in (local, gate):
                if session is not None:
                    session.close()
            if daemon is not None and daemon.proc.poll() is None:
                daemon.stop()
    print("ok: negative_control_transient_failure_quarantined_is_caught")


@scenario(suite="transient_retry", invariants=("status shows reconnecting/retrying with the last error and next action",))
def status_shows_reconnecting_and_retrying_with_the_last_error():
    with FlowPair("retry-status", LEDGER_DDL, LEDGER_TABLES) as pair:
        run_ledger_workload(pair, 400)
        daemon = Daemon(pair)
        try:
            wait_converged(pair, daemon, "first catch-up")
            stop_keeping_data(pair.target)
            run_ledger_workload(pair, 400)

            def reconnecting():
                s = status_json(pair)
                return s if s["state"] == "reconnecting" else None
            s = wait_for("status to say reconnecting while the target is down", reconnecting, 120, 0.2)
            print(f"status while the target is down: state={s['state']} retry={s['retry']} "
                  f"target_error={s['target_error'][:120]}")
            if not s["retry"] or not s["retry"]["last_error"] or s["retry"]["attempt"] < 1:
                raise CaptureFailure(f"status does not show the last error and attempt: {s}")
            if "reconnecting" not in s["next_action"] or "last error" not in s["next_action"]:
                raise CaptureFailure(f"status's next action does not say it: {s['next_action']}")
            start_again(pair.target)
            wait_converged(pair, daemon, "after the target came back")
            wait_for("status to leave reconnecting", lambda: status_json(pair)["state"] == "caught_up", 60)

            # A read-only target (a failover in progress): retried, never quarantined.
            before = applied_count(pair.target)
            pair.target.psql("ALTER SYSTEM SET default_transaction_read_only = on")
            pair.target.psql("SELECT pg_reload_conf()")
            run_ledger_workload(pair, 200)

            def retrying():
                s = status_json(pair)
                return s if s["state"] == "retrying" and s["retry"]["sqlstate"] == "25006" else None
            s = wait_for("status to say retrying with SQLSTATE 25006", retrying, 120, 0.2)
            print(f"status while read-only: state={s['state']} retry={s['retry']}")
            if "read-only" not in s["retry"]["last_error"]:
                raise CaptureFailure(f"the last error does not say read-only: {s['retry']}")
            if applied_count(pair.target) != before:
                raise CaptureFailure("something was applied to a read-only target")
            assert_nothing_quarantined(pair.target, "while read-only")
            pair.target.psql("SET default_transaction_read_only = off", args=(
                "-c", "SET default_transaction_read_only = off",
                "-c", "ALTER SYSTEM RESET default_transaction_read_only", "-c", "SELECT pg_reload_conf()"))
            wait_converged(pair, daemon, "after the target became writable")
            assert_converged(pair, "after read-only")
            daemon.require_alive("after read-only")
            code = daemon.stop()
            if code != 0:
                raise CaptureFailure(f"the daemon exited {code} on SIGTERM, expected 0")
        finally:
            if daemon.proc.poll() is None:
                daemon.stop()
        pair.check_no_crashes()
    print("ok: status_shows_reconnecting_and_retrying_with_the_last_error")


@scenario(suite="transient_retry", invariants=("a source restart does not stop the daemon from converging",))
def source_restart_while_daemon_runs_converges():
    with FlowPair("retry-source", LEDGER_DDL, LEDGER_TABLES) as pair:
        first = run_ledger_workload(pair, 6000)
        daemon = Daemon(pair)
        try:
            wait_for("the daemon to commit 500 transactions", lambda: applied_count(pair.target) >= 500, 120, 0.01)
            old = pair.source.restart_immediate()
            print(f"source postmaster {old} stopped immediately and started again "
                  f"({applied_count(pair.target)} transactions applied so far)")
            second = run_ledger_workload(pair, 2000)
            wait_converged(pair, daemon, "after the source restart")
            daemon.require_alive("after the source restart")
            assert_converged(pair, "after the source restart", first + second)
            code = daemon.stop()
            if code != 0:
                raise CaptureFailure(f"the daemon exited {code} on SIGTERM, expected 0")
            print(f"same applier process {daemon.pid} followed the log across the source restart")
        finally:
            if daemon.proc.poll() is None:
                daemon.stop()
        pair.check_no_crashes()
    print("ok: source_restart_while_daemon_runs_converges")


SCENARIOS = (deadlock_with_a_local_target_transaction_is_retried_and_applied,
             negative_control_transient_failure_quarantined_is_caught,
             target_immediate_restart_while_daemon_applies_converges,
             status_shows_reconnecting_and_retrying_with_the_last_error,
             source_restart_while_daemon_runs_converges)

if __name__ == "__main__":
    run_scenarios(SCENARIOS)
