#!/usr/bin/env python3
"""Integration: a chunked transaction applied while the relay is still writing it (docs/apply.md
"Early apply of chunked transactions"), against real Postgres, the real relay and real
`trellara apply` daemons.

  - chunked_transactions_are_applied_while_the_relay_writes_them: a daemon applier is running when
    the source commits a 150 000-row INSERT transaction and then a 150 000-row UPDATE transaction;
    the applier begins each at its first chunk (event=early_begin) and commits it at its commit
    marker (early_chunked=2, early_abandoned=0 with early_apply_idle = "60min", so no stall of a slow
    machine abandons it); the target equals the source and each has one dedup row;
  - applier_kill9_during_early_apply_converges_exactly_once: the applier kills itself (fault point
    apply.early_after_chunk, crash) with chunks of a transaction staged in its open target
    transaction; a new applier applies it exactly once;
  - a_failed_early_transaction_is_quarantined_whole: the target already holds a row the chunked
    INSERT inserts near its end; the early attempt fails late, is abandoned (ROLLBACK), and the
    one-at-a-time path quarantines the transaction naming the key, nothing of it on the target;
  - negative_control_early_commit_per_chunk_is_caught: with defect.apply_early_commit_per_chunk
    (each staged chunk committed on its own) the check above must fail;
  - relay_kill9_while_the_applier_applies_early_converges_exactly_once: the relay is killed with
    the first chunks of a streamed transaction durable and its commit marker not written
    (relay.after_drain_mid_transaction) while a daemon applier is applying them early; the
    restarted relay writes the transaction again (the durable chunks again, identical) and the
    applier — going on past the re-emitted chunks, or abandoning after early_apply_idle (default 5 s
    without a record) and applying at the commit marker — applies it exactly once;
  - early_apply_off_applies_at_the_commit_marker: with [apply] early_apply = "off" nothing is begun
    early and the transaction is applied once at its commit marker.
"""
import os
import re
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capture_support import (CaptureFailure, TRELLARA_BIN, checks_fail_under_defect, record_fault_fired,  # noqa: E402
                             record_faults_from_output, run_scenarios, scenario, wait_for, worker_pid)
from test_apply_robustness import run_apply  # noqa: E402
from test_stream_large_transactions import (StreamPair, check_logged_once, check_target_equals_source,  # noqa: E402
                                            wait_log_covers_source)

ROWS = 150_000
PROGRESS = re.compile(r"^apply flow=app state=\S+ .*\bearly_chunked=(\d+) early_abandoned=(\d+)", re.M)


