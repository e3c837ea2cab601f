#!/usr/bin/env python3
"""Integration: `trellara apply` stays exactly-once when real processes die, and replicates hostile
names and values exactly (DESIGN §2, §6).

Every scenario starts its own source cluster (with a flow) and target cluster (without the
extension: the applier bootstraps its state), creates the same tables on both, and compares per
table the row count and an order-independent checksum (md5 over the sorted md5s of the rows' text),
and the dedup table against the log: one row per completed source transaction, same commit LSNs.

  applier_kill9_at_random_moments_converges_exactly_once
      a ledger workload (an account row and an append-only ledger row carrying the account's
      running sequence number: a duplicate effect shows as a repeated (account, seq) or a count
      that disagrees with the account's counter); `kill -9` of the applier, restarted each time,
      >= TRELLARA_KILLS times (default 20; seed TRELLARA_KILL_SEED, printed): every fourth kill at
      a seeded random moment after the start, the others at a seeded random moment after the run
      was seen committing (a condition), so most kills land while it commits on any machine.
  target_immediate_restart_while_applying_converges
      the target is stopped immediately (SIGQUIT by PID) and started again while a daemon applier
      commits under a continuous source load: its WAL writer, background writer and checkpointer
      are frozen first and the applier is frozen once its last commit lies past the WAL the target
      wrote, so asynchronously committed transactions are really lost. The applier exits 1 (or,
      once it reconnects, keeps running and is stopped) without quarantining anything, no
      transaction below the recorded consumer offset is missing on the target, a visible loss
      happened; a rerun converges. Every wait is a condition with a generous ceiling.
  negative_control_ack_before_commit_is_caught
      the kill -9 scenario with the defect defect.apply_ack_before_commit (consumer offset written
      past every transaction read, when a batch is sent, before any COMMIT): the convergence
      checks must fail.
  negative_control_offset_past_flush_is_caught
      the same crash with the defect defect.apply_offset_ignores_flush (offset follows commits, not
      flushes): the crash must leave lost transactions below the consumer offset, or the scenario
      above could not catch that defect.
  chunked_transaction_applies_atomically_and_once
      one source transaction of 5,000 rows (5 chunks + manifest + commit marker); the applier is
      held inside that transaction on the target with every change staged (fault point
      apply.after_staging_before_commit, stall) and killed there: nothing of it is visible; the
      rerun commits it whole (observed counts are only 0 or 5,000) with one dedup row.
  conflicting_duplicate_is_quarantined
      a dedup row's checksum is altered (a different transaction at the same boundary) and the
      consumer offset removed: apply exits 3 naming xid and commit LSN, reason checksum_conflict,
      and nothing after it is applied.
  hostile_identifiers_and_values_replicate_exactly
      names with quotes, semicolons, mixed case, non-ASCII, 63 bytes; backslashes, newlines, NaN,
      Infinity, -0, > 1 MB text, NULL vs '', bytea, arrays, jsonb; an UPDATE that leaves a TOASTed
      column unchanged keeps the target's value.
  negative_control_unchanged_toast_as_null_is_caught
      the same with defect.unchanged_toast_as_null (the UPDATE writes the unchanged TOASTed column
      as NULL): its TOAST-preservation check must fail.

The kill -9, target-restart and chunked-kill scenarios also run the oracle workload
(tests/integration/oracle.py) in their backlog and check its invariants after converging.

It prints what it measured. It must never signal a process it did not start (the applier is our
child, killed or frozen by its Popen handle; clusters are stopped by the harness by PID; the
target's WAL writer, background writer and checkpointer are frozen and killed only after their PIDs
were read from that cluster's pg_stat_activity) and never leave a cluster running.
"""

import json
import os
import random
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import (CaptureFailure, TRELLARA_BIN, log_records, log_transactions, lsn_to_int,  # noqa: E402
                             run_pgbench, wait_for, run_scenarios, scenario, record_fault_fired,
                             record_faults_from_output)
from harness import PG_BIN  # noqa: E402
import oracle  # noqa: E402
import flow_pair  # noqa: E402

KILLS = int(os.environ.get("TRELLARA_KILLS", "20"))
KILL_SEED = int(os.environ.get("TRELLARA_KILL_SEED", str(random.SystemRandom().randrange(1 << 31))))
EXIT_BLOCKED = 3
APPLY_TIMEOUT_S = 120


def quote_ident(name):
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text):
    return "'" + text.replace("'", "''") + "'"


def assert_same_data(source, target, tables, label):
    differing = []
    for table in tables:
        want, have = flow_pair.table_digest(source, table), flow_pair.table_digest(target, table)
        print(f"{label}: {table}: source {want}, target {have}")
        if want != have:
            differing.append(table)
    if differing:
        raise CaptureFailure(f"{label}: source and target differ in {differing}")


def assert_each_transaction_applied_once(target, log_dir, label):
    """Dedup rows == completed transactions of the log, same commit LSNs, none twice."""
    logged, shape = log_transactions(log_records(log_dir))
    want = sorted(lsn for _, lsn in logged)
    have = sorted(lsn_to_int(text) for text in target.query(
        "SELECT commit_lsn FROM trellara.applied_transactions WHERE flow = 'app'").split())
    print(f"{label}: log holds {len(want)} completed transactions ({shape['chunked_transactions']} chunked); "
          f"target has {len(have)} dedup rows")
    if want != have:
        missing = sorted(set(want) - set(have))
        extra = sorted(set(have) - set(want))
        raise CaptureFailure(f"{label}: dedup rows do not match the log: {len(missing)} missing, {len(extra)} extra, "
                             f"{len(have) - len(set(have))} repeated")
    progress = target.query("SELECT pg_replication_origin_progress('trellara_app', false)")
    if want and lsn_to_int(progress) != want[-1]:
        raise CaptureFailure(f"{label}: origin progress {progress} is not the last logged commit")
    quarantined = target.query("SELECT count(*) FROM trellara.quarantine WHERE state <> 'resolved'")
    if quarantined != "0":
        raise CaptureFailure(f"{label}: {quarantined} unresolved quarantine rows on the target: "
                             f"{target.query('SELECT xid, reason, state, detail FROM trellara.quarantine')}")


def wait_log_covers_source(source, timeout_s=90):
    """flow_pair.wait_log_covers_source for flow app with this script's 90 s ceiling (kept under
    this name: other scripts import it from here)."""
    return flow_pair.wait_log_covers_source(source, timeout_s=timeout_s)


def apply_command(config_path):
    return [TRELLARA_BIN, "apply", "--config", config_path, "--until-caught-up"]


def with_test_defects(command, env):
    """`command` (a `trellara ...` argv) with the explicit switch --enable-test-defects (a global
    option, before the subcommand) when `env` switches a defect.* fault point on: the command
    refuses a defect in TRELLARA_FAULTS without it (docs/decisions.md)."""
    if not env or "defect." not in env.get("TRELLARA_FAULTS", ""):
        return command
    return [command[0], "--enable-test-defects"] + command[1:]


