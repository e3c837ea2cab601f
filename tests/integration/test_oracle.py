#!/usr/bin/env python3
"""Integration: the oracle workload (tests/integration/oracle.py) checks what it claims, and its
check fails when the target is wrong.

  oracle_check_catches_a_tampered_target
      A flow pair carries the oracle workload (200 transactions) to the target; the check passes.
      Then the target is changed behind the applier's back, one way per invariant, and each time
      the check must raise naming that invariant and the offending key: one history row deleted,
      one balance changed (the sum breaks), two balances moved against each other (the sum holds,
      the accounts do not), one counter changed, one event deleted, one event duplicated, and one
      event that no source transaction committed. After each tamper is undone the check passes
      again, so each failure is caused by the tamper alone.
  oracle_allows_either_outcome_for_commits_lost_with_the_source
      The source is stopped immediately (SIGQUIT, crash recovery on restart) while the oracle's
      single connection runs transactions: the transaction in flight has an unknown outcome. After
      the restart the oracle runs on, the applier converges, and the check passes, saying
      explicitly which transactions of unknown outcome are on the target and which are not.
It must never leave a cluster running (the harness stops it by PID).
"""

import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


from capture_support import CaptureFailure, run_scenarios, scenario, wait_for  # noqa: E402
import oracle  # noqa: E402
from test_apply_robustness import FlowPair, run_apply, wait_log_covers_source  # noqa: E402

SEED = int(os.environ.get("TRELLARA_ORACLE_SEED", "20261201"))


def expect_violation(work, pair, invariant, key_text, tamper, undo):
    pair.target.psql(tamper)
    try:
        work.check(pair, label="tampered")
    except oracle.OracleViolation as error:
        message = str(error)
        if invariant not in message or key_text not in message:
            raise CaptureFailure(f"after `{tamper.strip()}` the oracle raised, but not naming invariant "
                                 f"{invariant!r} and {key_text!r}: {message}")
        print(f"caught as expected: {message[:300]}")
    else:
        raise CaptureFailure(f"after `{tamper.strip()}` on the target the oracle check passed: it cannot catch "
                             f"a violation of {invariant!r}")
    finally:
        pair.target.psql(undo)
    work.check(pair, label="after undoing the tamper")


@scenario(suite="oracle", invariants=oracle.INVARIANTS + (
    "each invariant's check raises on a target tampered to violate it, naming the offending key",))
def oracle_check_catches_a_tampered_target():
    with FlowPair("oracle-self", oracle.DDL, oracle.TABLES) as pair:
        work = oracle.Oracle(SEED)
        work.setup(pair)
        counts = work.run(pair, 200)
        if counts["committed"] != 200:
            raise CaptureFailure(f"the oracle's transactions did not all commit on a healthy source: {counts}")
        wait_log_covers_source(pair.source)
        run_apply(pair.config, 0)
        checked = work.check(pair)
        if list(checked) != list(oracle.INVARIANTS):
            raise CaptureFailure(f"the check returned {checked}")
        target = pair.target
        # The target's session_replication_role stays origin here: no trigger, so plain DML works.
        key, seq, txn = target.query("SELECT k, seq, txn FROM public.oracle_key_history ORDER BY k, seq "
                                     "OFFSET 3 LIMIT 1").split("|")
        expect_violation(work, pair, "per-key history seq 1..n without gaps", f"key {key}",
                         f"DELETE FROM public.oracle_key_history WHERE k = {key} AND seq = {seq}",
                         f"INSERT INTO public.oracle_key_history VALUES ({key}, {seq}, {txn})")
        expect_violation(work, pair, "ledger sum of balances conserved", "oracle or source: [7]",
                         "UPDATE public.oracle_accounts SET balance = balance + 1 WHERE id = 7",
                         "UPDATE public.oracle_accounts SET balance = balance - 1 WHERE id = 7")
        expect_violation(work, pair, "every target account equals the source's", "accounts [3, 9]",
                         "UPDATE public.oracle_accounts SET balance = balance + CASE id WHEN 3 THEN 5 ELSE -5 END "
                         "WHERE id IN (3, 9)",
                         "UPDATE public.oracle_accounts SET balance = balance - CASE id WHEN 3 THEN 5 ELSE -5 END "
                         "WHERE id IN (3, 9)")
        expect_violation(work, pair, "per-key counter equals the source's", "keys [2]",
                         "UPDATE public.oracle_counters SET n = n + 1 WHERE k = 2",
                         "UPDATE public.oracle_counters SET n = n - 1 WHERE k = 2")
        event, event_txn, note = target.query("SELECT id, txn, note FROM public.oracle_events ORDER BY id "
                                              "OFFSET 17 LIMIT 1").split("|")
        expect_violation(work, pair, "target holds exactly the committed insert ids", f"missing [{event}]",
                         f"DELETE FROM public.oracle_events WHERE id = {event}",
                         f"INSERT INTO public.oracle_events VALUES ({event}, {event_txn}, '{note}')")
        expect_violation(work, pair, "no duplicate insert id", f"ids [{event}]",
                         f"INSERT INTO public.oracle_events VALUES ({event}, {event_txn}, '{note}')",
                         f"DELETE FROM public.oracle_events WHERE ctid = (SELECT max(ctid) FROM public.oracle_events "
                         f"WHERE id = {event})")
        expect_violation(work, pair, "target holds exactly the committed insert ids", "never committed but present [999999]",
                         "INSERT INTO public.oracle_events VALUES (999999, 999999, 'never on the source')",
                         "DELETE FROM public.oracle_events WHERE id = 999999")
        pair.check_no_crashes()
    print("ok: oracle_check_catches_a_tampered_target")