class Daemon:
    """`trellara apply` without --until-caught-up, our child, stopped by its Popen handle."""

    count = 0

    def __init__(self, pair, env=None):
        self.pair = pair
        Daemon.count += 1
        self.out_path = os.path.join(pair.work.name, f"apply-{Daemon.count}.out")
        self.err_path = os.path.join(pair.work.name, f"apply-{Daemon.count}.err")
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.process = subprocess.Popen([TRELLARA_BIN, "apply", "--config", pair.config], env=env,
                                            stdout=out, stderr=err, text=True)

    def output(self):
        with open(self.out_path) as out, open(self.err_path) as err:
            return out.read(), err.read()

    def early_begun(self, xid):
        return f"event=early_begin xid={xid} " in self.output()[1]

    def wait_exit(self, timeout_s):
        self.process.wait(timeout=timeout_s)
        return self.output()

    def wait_applied(self, xid, timeout_s=300):
        def applied():
            if self.process.poll() is not None:
                out, err = self.output()
                raise CaptureFailure(f"the applier exited {self.process.returncode} before applying xid {xid}:\n"
                                     f"{out[-1500:]}\n{err[-3000:]}")
            return self.pair.target.query(f"SELECT count(*) FROM trellara.applied_transactions WHERE xid = {xid}") == "1"
        wait_for(f"the daemon applier to apply xid {xid}", applied, timeout_s, interval_s=0.2)

    def stop(self):
        """SIGTERM, then (stdout, stderr) and the last progress line's (early_chunked, early_abandoned),
        (None, None) without one."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=120)
        out, err = self.output()
        found = PROGRESS.findall(out)
        if not found:  # raised by the caller, after its own failure if it had one
            return out, err, (None, None)
        return out, err, tuple(int(n) for n in found[-1])


def commit_large(pair, statement):
    return int(pair.source.query(f"BEGIN; SELECT pg_current_xact_id(); {statement}; COMMIT",
                                 ).splitlines()[0])


def check_applied_once(pair, xids, label):
    for xid in xids:
        count = pair.target.query(f"SELECT count(*) FROM trellara.applied_transactions WHERE xid = {xid}")
        if count != "1":
            raise CaptureFailure(f"{label}: xid {xid} has {count} dedup rows on the target, not 1")
    check_target_equals_source(pair, label)


@scenario(suite="large_transactions",
          invariants=("a chunked transaction is staged from its first chunk and committed at its commit marker",
                      "target equals source", "one dedup row per transaction"))
def chunked_transactions_are_applied_while_the_relay_writes_them():
    with StreamPair("early-daemon") as pair:
        # No idle abandon however slow the machine: an abandon here can only be a defect.
        pair.write_config(apply_settings={"early_apply_idle": "60min"})
        daemon = Daemon(pair)
        try:
            inserted = commit_large(pair, f"INSERT INTO big SELECT g, 'big', repeat('z', 40) "
                                          f"FROM generate_series(1, {ROWS}) g")
            daemon.wait_applied(inserted)
            updated = commit_large(pair, "UPDATE big SET tag = 'updated', v = md5(id::text)")
            daemon.wait_applied(updated)
        finally:
            out, err, (early, abandoned) = daemon.stop()
        print(f"daemon applier: early_chunked={early} early_abandoned={abandoned}")
        for xid in (inserted, updated):
            check_logged_once(pair, xid, ROWS)
            if f"event=early_begin xid={xid} " not in err:
                raise CaptureFailure(f"xid {xid} was not begun at its first chunk: {err[-2000:]}")
        if early is None:
            raise CaptureFailure(f"the applier printed no progress line with early_chunked: {out[-1500:]}\n{err[-1500:]}")
        if early != 2 or abandoned != 0:
            raise CaptureFailure(f"early_chunked={early} early_abandoned={abandoned}, expected 2 and 0: {err[-2000:]}")
        check_applied_once(pair, (inserted, updated), "applied early")
        print("ok: chunked_transactions_are_applied_while_the_relay_writes_them")


@scenario(suite="large_transactions",
          invariants=("with early_apply off a chunked transaction is applied only after its commit marker",
                      "target equals source", "one dedup row per transaction"))
def early_apply_off_applies_at_the_commit_marker():
    with StreamPair("early-off") as pair:
        pair.write_config(apply_settings={"early_apply": "off"})
        daemon = Daemon(pair)
        try:
            inserted = commit_large(pair, f"INSERT INTO big SELECT g, 'big', repeat('z', 40) "
                                          f"FROM generate_series(1, {ROWS}) g")
            daemon.wait_applied(inserted)
        finally:
            out, err, (early, abandoned) = daemon.stop()
        print(f"daemon applier: early_chunked={early} early_abandoned={abandoned}")
        check_logged_once(pair, inserted, ROWS)
        if "event=early_begin" in err or early != 0 or abandoned != 0:
            raise CaptureFailure(f"early_apply = \"off\" but early_chunked={early} early_abandoned={abandoned}: "
                                 f"{err[-2000:]}")
        check_applied_once(pair, (inserted,), "applied at its commit marker")
        print("ok: early_apply_off_applies_at_the_commit_marker")


@scenario(suite="large_transactions", fault_points=("apply.early_after_chunk",),
          invariants=("a kill -9 with chunks staged in the open target transaction loses and doubles nothing",
                      "target equals source", "one dedup row per transaction"))
def applier_kill9_during_early_apply_converges_exactly_once():
    with StreamPair("early-applier-kill") as pair:
        env = dict(os.environ, TRELLARA_FAULTS="apply.early_after_chunk:20:crash")
        daemon = Daemon(pair, env)
        xid = commit_large(pair, f"INSERT INTO big SELECT g, 'big', repeat('k', 40) FROM generate_series(1, {ROWS}) g")
        out, err = daemon.wait_exit(300)
        if daemon.process.returncode != -signal.SIGKILL or f"event=early_begin xid={xid} " not in err:
            raise CaptureFailure(f"the applier did not die at apply.early_after_chunk inside xid {xid}'s early "
                                 f"transaction (exit {daemon.process.returncode}): {err[-2000:]}")
        record_fault_fired("apply.early_after_chunk")
        if pair.target.query("SELECT count(*) FROM big") != "0":
            raise CaptureFailure("rows of the killed early transaction are visible on the target")
        print(f"applier killed with chunks of xid {xid} staged; nothing of it visible on the target")
        again = Daemon(pair)
        try:
            again.wait_applied(xid)
        finally:
            again.stop()
        check_logged_once(pair, xid, ROWS)
        check_applied_once(pair, (xid,), "after the applier's kill -9 during early apply")
        print("ok: applier_kill9_during_early_apply_converges_exactly_once")


@scenario(suite="large_transactions", fault_points=("relay.after_drain_mid_transaction",),
          invariants=("a relay kill -9 while the applier stages the transaction early applies it once",
                      "target equals source"))
def relay_kill9_while_the_applier_applies_early_converges_exactly_once():
    point = "relay.after_drain_mid_transaction"
    with StreamPair("early-relay-kill", faults=f"{point}:1:stall") as pair:
        daemon = Daemon(pair)
        try:
            stall_line = f"trellara: fault point {point}: stall"
            pid = wait_for("the relay to run", lambda: worker_pid(pair.source), 60)
            xid = commit_large(pair, f"INSERT INTO big SELECT g, 'big', repeat('r', 40) "
                                     f"FROM generate_series(1, {ROWS}) g")
            wait_for(f"the relay to be held at {point}", lambda: stall_line in pair.source.server_log(), 120,
                     interval_s=0.05)
            if worker_pid(pair.source) != pid:
                raise CaptureFailure(f"the relay {pid} is gone before the kill at {point}")
            staged = wait_for("the applier to stage the durable chunks early",
                              lambda: daemon.early_begun(xid), 60)
            os.kill(pid, signal.SIGKILL)
            record_fault_fired(point)
            print(f"killed relay {pid} held at {point} (xid {xid})")
            wait_for("the relay to come back", lambda: (worker_pid(pair.source) or pid) != pid, 120)
            wait_log_covers_source(pair.source)
            daemon.wait_applied(xid)
        finally:
            out, err, (early, abandoned) = daemon.stop()
        print(f"daemon applier: early_chunked={early} early_abandoned={abandoned}")
        for line in err.splitlines():
            if "event=early_" in line:
                print(f"  {line}")
        check_logged_once(pair, xid, ROWS)
        if not staged:
            raise CaptureFailure(f"the applier never began xid {xid} early: {err[-2000:]}")
        check_applied_once(pair, (xid,), "after the relay's kill -9 during early apply")
        print("ok: relay_kill9_while_the_applier_applies_early_converges_exactly_once")


def check_failed_transaction_quarantined_whole(pair, env=None, outputs=None):
    """The target holds a row the source's chunked INSERT inserts near its end: the early attempt
    fails late, and the transaction must be quarantined with nothing of it on the target."""
    conflict = ROWS - 10
    pair.target.query("TRUNCATE big")
    pair.target.query(f"INSERT INTO big VALUES ({conflict}, 'target only', NULL)")
    xid = commit_large(pair, f"INSERT INTO big SELECT g, 'big', repeat('q', 40) FROM generate_series(1, {ROWS}) g")
    wait_log_covers_source(pair.source)
    result = run_apply(pair.config, 3, env)
    if outputs is not None:
        outputs.append(result.stderr)
    record_faults_from_output(result.stderr)
    rows = pair.target.query("SELECT count(*) || ' ' || min(tag) FROM big")
    cause = pair.target.query(f"SELECT state || ' ' || reason || ' ' || message FROM trellara.quarantine "
                              f"WHERE xid = {xid}")
    print(f"xid {xid}: target rows after the failure: {rows}; quarantine: {cause[:300]}")
    if rows != "1 target only":
        raise CaptureFailure(f"xid {xid} failed at key {conflict} but the target holds {rows.split()[0]} rows of "
                             f"table big (expected only its own row): part of a quarantined transaction was applied")
    if not cause.startswith("quarantined") or f"({conflict})" not in cause:
        raise CaptureFailure(f"xid {xid} is not quarantined naming key {conflict}: {cause!r}\n{result.stderr[-2000:]}")
    if f"event=early_begin xid={xid} " not in result.stderr:
        raise CaptureFailure(f"xid {xid} was not begun early: {result.stderr[-2000:]}")


@scenario(suite="large_transactions",
          invariants=("a chunked transaction that fails late in its early attempt is quarantined whole",
                      "nothing of it is on the target", "the quarantine names the failing key"))
def a_failed_early_transaction_is_quarantined_whole():
    with StreamPair("early-fail") as pair:
        check_failed_transaction_quarantined_whole(pair)
        print("ok: a_failed_early_transaction_is_quarantined_whole")


@scenario(suite="large_transactions", defect="apply_early_commit_per_chunk",
          pairs_with="a_failed_early_transaction_is_quarantined_whole",
          fault_points=("defect.apply_early_commit_per_chunk",),
          invariants=("with the defect the quarantined-whole check fails",))
def negative_control_early_commit_per_chunk_is_caught():
    point = "defect.apply_early_commit_per_chunk"
    with StreamPair("early-fail-defect") as pair:
        caught = checks_fail_under_defect(point, "quarantined whole", lambda env, outputs:
                                          check_failed_transaction_quarantined_whole(pair, env, outputs))
        print(f"{point} caught: {str(caught)[:400]}")


SCENARIOS = (chunked_transactions_are_applied_while_the_relay_writes_them,
             early_apply_off_applies_at_the_commit_marker,
             a_failed_early_transaction_is_quarantined_whole,
             negative_control_early_commit_per_chunk_is_caught,
             applier_kill9_during_early_apply_converges_exactly_once,
             relay_kill9_while_the_applier_applies_early_converges_exactly_once)

if __name__ == "__main__":
    run_scenarios(SCENARIOS)