def run_apply(config_path, expect_code, env=None):
    started = time.monotonic()
    result = subprocess.run(with_test_defects(apply_command(config_path), env), capture_output=True, text=True,
                            timeout=APPLY_TIMEOUT_S, env=env)
    lines = [line for line in result.stdout.splitlines() if line.startswith("apply flow=")]
    print(f"apply (exit {result.returncode}, {time.monotonic() - started:.1f}s): "
          f"{lines[-1] if lines else result.stderr.strip()[-500:]}")
    if result.returncode != expect_code:
        raise CaptureFailure(f"trellara apply exited {result.returncode}, expected {expect_code}\n"
                             f"stdout: {result.stdout[-2000:]}\nstderr: {result.stderr[-2000:]}")
    return result


def start_applier(config_path):
    return subprocess.Popen(apply_command(config_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def kill9(proc):
    """SIGKILL to our own child by its Popen handle; reaps it."""
    if proc.poll() is None:
        proc.kill()
    proc.communicate(timeout=30)


def applier_session_gone(target):
    return target.query("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'trellara/app'") == "0"


class FlowPair(flow_pair.FlowPair):
    """The same DDL on both sides, a flow over `tables`, no [source] in the configuration, and a
    consumer at the log's start (the scenarios compare the dedup rows with every transaction the
    log ever held)."""

    def __init__(self, name, ddl, tables, target_settings=None):
        super().__init__(name, source_sql=ddl, tables=tables, target_settings=target_settings, with_source=False,
                         whole_log_consumer=True)
        self.ddl = ddl


LEDGER_DDL = """
CREATE TABLE public.accounts (id int PRIMARY KEY, balance bigint NOT NULL, ops int NOT NULL);
CREATE TABLE public.ledger (account int NOT NULL, seq int NOT NULL, amount int NOT NULL);
INSERT INTO public.accounts SELECT g, 0, 0 FROM generate_series(1, 50) g;
"""
LEDGER_TABLES = ("public.accounts", "public.ledger")
LEDGER_SCRIPT = """\\set a random(1, 50)
\\set d random(-100, 100)
BEGIN;
UPDATE accounts SET balance = balance + :d, ops = ops + 1 WHERE id = :a RETURNING ops AS seq \\gset
INSERT INTO ledger VALUES (:a, :seq, :d);
END;
"""


def run_ledger_workload(pair, transactions):
    script = os.path.join(pair.work.name, "ledger.sql")
    with open(script, "w") as out:
        out.write(LEDGER_SCRIPT)
    per_client = transactions // 4
    run_pgbench(pair.source, ["-c", "4", "-j", "2", "-t", str(per_client), "-n", "-f", script])
    wait_log_covers_source(pair.source)
    return per_client * 4


def assert_ledger_has_no_duplicate_effects(target, label):
    repeated = target.query("SELECT count(*) FROM (SELECT account, seq FROM public.ledger GROUP BY 1, 2 "
                            "HAVING count(*) > 1) d")
    disagreeing = target.query("SELECT count(*) FROM public.accounts a WHERE a.ops <> "
                               "(SELECT count(*) FROM public.ledger l WHERE l.account = a.id) OR a.balance <> "
                               "(SELECT coalesce(sum(amount), 0) FROM public.ledger l WHERE l.account = a.id)")
    print(f"{label}: repeated (account, seq) ledger rows {repeated}; accounts disagreeing with their ledger "
          f"{disagreeing}")
    if repeated != "0" or disagreeing != "0":
        raise CaptureFailure(f"{label}: duplicate or missing effects on the target")


FIRST_BACKLOG_BATCH = 800
MAX_BACKLOG_BATCH = 12800


def kill9_rounds(pair, rng, kills_wanted, env=None):
    """Starts the applier over and over and kills it with kill -9, until `kills_wanted` kills,
    adding ledger backlog whenever a run caught up first; then one run to the end. Every fourth
    kill lands at a random moment 0.05-0.6 s after the start (start-up included); the others wait
    (a condition) until the run has committed something, then kill at a random moment up to 0.3 s
    later, so at least three quarters of the kills land while the applier commits, whatever the
    machine's speed. A run that caught up before its kill gets twice the backlog next time (up to
    MAX_BACKLOG_BATCH): a fast applier commits 800 transactions in a few tens of milliseconds, in
    a handful of grouped target transactions, and with a fixed batch the kills then land by
    chance only (a clean-clone CI run spent 700 s here). Returns (committed, kills, landed,
    refused_busy, batches)."""
    def applied():
        return pair.target.psql("SELECT count(*) FROM trellara.applied_transactions", check=False).stdout.strip()
    committed = run_ledger_workload(pair, 2400)
    print(f"backlog: {committed} ledger transactions")
    kills, landed, refused_busy, batches = 0, 0, 0, 1
    backlog = FIRST_BACKLOG_BATCH
    while True:
        before = applied()
        proc = subprocess.Popen(with_test_defects(apply_command(pair.config), env), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        delay = None
        if kills < kills_wanted:
            if kills % 4 == 3:
                delay = rng.uniform(0.05, 0.6)
            else:
                wait_for("the applier to commit in this run (or to end)",
                         lambda: proc.poll() is not None or applied() != before, APPLY_TIMEOUT_S, 0.01)
                delay = rng.uniform(0.0, 0.3)
        try:
            out, err = proc.communicate(timeout=delay if delay is not None else APPLY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            kill9(proc)
            kills += 1
            if before != applied():
                landed += 1
            # The killed applier's backend ends when it sees the socket close; until then it
            # holds the flow's advisory lock.
            wait_for("the killed applier's target session to end", lambda: applier_session_gone(pair.target), 60,
                     0.02)
            continue
        if proc.returncode == 1 and "another applier of flow app is running" in err:
            refused_busy += 1
            time.sleep(0.05)
            continue
        if proc.returncode != 0:
            raise CaptureFailure(f"apply exited {proc.returncode} after {kills} kills: {err[-2000:]}")
        if kills >= kills_wanted:
            print(f"final run: {out.strip().splitlines()[-1]}")
            return committed, kills, landed, refused_busy, batches
        # Caught up before enough kills: give it more backlog, more each time this happens.
        committed += run_ledger_workload(pair, backlog)
        backlog = min(backlog * 2, MAX_BACKLOG_BATCH)
        batches += 1


def assert_kill9_converged(pair, committed, label):
    assert_same_data(pair.source, pair.target, LEDGER_TABLES, label)
    assert_each_transaction_applied_once(pair.target, pair.log_dir, label)
    assert_ledger_has_no_duplicate_effects(pair.target, label)
    ledger_rows = int(pair.target.query("SELECT count(*) FROM public.ledger"))
    if ledger_rows != committed:
        raise CaptureFailure(f"target ledger has {ledger_rows} rows, the source committed {committed}")


@scenario(suite="apply_crash", invariants=("no loss", "no duplicate effect (ledger seq per account)", "each logged transaction applied once", "data equals source") + oracle.INVARIANTS)
def applier_kill9_at_random_moments_converges_exactly_once():
    rng = random.Random(KILL_SEED)
    print(f"kill -9 test: seed {KILL_SEED} (TRELLARA_KILL_SEED={KILL_SEED} reproduces the delays), "
          f"{KILLS} kills (TRELLARA_KILLS)")
    with FlowPair("apply-kill9", LEDGER_DDL + oracle.DDL, LEDGER_TABLES + oracle.TABLES) as pair:
        started = time.monotonic()
        work = oracle.Oracle(KILL_SEED)
        work.setup(pair)
        work.run(pair, 300)   # part of the backlog the killed appliers work through
        committed, kills, landed, refused_busy, batches = kill9_rounds(pair, rng, KILLS)
        print(f"kill -9: {kills} kills ({landed} after the applier had committed something in that run), "
              f"{refused_busy} restarts refused while the killed session ended, {batches} backlog batches, "
              f"{committed} ledger transactions, {time.monotonic() - started:.1f}s")
        if kills < KILLS:
            raise CaptureFailure(f"only {kills} kills, wanted {KILLS}")
        if landed < KILLS // 4:
            raise CaptureFailure(f"only {landed} of {kills} kills landed while the applier was committing")
        assert_kill9_converged(pair, committed, "after kill -9")
        work.check(pair, "oracle after kill -9")
        pair.check_no_crashes()
    print("ok: applier_kill9_at_random_moments_converges_exactly_once")


@scenario(suite="apply_crash", defect="apply_ack_before_commit", pairs_with="applier_kill9_at_random_moments_converges_exactly_once", invariants=("the kill -9 convergence checks fail when the consumer offset is written before COMMIT",))
def negative_control_ack_before_commit_is_caught():
    """Seed 002's negative control for the kill -9 scenario: with the defect
    defect.apply_ack_before_commit the applier records its consumer offset past every transaction
    it has read as soon as it sends a batch, before the target commits any of them. The same kills
    must then lose transactions that the
    convergence checks see; if they pass, the kill -9 scenario could not catch acknowledging
    before applying."""
    rng = random.Random(KILL_SEED + 1)
    kills_wanted = 8
    with FlowPair("apply-negack", LEDGER_DDL, LEDGER_TABLES) as pair:
        env = dict(os.environ, TRELLARA_FAULTS="defect.apply_ack_before_commit:1:defect")
        committed, kills, landed, _, _ = kill9_rounds(pair, rng, kills_wanted, env)
        try:
            assert_kill9_converged(pair, committed, "negative control")
        except CaptureFailure as caught:
            print(f"negative control: {kills} kills with the consumer offset written before COMMIT — caught: "
                  f"{str(caught).splitlines()[0][:300]}")
        else:
            raise CaptureFailure(f"negative control: {kills} kills ({landed} landed) with the consumer offset written "
                                 f"before COMMIT converged anyway — the kill -9 scenario cannot catch that defect")
    print("ok: negative_control_ack_before_commit_is_caught")


def consumer_offset(log_dir):
    path = os.path.join(log_dir, "consumers", "applier")
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        text = f.read()
    return int(text.split("next_offset=")[1].split()[0])


# The target restart scenario's ceilings. Each is a limit on a condition, never a timing the
# scenario relies on: on a slow or shared machine the conditions are met later, not missed.
CONDITION_CEILING_S = 300
APPLIED_BEFORE_FREEZE = 500      # transactions the applier commits before the WAL writer is frozen
APPLIED_WHILE_FROZEN = 1500      # ... and after, so the frozen window holds committed transactions
RESTART_ATTEMPTS = 6             # immediate restarts at most, until one loses a visible transaction
FREEZE_TRIES = 20                # applier freezes per attempt until the target holds unwritten WAL
APPLIER_EXIT_AFTER_LOSS_S = 60
# A backlog written before each attempt keeps the applier busy in batches (it flushes the target's
# WAL only every 512 transactions or second then, instead of at every visit of the log's tail), and
# a continuous source load (pgbench -R, transactions per second) means it never runs out of
# transactions to commit, however fast it is: a daemon applier never stops on its own, so the
# conditions below are met sooner or later, never missed.
BACKLOG_PER_ATTEMPT = 6000
SOURCE_RATE_TPS = 400
# The target keeps WAL for the applier's transactions in its WAL buffers only: autovacuum (whose
# buffer ring flushes WAL) is off; the WAL writer, background writer and checkpointer are frozen.
RESTART_TARGET_SETTINGS = {"autovacuum": "off"}
# The server processes frozen, each only while it waits in its main loop (the wait event it shows
# then): stopped anywhere else it might hold a lock (the WAL writer WALWriteLock, say) and every
# backend that needs it would wait for it forever.
FROZEN_SERVER_PROCESSES = {"walwriter": ("WalWriterMain",),
                           "background writer": ("BgWriterMain", "BgWriterHibernate"),
                           "checkpointer": ("CheckpointerMain",)}
SERVER_FREEZE_TRIES = 500


def start_source_load(pair, script_name="ledger-load.sql"):
    """The ledger workload at SOURCE_RATE_TPS until stop_source_load; our own child process."""
    script = os.path.join(pair.work.name, script_name)
    with open(script, "w") as out:
        out.write(LEDGER_SCRIPT)
    return subprocess.Popen([os.path.join(PG_BIN, "pgbench"), "-h", pair.source.socket_dir, "-p",
                             str(pair.source.port), "-U", "postgres", "-n", "-c", "2", "-j", "1", "-R",
                             str(SOURCE_RATE_TPS), "-T", "3600", "-f", script, "postgres"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def stop_source_load(pair, load):
    if load.poll() is None:
        load.terminate()  # our own child, by its Popen handle
    load.communicate(timeout=120)
    wait_log_covers_source(pair.source)


def daemon_apply_command(config_path):
    """The applier without --until-caught-up: it follows the log and never ends on its own."""
    return [TRELLARA_BIN, "apply", "--config", config_path]


def unwritten_commit_bytes(target):
    """How far the end of the commit record of the last transaction the applier committed
    (local_lsn of its replication origin) lies beyond the WAL the target has written to the kernel
    (pg_current_wal_lsn, the write position). Positive: an immediate stop loses that committed,
    visible transaction (written WAL survives in the page cache; nothing else writes WAL while the
    applier, WAL writer, background writer and checkpointer are frozen and autovacuum is off)."""
    return int(target.query("SELECT pg_wal_lsn_diff(local_lsn, pg_current_wal_lsn()) FROM "
                            "pg_replication_origin_status WHERE external_id = 'trellara_app'") or 0)


def process_state(pid):
    """The state letter of /proc/<pid>/stat ('T' once SIGSTOP took effect)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def freeze_server_process_while_idle(target, backend_type, idle_wait_events):
    """SIGSTOP the target's `backend_type` process (its PID read from that cluster's
    pg_stat_activity) at a moment it waits in its main loop, so it holds no lock. Retries (SIGCONT,
    then SIGSTOP again) while it is stopped anywhere else. Returns its PID."""
    pid = int(target.query(f"SELECT pid FROM pg_stat_activity WHERE backend_type = '{backend_type}'"))
    for _ in range(SERVER_FREEZE_TRIES):
        os.kill(pid, signal.SIGSTOP)
        wait_for(f"the target's {backend_type} (pid {pid}) to stop", lambda: process_state(pid) == "T",
                 CONDITION_CEILING_S, 0.005)
        event = target.query(f"SELECT wait_event FROM pg_stat_activity WHERE pid = {pid}")
        if event in idle_wait_events:
            return pid
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.01)  # let it reach its main loop again; only a retry interval
    raise CaptureFailure(f"the target's {backend_type} (pid {pid}) was never found waiting in its main loop "
                         f"({', '.join(idle_wait_events)}) in {SERVER_FREEZE_TRIES} tries")


def applier_backend_waits_for_client(target):
    """The applier's backend is waiting on its (frozen) client: reading or writing the socket."""
    return target.query("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'trellara/app' AND "
                        "wait_event IN ('ClientRead', 'ClientWrite')") == "1"


def crash_target_while_applying(pair, env=None):
    """Crashes the target while a daemon applier commits under a continuous source load, up to
    RESTART_ATTEMPTS times, until a crash loses visibly committed transactions or leaves a
    violation. Each attempt: wait until the applier committed APPLIED_BEFORE_FREEZE transactions
    and recorded an offset; freeze the target's WAL writer, background writer and checkpointer
    (SIGSTOP, each while it waits in its main loop, holding no lock); wait until it committed
    APPLIED_WHILE_FROZEN more; freeze the applier (SIGSTOP, our
    child) once its backend waits on it and the target holds unwritten WAL (else let it run on and
    try again: the commit record of its last transaction must lie past the WAL written); count the
    visible transactions and read the consumer offset; stop the target
    immediately and start it. Returns (lost_total, violations): how many visibly committed
    transactions the crashes lost, and the transactions below the consumer offset recorded at a
    crash that the restarted target does not hold (the rule's violation)."""
    def applied():
        return int(pair.target.psql("SELECT count(*) FROM trellara.applied_transactions",
                                    check=False).stdout.strip() or 0)
    lost_total = 0
    for attempt in range(1, RESTART_ATTEMPTS + 1):
        run_ledger_workload(pair, BACKLOG_PER_ATTEMPT)
        start_count = applied()
        start_offset = consumer_offset(pair.log_dir)
        proc = subprocess.Popen(with_test_defects(daemon_apply_command(pair.config), env), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        frozen = []
        restarted = False
        try:
            def wait_applier(what, condition):
                """A condition on the running applier; names what the target waits on if it is never met."""
                try:
                    wait_for(what, lambda: proc.poll() is not None or condition(), CONDITION_CEILING_S, 0.05)
                except CaptureFailure as failure:
                    waits = pair.target.psql("SELECT backend_type, pid, state, wait_event_type, wait_event FROM "
                                             "pg_stat_activity", check=False).stdout.strip()
                    raise CaptureFailure(f"{failure}; target processes:\n{waits}") from None
                if proc.poll() is not None:
                    raise CaptureFailure(f"the daemon applier exited {proc.returncode} while waiting for {what}: "
                                         f"{proc.communicate()[1][-2000:]}")
            wait_applier(f"the applier to commit {APPLIED_BEFORE_FREEZE} transactions and record an offset",
                         lambda: applied() >= start_count + APPLIED_BEFORE_FREEZE and
                         consumer_offset(pair.log_dir) > start_offset)
            for backend_type, idle_wait_events in FROZEN_SERVER_PROCESSES.items():
                frozen.append(freeze_server_process_while_idle(pair.target, backend_type, idle_wait_events))
            frozen_at = applied()
            wait_applier(f"the applier to commit {APPLIED_WHILE_FROZEN} more transactions with the WAL writer frozen",
                         lambda: applied() >= frozen_at + APPLIED_WHILE_FROZEN)
            for freeze in range(1, FREEZE_TRIES + 1):
                os.kill(proc.pid, signal.SIGSTOP)  # our own child
                wait_for("the frozen applier's backend to wait on its client",
                         lambda: applier_backend_waits_for_client(pair.target), CONDITION_CEILING_S, 0.05)
                unwritten = unwritten_commit_bytes(pair.target)
                if unwritten > 0 or freeze == FREEZE_TRIES:
                    break  # frozen: crash now (the last try crashes anyway; the next attempt starts over)
                # Its last commit is written (it had just flushed, at the log's tail or for its
                # offset): let it commit more, then freeze it again.
                os.kill(proc.pid, signal.SIGCONT)
                resumed_at = applied()
                wait_applier("the applier to commit more transactions", lambda: applied() > resumed_at)
            visible = applied()
            offset = consumer_offset(pair.log_dir)  # the applier is frozen: it cannot move
            old_pid = pair.target.restart_immediate(stopped_children=tuple(frozen))
            restarted = True
            survived = applied()
            records = [r for r in log_records(pair.log_dir) if r["type"] in ("envelope", "commit_marker")]
            have = {lsn_to_int(t) for t in pair.target.query(
                "SELECT commit_lsn FROM trellara.applied_transactions WHERE flow = 'app'").split()}
            violations = [r for r in records if r["offset"] < offset and lsn_to_int(r["commit_lsn"]) not in have]
            os.kill(proc.pid, signal.SIGCONT)
            try:
                out, err = proc.communicate(timeout=APPLIER_EXIT_AFTER_LOSS_S)
            except subprocess.TimeoutExpired:
                # An applier that reconnects after a target restart keeps running: stop it.
                proc.terminate()
                out, err = proc.communicate(timeout=APPLIER_EXIT_AFTER_LOSS_S)
        finally:
            if not restarted:
                for pid in frozen:
                    os.kill(pid, signal.SIGCONT)
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                kill9(proc)
        lost = max(0, visible - survived)
        lost_total += lost
        print(f"attempt {attempt}: target postmaster {old_pid} stopped immediately with {visible} transactions "
              f"visible (applier frozen {freeze}x), its last commit {unwritten} bytes past the written WAL; "
              f"{survived} survived the restart (lost {lost}); consumer "
              f"offset {offset}; applier exit {proc.returncode}: {err.strip()[-300:]}")
        if proc.returncode == 1:
            if "connection" not in err:
                raise CaptureFailure(f"the applier's message does not say the connection was lost: {err}")
        elif proc.returncode != 0:  # 0: a reconnecting applier, stopped by SIGTERM
            raise CaptureFailure(f"the applier exited {proc.returncode} when the target went away, expected 1 "
                                 f"(or 0 once stopped, if it reconnects):\n{out[-1000:]}\n{err[-1000:]}")
        if violations:
            return lost_total, violations
        quarantined = pair.target.query("SELECT count(*) FROM trellara.quarantine")
        if quarantined != "0":
            raise CaptureFailure("a lost target was treated as a quarantine: "
                                 + pair.target.query("SELECT xid, reason, sqlstate, detail FROM trellara.quarantine"))
        if lost_total > 0:
            break
    return lost_total, []


def diagnostics(pair):
    """`trellara status --view diagnostics` of the pair's flow, as JSON and as text."""
    views = {}
    for fmt in ("json", "text"):
        views[fmt] = flow_pair.run_trellara(["status", "--config", pair.config, "--view", "diagnostics", "--format",
                                             fmt], timeout_s=60,
                                            what=f"status --view diagnostics --format {fmt}").stdout
    try:
        return json.loads(views["json"]), views["text"]
    except ValueError as e:
        raise CaptureFailure(f"status --view diagnostics --format json printed no JSON ({e}): {views['json'][:300]}")


def assert_diagnostics_name_the_replay_boundary(pair):
    """Seed qualification_target_restart_during_apply: after the target restart, before any rerun,
    the diagnostics view names the replay boundary — the log consumer offset the rerun starts from,
    the target's origin progress (what the restarted target really holds), the transactions pending
    past the offset with the last of their commit LSNs — and the replay command; the target's own
    recorded offset is never ahead of the log's. Returns the boundary it saw."""
    d, text = diagnostics(pair)
    offset = consumer_offset(pair.log_dir)
    log, target = d.get("log") or {}, d.get("target") or {}
    consumers = {c.get("name"): c for c in log.get("consumers") or []}
    shown = (consumers.get("applier") or {}).get("next_offset")
    if shown != offset:
        raise CaptureFailure(f"diagnostics show the applier's consumer offset as {shown}, the log holds {offset}: {log}")
    progress = pair.target.query("SELECT pg_replication_origin_progress('trellara_app', false)")
    remote = (target.get("origin") or {}).get("remote_lsn")
    if progress and remote != progress:
        raise CaptureFailure(f"diagnostics show origin remote_lsn {remote}, the restarted target's flushed origin "
                             f"progress is {progress}")
    recorded = target.get("recorded_consumer_offset")
    if recorded is not None and int(recorded) > offset:
        raise CaptureFailure(f"the target records consumer offset {recorded}, past the log's {offset}")
    if not log.get("lag_records") or log.get("pending_last_commit_lsn") is None:
        raise CaptureFailure(f"transactions are pending past offset {offset} but diagnostics show lag_records "
                             f"{log.get('lag_records')}, pending_last_commit_lsn {log.get('pending_last_commit_lsn')}")
    if "trellara apply --config " + pair.config not in d.get("next_action", ""):
        raise CaptureFailure(f"diagnostics' next action does not name the replay command: {d.get('next_action')!r}")
    for fact in (str(offset), log["pending_last_commit_lsn"], "trellara apply --config " + pair.config):
        if fact not in text:
            raise CaptureFailure(f"the text diagnostics do not show {fact!r}:\n{text[:1500]}")
    print(f"diagnostics after the restart: replay from consumer offset {offset}, origin {remote}, "
          f"{log['lag_records']} records pending up to {log['pending_last_commit_lsn']}; next: {d['next_action']}")


def assert_diagnostics_show_nothing_pending(pair):
    """After the replay no transaction is pending (progress markers the relay may add meanwhile are not
    transactions, so lag_records is not compared)."""
    d, _ = diagnostics(pair)
    log = d.get("log") or {}
    if log.get("pending_last_commit_lsn") is not None:
        raise CaptureFailure(f"after the replay diagnostics still show transactions pending up to "
                             f"{log.get('pending_last_commit_lsn')} (lag_records {log.get('lag_records')})")


@scenario(seed_rows=("qualification_target_restart_during_apply",), suite="apply_crash",
          invariants=("no transaction below the consumer offset lost by a target crash", "nothing quarantined",
                      "diagnostics name the replay boundary and command", "rerun converges exactly once")
          + oracle.INVARIANTS)
def target_immediate_restart_while_applying_converges():
    """The target stops immediately (its backends die, unwritten WAL is lost) while the applier
    commits with synchronous_commit = off. The durability rule under test: the consumer offset never
    passes a transaction the target can still lose, so after the restart every transaction below
    the recorded offset is on the target, and a rerun converges. The crash must really lose
    committed transactions (the test requires a loss it can see; otherwise it proved nothing). A
    stop of server processes alone loses little (WAL already written reaches the kernel's page cache
    and survives), so the target's WAL writer, background writer and checkpointer are frozen with
    SIGSTOP first and the applier is frozen while the target holds unwritten WAL: asynchronously
    committed transactions then stay in shared WAL buffers — nothing flushes them, as the applier's
    flushed-progress query would — and the immediate stop (with SIGKILL for the frozen processes)
    really loses them. The source writes all along, so the applier never runs out of transactions,
    and every wait is a condition: machine speed changes how long it takes, not the outcome."""
    with FlowPair("apply-restart", LEDGER_DDL + oracle.DDL, LEDGER_TABLES + oracle.TABLES,
                  RESTART_TARGET_SETTINGS) as pair:
        work = oracle.Oracle()
        work.setup(pair)
        work.run(pair, 300)   # ahead of the load: applied (partly) before the target's crash
        load = start_source_load(pair)
        try:
            lost, violations = crash_target_while_applying(pair)
        finally:
            stop_source_load(pair, load)
        if violations:
            raise CaptureFailure(f"the consumer offset passed {len(violations)} transactions the target lost in the "
                                 f"crash (first: offset {violations[0]['offset']}, commit "
                                 f"{violations[0]['commit_lsn']}): they would never be applied again")
        if lost == 0:
            raise CaptureFailure(f"{RESTART_ATTEMPTS} immediate stops of the target lost no committed transaction: the "
                                 f"scenario did not exercise the asynchronous-commit window it tests")
        # A reconnecting applier may have re-applied everything before it was stopped: more source
        # transactions now (the applier is stopped) make sure some are pending past the boundary.
        if work.run(pair, 20)["committed"] == 0:
            raise CaptureFailure("none of 20 oracle transactions committed on the source after the target restart")
        wait_log_covers_source(pair.source)
        assert_diagnostics_name_the_replay_boundary(pair)
        run_apply(pair.config, 0)
        assert_diagnostics_show_nothing_pending(pair)
        assert_same_data(pair.source, pair.target, LEDGER_TABLES, "after the target restart")
        assert_each_transaction_applied_once(pair.target, pair.log_dir, "after the target restart")
        assert_ledger_has_no_duplicate_effects(pair.target, "after the target restart")
        committed = pair.source.query("SELECT count(*) FROM public.ledger")
        if pair.target.query("SELECT count(*) FROM public.ledger") != committed:
            raise CaptureFailure(f"the target ledger does not hold every source transaction ({committed})")
        work.check(pair, "oracle after the target restart")
    print("ok: target_immediate_restart_while_applying_converges")


@scenario(suite="apply_crash", defect="apply_offset_ignores_flush", pairs_with="target_immediate_restart_while_applying_converges", invariants=("a target crash leaves lost transactions below an offset that follows commits, not flushes",))
def negative_control_offset_past_flush_is_caught():
    """Seed 002's negative control for the rule above: with the defect
    defect.apply_offset_ignores_flush the applier records its consumer offset as far as the target
    *committed*, not as far as it flushed; the same crash must then show transactions below the
    offset that the target lost. If it does not, the scenario above could not catch the defect."""
    with FlowPair("apply-negctl", LEDGER_DDL, LEDGER_TABLES, RESTART_TARGET_SETTINGS) as pair:
        load = start_source_load(pair)
        try:
            lost, violations = crash_target_while_applying(
                pair, dict(os.environ, TRELLARA_FAULTS="defect.apply_offset_ignores_flush:1:defect"))
        finally:
            stop_source_load(pair, load)
        if not violations:
            raise CaptureFailure(f"negative control: with the offset following commits instead of flushes, "
                                 f"{lost} lost transactions left no gap below the consumer offset — the restart "
                                 f"scenario cannot catch this defect")
        print(f"negative control: the defect left {len(violations)} lost transactions below the consumer offset "
              f"(first: offset {violations[0]['offset']}) — caught")
    print("ok: negative_control_offset_past_flush_is_caught")


BIG_DDL = """
CREATE TABLE public.small (id int PRIMARY KEY, note text);
CREATE TABLE public.big (id int PRIMARY KEY, payload text NOT NULL);
"""
BIG_TABLES = ("public.small", "public.big")
BIG_ROWS = 5000


# How long the applier holds the staged chunked transaction open: far longer than the test needs
# to see it and kill it (the kill ends the stall).
CHUNKED_STALL_MS = 600000


@scenario(seed_rows=("strict_chunk_target_crash_after_staging_before_commit",), suite="strict_chunk", fault_points=("apply.after_staging_before_commit",), invariants=("no partial chunked transaction visible", "applied whole exactly once after restart", "one dedup row") + oracle.INVARIANTS)
def chunked_transaction_applies_atomically_and_once():
    with FlowPair("apply-chunked", BIG_DDL + oracle.DDL, BIG_TABLES + oracle.TABLES) as pair:
        source, target = pair.source, pair.target
        work = oracle.Oracle()
        work.setup(pair)
        # Target caught up first, so the only open transaction that writes `big` is the new one.
        run_apply(pair.config, 0)
        base = 0
        source.query("INSERT INTO public.small VALUES (1, 'before')")
        xid = int(source.query(f"BEGIN; INSERT INTO public.big SELECT g, repeat(md5(g::text), 4) FROM "
                               f"generate_series({base + 1}, {base + BIG_ROWS}) g; SELECT txid_current(); "
                               f"COMMIT").splitlines()[0])
        source.query("INSERT INTO public.small VALUES (2, 'after')")
        # After the chunked transaction, so the applier stalls in it, not in one of these; they are
        # applied by the rerun after the kill.
        work.run(pair, 200)
        wait_log_covers_source(source)
        records = [r for r in log_records(pair.log_dir) if r.get("xid") == xid]
        shape = {kind: sum(1 for r in records if r["type"] == kind) for kind in ("chunk", "manifest", "commit_marker")}
        print(f"xid {xid} ({BIG_ROWS} rows) in the log: {shape}")
        if shape != {"chunk": 5, "manifest": 1, "commit_marker": 1}:
            raise CaptureFailure(f"expected 5 chunks + manifest + commit marker, the log holds {shape}")
        commit_lsn = next(r["commit_lsn"] for r in records if r["type"] == "commit_marker")

        # Kill the applier while the big transaction is open on the target: it is held there, every
        # change staged and COMMIT not sent (fault point apply.after_staging_before_commit, stall),
        # so the kill lands inside the transaction however fast or slow the machine is. `small`
        # holds the row committed before it, `big` nothing new, and the applier's session an xid.
        env = dict(os.environ, TRELLARA_FAULTS="apply.after_staging_before_commit:1:stall",
                   TRELLARA_FAULT_STALL_MS=str(CHUNKED_STALL_MS))
        proc = subprocess.Popen(apply_command(pair.config), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env)
        observed = set()
        try:
            def in_transaction():
                row = target.query(
                    "SELECT (SELECT count(*) FROM public.big), (SELECT count(*) FROM public.small) = 1 AND EXISTS "
                    "(SELECT 1 FROM pg_stat_activity WHERE application_name = 'trellara/app' AND backend_xid IS "
                    "NOT NULL AND state = 'idle in transaction')")
                count, inside = row.split("|")
                observed.add(int(count))
                return inside == "t"
            wait_for("the applier to hold the chunked transaction open with every change staged", in_transaction,
                     APPLY_TIMEOUT_S, 0.05)
            # Fired: the applier holds the transaction open with every change staged (the stall).
            record_fault_fired("apply.after_staging_before_commit")
            kill9(proc)
        finally:
            if proc.poll() is None:
                kill9(proc)
        wait_for("the killed applier's target session to end", lambda: applier_session_gone(target), 60, 0.02)
        visible = int(target.query("SELECT count(*) FROM public.big"))
        dedup = target.query(f"SELECT count(*) FROM trellara.applied_transactions WHERE commit_lsn = '{commit_lsn}'")
        print(f"killed the applier in xid {xid} with every change staged: big rows visible {visible}, dedup rows "
              f"{dedup}, counts seen while applying {sorted(observed)}")
        if observed - {base}:
            raise CaptureFailure("part of the chunked transaction became visible while it was applied")
        if visible != base or dedup != "0":
            raise CaptureFailure("part of the killed chunked transaction became visible")

        # The rerun commits it whole; a concurrent observer sees only none or all of it.
        proc = start_applier(pair.config)
        try:
            while proc.poll() is None:
                observed.add(int(target.query("SELECT count(*) FROM public.big")))
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                kill9(proc)
        print(f"rerun: exit {proc.returncode}, {out.strip().splitlines()[-1] if out.strip() else err}; "
              f"big counts observed {sorted(observed)}")
        if proc.returncode != 0:
            raise CaptureFailure(f"rerun exited {proc.returncode}: {err[-1500:]}")
        if observed - {base, base + BIG_ROWS}:
            raise CaptureFailure(f"a partial chunked transaction was visible: counts {sorted(observed)}")
        assert_same_data(source, target, BIG_TABLES, "after the chunked transaction")
        assert_each_transaction_applied_once(target, pair.log_dir, "after the chunked transaction")
        if target.query(f"SELECT count(*) FROM trellara.applied_transactions WHERE commit_lsn = '{commit_lsn}' "
                        f"AND xid = {xid}") != "1":
            raise CaptureFailure(f"no single dedup row for xid {xid} commit {commit_lsn}")
        work.check(pair, "oracle after the killed chunked transaction")
        pair.check_no_crashes()
    print("ok: chunked_transaction_applies_atomically_and_once")


@scenario(suite="fail_closed", invariants=("a duplicate whose checksum differs is quarantined as checksum_conflict", "nothing after it applied"))
def conflicting_duplicate_is_quarantined():
    with FlowPair("apply-conflict", BIG_DDL, BIG_TABLES) as pair:
        source, target = pair.source, pair.target
        xids = [int(source.query(f"BEGIN; INSERT INTO public.small VALUES ({i}, 'row {i}'); SELECT txid_current(); "
                                 f"COMMIT").splitlines()[0]) for i in range(1, 4)]
        wait_log_covers_source(source)
        run_apply(pair.config, 0)
        envelopes = {r["xid"]: r for r in log_records(pair.log_dir) if r["type"] == "envelope"}
        victim = envelopes[xids[1]]
        # A different transaction at the same boundary: same (flow, commit LSN), another checksum.
        target.query(f"UPDATE trellara.applied_transactions SET checksum = sha256('another transaction') "
                     f"WHERE flow = 'app' AND commit_lsn = '{victim['commit_lsn']}'")
        os.remove(os.path.join(pair.log_dir, "consumers", "applier"))
        source.query("INSERT INTO public.small VALUES (100, 'later')")
        wait_log_covers_source(source)
        result = run_apply(pair.config, EXIT_BLOCKED)
        for part in (f"transaction {victim['xid']}", victim["commit_lsn"]):
            if part not in result.stderr:
                raise CaptureFailure(f"the conflict message lacks {part!r}: {result.stderr}")
        row = target.query(f"SELECT reason, state, xid FROM trellara.quarantine WHERE flow = 'app' "
                           f"AND commit_lsn = '{victim['commit_lsn']}'")
        print(f"quarantine row: {row}; message: {result.stderr.strip()}")
        if row != f"checksum_conflict|quarantined|{victim['xid']}":
            raise CaptureFailure(f"quarantine row of the conflicting boundary is {row!r}")
        if target.query("SELECT count(*) FROM public.small WHERE id = 100") != "0":
            raise CaptureFailure("a transaction after the conflicting one was applied")
        if target.query("SELECT count(*) FROM public.small") != "3":
            raise CaptureFailure("the conflict changed target data")
        pair.check_no_crashes()
    print("ok: conflicting_duplicate_is_quarantined")


KEY_LOOKUP_DDL = "CREATE TABLE public.hot (id int PRIMARY KEY, n int NOT NULL, pad text)"
KEY_LOOKUP_UPDATES = 600


def table_writes(target, table):
    """(rows updated, rows deleted) in `table` per the target's own statistics."""
    text = target.query(f"SELECT coalesce(n_tup_upd, 0) || ' ' || coalesce(n_tup_del, 0) FROM pg_stat_user_tables "
                        f"WHERE relid = '{table}'::regclass")
    updated, deleted = text.split()
    return int(updated), int(deleted)


def table_scans(target, table):
    text = target.query(f"SELECT coalesce(seq_scan, 0) || ' ' || coalesce(idx_scan, 0) FROM pg_stat_user_tables "
                        f"WHERE relid = '{table}'::regclass")
    seq, idx = text.split()
    return int(seq), int(idx)


@scenario(suite="apply_values", invariants=(
    "a change addressed by key reaches its row through the key's index, not a sequential scan, on a "
    "small table whose dead versions a long read transaction on the target keeps",))
def key_addressed_changes_use_the_index_under_a_long_read():
    """On a table of a few rows the planner prefers a sequential scan for `WHERE id = $1`;
    while a report holds back pruning, every such scan reads every dead version. Each UPDATE and
    DELETE the applier sends must go through the primary key's index whatever the statistics say."""
    with FlowPair("apply-keylookup", KEY_LOOKUP_DDL, ("public.hot",)) as pair:
        source, target = pair.source, pair.target
        source.query("INSERT INTO public.hot SELECT g, 0, repeat('p', 100) FROM generate_series(1, 10) g")
        wait_log_covers_source(source)
        run_apply(pair.config, 0)
        # Statistics as autovacuum leaves them on a small table: one page, ten rows. With them the
        # planner's cheapest path to `id = $1` is a sequential scan.
        target.query("ANALYZE public.hot")
        # A report on the target: a REPEATABLE READ transaction that holds its snapshot throughout.
        report = subprocess.Popen([os.path.join(PG_BIN, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1"],
                                  env=target.env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        try:
            report.stdin.write("BEGIN ISOLATION LEVEL REPEATABLE READ;\nSELECT count(*) FROM public.hot;\n"
                               "SELECT 'snapshot taken';\n")
            report.stdin.flush()
            wait_for("the report's snapshot on the target",
                     lambda: target.query("SELECT count(*) FROM pg_stat_activity WHERE backend_xmin IS NOT NULL "
                                          "AND state = 'idle in transaction'") == "1", 60)
            # One transaction per UPDATE (psql autocommits each statement), then a few DELETEs.
            statements = [f"UPDATE public.hot SET n = n + 1 WHERE id = {i % 10 + 1};"
                          for i in range(KEY_LOOKUP_UPDATES)]
            statements += [f"DELETE FROM public.hot WHERE id = {i};" for i in (9, 10)]
            source.psql("\n".join(statements))
            wait_log_covers_source(source)
            seq_before, idx_before = table_scans(target, "public.hot")
            updated_before, deleted_before = table_writes(target, "public.hot")
            applied = run_apply(pair.config, 0)
            # The applier's backend reports its table statistics when its session ends; the two
            # DELETEs are never left out, so once they show, the session's figures are all in.
            wait_for("the applier's table statistics on the target",
                     lambda: table_writes(target, "public.hot")[1] - deleted_before == 2, 60)
            updated_after, _ = table_writes(target, "public.hot")
            # Grouped batches leave out UPDATEs a later UPDATE of the same row overwrites
            # (docs/apply.md "Superseded updates in a group"). The UPDATEs sent, counted by the target
            # (each updates exactly one row), must agree with what the applier says it left out, and
            # every statement sent must use the index.
            sent_updates = updated_after - updated_before
            superseded = re.findall(r"\bsuperseded_updates=(\d+)\b", applied.stdout)
            if not superseded:
                raise CaptureFailure(f"the applier's progress line has no superseded_updates: {applied.stdout[-800:]}")
            if not 1 <= sent_updates <= KEY_LOOKUP_UPDATES or sent_updates + int(superseded[-1]) != KEY_LOOKUP_UPDATES:
                raise CaptureFailure(f"the target updated {sent_updates} rows of public.hot and the applier reports "
                                     f"{superseded[-1]} UPDATEs left out, for {KEY_LOOKUP_UPDATES} source UPDATEs")
            wanted = sent_updates + 2
            wait_for("the applier's scans in the target's statistics",
                     lambda: sum(table_scans(target, "public.hot")) - seq_before - idx_before >= wanted, 60)
            seq_after, idx_after = table_scans(target, "public.hot")
            print(f"public.hot on the target while a report is open: {seq_after - seq_before} sequential scans, "
                  f"{idx_after - idx_before} index scans for {wanted} key-addressed changes sent "
                  f"({superseded[-1]} UPDATEs superseded in their group)")
            if seq_after != seq_before:
                raise CaptureFailure(f"the applier scanned public.hot sequentially {seq_after - seq_before} times "
                                     f"for {wanted} changes addressed by its primary key")
        finally:
            report.communicate("COMMIT;\n", timeout=30)
        assert_same_data(source, target, ("public.hot",), "key lookup")
        assert_each_transaction_applied_once(target, pair.log_dir, "key lookup")
        pair.check_no_crashes()
    print("ok: key_addressed_changes_use_the_index_under_a_long_read")


HOSTILE_TABLE = 'Tab"le; DROP TABLE x;--ÄÖü' + "t" * (63 - len('Tab"le; DROP TABLE x;--ÄÖü'.encode()))
HOSTILE_COLUMNS = ['Id"', "semi;colon", "MiXeD Case", "ñandú 名前", "c" * 63, "empty", "f8", "by", "arr", "js",
                   "huge", "note"]


@scenario(seed_rows=("unchanged_toast_columns_preserved",), suite="apply_values", invariants=("hostile names and values replicate exactly", "an UPDATE leaving a TOASTed column unchanged keeps the target value"))
def hostile_identifiers_and_values_replicate_exactly():
    replicate_hostile_identifiers_and_values()
    print("ok: hostile_identifiers_and_values_replicate_exactly")


@scenario(suite="apply_values", defect="unchanged_toast_as_null", fault_points=("defect.unchanged_toast_as_null",),
          pairs_with="hostile_identifiers_and_values_replicate_exactly",
          invariants=("the TOAST-preservation check fails when an unchanged TOASTed column is written as NULL",))
def negative_control_unchanged_toast_as_null_is_caught():
    """Negative control for the unchanged-TOAST check above: with defect.unchanged_toast_as_null the
    applier's UPDATE sets a column the source sent as 'unchanged TOAST' to NULL instead of leaving
    it out. The same scenario must then fail its check that the target's TOASTed value was kept."""
    env = dict(os.environ, TRELLARA_FAULTS="defect.unchanged_toast_as_null:1:defect")
    fired = {}
    try:
        replicate_hostile_identifiers_and_values(env, fired)
    except CaptureFailure as caught:
        if not fired.get("defect.unchanged_toast_as_null"):
            raise CaptureFailure(f"harness failure, not a caught defect: defect.unchanged_toast_as_null never "
                                 f"fired; the scenario failed for another reason: {caught}")
        print(f"negative control: the unchanged TOASTed column written as NULL — caught: {str(caught)[:300]}")
    else:
        raise CaptureFailure("negative control: an applier that writes unchanged TOASTed columns as NULL passed the "
                             "hostile-values checks — they cannot catch that defect")
    print("ok: negative_control_unchanged_toast_as_null_is_caught")


def replicate_hostile_identifiers_and_values(env=None, fired=None):
    """The body of hostile_identifiers_and_values_replicate_exactly; `env` switches a defect on for
    every apply run, and the fault points the runs report firing are added to `fired`."""
    def apply_once():
        result = run_apply(pair.config, 0, env)
        if fired is not None:
            for point, count in record_faults_from_output(result.stderr).items():
                fired[point] = fired.get(point, 0) + count
    assert len(HOSTILE_TABLE.encode()) == 63 and len(HOSTILE_COLUMNS[4].encode()) == 63
    t = "public." + quote_ident(HOSTILE_TABLE)
    c = [quote_ident(name) for name in HOSTILE_COLUMNS]
    ddl = (f"CREATE TABLE {t} ({c[0]} int PRIMARY KEY, {c[1]} text, {c[2]} text, {c[3]} text, {c[4]} text, "
           f"{c[5]} text, {c[6]} float8, {c[7]} bytea, {c[8]} text[], {c[9]} jsonb, {c[10]} text, {c[11]} text);\n"
           f"ALTER TABLE {t} ALTER COLUMN {c[10]} SET STORAGE EXTERNAL;\n"
           f"CREATE TABLE public.\"lower\" (id int PRIMARY KEY, v text);")
    with FlowPair("apply-hostile", ddl, (t, 'public."lower"')) as pair:
        source, target = pair.source, pair.target
        cols = ", ".join(c)
        source.psql(f"""
BEGIN;
INSERT INTO {t} ({cols}) VALUES
  (1, E'back\\\\slash \\\\N \\\\x00', E'new\\nline\\r\\ttab', 'it''s "quoted"; DROP TABLE y;', 'ünï 名前 😀', '',
   'NaN', '\\x00ff5c0a'::bytea, ARRAY['a,b', NULL, '"q"', E'\\\\'], '{{"k": "v\\\\n", "n": [1, 2.50, null]}}',
   repeat('huge-', 300000) || md5('x'), 'one'),
  (2, NULL, '', NULL, '', NULL, 'Infinity', ''::bytea, '{{}}', 'null', NULL, 'two'),
  (3, '', NULL, E'\\\\', NULL, '', '-Infinity', NULL, ARRAY[]::text[], '[]', '', 'three'),
  (4, 'NULL', '\\N', '''', '"', E'\\n', '-0', '\\x5c'::bytea, ARRAY['NULL'], '{{"a": "\\\\", "b": "é"}}',
   repeat(md5('y'), 40000), 'four'),
  (5, ' ', '  ', E'\\t', 'x', 'y', '4.9e-324', '\\x'::bytea, ARRAY[[1, 2], [3, 4]]::text[], '1.0e10', 'z', 'five');
COMMIT;
""")
        source.query('INSERT INTO public."lower" VALUES (1, \'x\')')
        size = source.query(f"SELECT octet_length({c[10]}) FROM {t} WHERE {c[0]} = 1")
        stored = source.query(f"SELECT pg_column_size({c[10]}) FROM {t} WHERE {c[0]} = 1")
        wait_log_covers_source(source)
        apply_once()
        # The target's copy of the TOASTed value is changed behind the applier's back: an UPDATE
        # that leaves the column unchanged on the source must leave the target's value alone.
        target.query(f"UPDATE {t} SET {c[10]} = repeat('target-', 200000) WHERE {c[0]} = 1")
        target_huge = target.query(f"SELECT md5({c[10]}) FROM {t} WHERE {c[0]} = 1")
        source.query(f"UPDATE {t} SET {c[11]} = 'one updated' WHERE {c[0]} = 1")
        source.query(f"UPDATE {t} SET {c[6]} = '-0'::float8 WHERE {c[0]} = 5")
        source.query(f"UPDATE {t} SET {c[11]} = 'four updated' WHERE {c[0]} = 4")
        source.query(f"DELETE FROM {t} WHERE {c[0]} = 3")
        wait_log_covers_source(source)
        apply_once()
        kept = target.query(f"SELECT {c[11]}, md5({c[10]}) FROM {t} WHERE {c[0]} = 1")
        print(f"TOASTed column ({size} bytes, stored {stored} bytes) after an UPDATE that left it unchanged: "
              f"target {kept}, the target's own value {target_huge}")
        if kept != f"one updated|{target_huge}":
            raise CaptureFailure(f"the UPDATE overwrote or lost the target's TOASTed value: {kept}")
        target.query(f"UPDATE {t} SET {c[10]} = repeat('huge-', 300000) || md5('x') WHERE {c[0]} = 1")
        print(f"huge text: {size} bytes; f8 on the target: "
              f"{target.query(f'SELECT string_agg({c[6]}::text, chr(44) ORDER BY {c[0]}) FROM {t}')}")
        if int(size) <= 1 << 20:
            raise CaptureFailure(f"the huge value is only {size} bytes")
        assert_same_data(source, target, (t, 'public."lower"'), "hostile")
        # The checksum covers the row text; also compare the raw values that text could blur.
        for expr in (f"string_agg(md5({c[10]}), ',' ORDER BY {c[0]})",
                     f"string_agg(coalesce(md5({c[5]}), 'NULL'), ',' ORDER BY {c[0]})",
                     f"string_agg(coalesce(encode({c[7]}, 'hex'), 'NULL'), ',' ORDER BY {c[0]})",
                     f"string_agg(coalesce({c[6]}::text, 'NULL'), ',' ORDER BY {c[0]})",
                     f"string_agg(({c[6]}::text = '-0')::text, ',' ORDER BY {c[0]})"):
            want, have = source.query(f"SELECT {expr} FROM {t}"), target.query(f"SELECT {expr} FROM {t}")
            if want != have:
                raise CaptureFailure(f"{expr}: source {want[:200]!r}, target {have[:200]!r}")
        negative_zero = target.query(f"SELECT count(*) FROM {t} WHERE {c[6]}::text = '-0'")
        if negative_zero != "2" or target.query(f"SELECT count(*) FROM {t} WHERE {c[6]} = 'NaN'") != "1":
            raise CaptureFailure(f"the target holds {negative_zero} float8 -0 values, the source 2")
        assert_each_transaction_applied_once(target, pair.log_dir, "hostile")
        pair.check_no_crashes()


SCENARIOS = (hostile_identifiers_and_values_replicate_exactly, negative_control_unchanged_toast_as_null_is_caught,
             key_addressed_changes_use_the_index_under_a_long_read,
             chunked_transaction_applies_atomically_and_once,
             conflicting_duplicate_is_quarantined, target_immediate_restart_while_applying_converges,
             negative_control_offset_past_flush_is_caught, applier_kill9_at_random_moments_converges_exactly_once,
             negative_control_ack_before_commit_is_caught)

if __name__ == "__main__":
    run_scenarios(SCENARIOS)