@scenario(suite="oracle", invariants=oracle.INVARIANTS + (
    "a transaction in flight when the source stops immediately is reported as unknown and allowed either way",))
def oracle_allows_either_outcome_for_commits_lost_with_the_source():
    with FlowPair("oracle-unknown", oracle.DDL, oracle.TABLES) as pair:
        work = oracle.Oracle(SEED + 1)
        work.setup(pair)
        stop = threading.Event()
        results = {}

        def load():
            try:
                results["counts"] = work.run(pair, 100000, timeout_s=20, stop=stop.is_set)
            except BaseException as error:  # reported by the main thread
                results["error"] = error
        thread = threading.Thread(target=load, daemon=True)
        thread.start()
        try:
            wait_for("the oracle to commit 100 transactions", lambda: len(work.committed_ids) >= 100 or
                     not thread.is_alive(), 60, 0.01)
            committed_before = len(work.committed_ids)
            old = pair.source.restart_immediate()
            print(f"source postmaster {old} stopped immediately after {committed_before} committed ids, started again")
            wait_for("the oracle to commit again after the restart",
                     lambda: len(work.committed_ids) > committed_before + 50 or not thread.is_alive(), 90, 0.05)
        finally:
            stop.set()
            thread.join(120)
        if "error" in results:
            raise results["error"]
        if not work.unknown:
            raise CaptureFailure("no oracle transaction had an unknown outcome although the source stopped "
                                 "immediately under it: the scenario did not exercise the unknown path")
        if len(work.committed_ids) <= committed_before:
            raise CaptureFailure("the oracle committed nothing after the source restart")
        wait_for("the relay to run again after the source restart",
                 lambda: pair.source.query("SELECT count(*) FROM trellara.status() WHERE flow = 'app' AND "
                                           "log_durable_lsn IS NOT NULL") == "1", 90)
        wait_log_covers_source(pair.source)
        run_apply(pair.config, 0)
        work.check(pair, label="after the source's immediate restart")
        report = work.last_report
        if len(report["unknown_applied"]) + len(report["unknown_absent"]) != len(
                [t for t in work.unknown if not t.get("failed")]):
            raise CaptureFailure(f"the oracle did not resolve every unknown transaction: {report}")
    print("ok: oracle_allows_either_outcome_for_commits_lost_with_the_source")


SCENARIOS = (oracle_check_catches_a_tampered_target, oracle_allows_either_outcome_for_commits_lost_with_the_source)

if __name__ == "__main__":
    run_scenarios(SCENARIOS)
