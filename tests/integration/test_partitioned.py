"""Partitioned scale mode end to end (docs/partitioned.md): a real source whose flow is partitioned
(trellara.set_partitioning), real partition appliers (`trellara apply --partition K`) and the
publisher (`trellara apply`), killed with SIGKILL and at fault points while a pgbench workload of
transfers runs, and a reader on the target that checks, many times a second, that no source
transaction is ever partly visible in the user tables.

The workload moves money between accounts: each transaction debits one account, credits another
(the two rows route to different partitions more often than not) and inserts a ledger row. On the
target, at every snapshot, the balances must sum to what they started at and the accounts' move
counters must be exactly twice the ledger's rows — a transaction seen in part breaks one or both.

Scenarios:
  - partitioned_flow_survives_kills_with_nothing_partial_visible: three partition appliers and the
    publisher are each killed with SIGKILL (partition appliers also at their fault points
    partition.before_commit and partition.after_commit) and restarted while 1 200 transfers
    replicate; the reader never sees a partial transaction, the target converges exactly (verify)
    and every partitioned transaction's staged chunks are gone.
  - the_watermark_holds_publication_until_every_listed_partition_has_evidence: with partition 1's
    applier not running, nothing past the first transaction listing partition 1 becomes visible and
    `trellara partition-watermarks` names partition 1 as what holds the watermark; started, it
    releases everything.
  - negative control defect.partition_publish_before_evidence: a publisher that does not wait for
    evidence exposes partial transactions, which the reader (or verify) catches.
  - until_caught_up_publisher_without_partition_appliers_ends_blocked_then_catches_up: the publisher
    run with --until-caught-up while no partition applier is connected ends as blocked (exit 3,
    naming the partitions) instead of waiting without end; after the partition appliers ran until
    caught up, the same command catches the flow up and the target equals the source.
  - partitioned_quarantine_is_repaired_and_replayed_at_the_exact_boundary: a transfer whose UPDATE
    matches no row on the target (the row deleted behind the flow's back) is quarantined whole by
    the publisher, its staged chunks kept; replay-ready of a wrong boundary is refused; after the
    repair and replay-ready of the exact boundary it and the next transfer apply once.
  - partition_appliers_through_the_broker_apply_exactly_once: the flow through a 3-node JetStream
    cluster; the publisher keeps the replica, two partition appliers read it; kill -9s of all three
    under the transfer workload; then partition 1 stopped while the publisher publishes past its
    checkpoint: the position the source records for the applier's host stays at that checkpoint.
    Paired with defect.receive_position_ignores_partitions
    (negative_control_position_past_a_partition_checkpoint_is_caught).
"""
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capture_support import (TRELLARA_BIN, CaptureFailure, PsqlSession, checks_fail_under_defect,  # noqa: E402
                             int_to_lsn, log_records, lsn_to_int, record_fault_fired, record_faults_from_output,
                             run_pgbench, run_scenarios, scenario, verify_with_applier, wait_for)
from flow_pair import FlowPair  # noqa: E402
from harness.nats_cluster import NatsCluster  # noqa: E402
from test_broker_forward import STREAM  # noqa: E402
from test_broker_remote_apply import consumer_offset  # noqa: E402

ACCOUNTS = 300
START_BALANCE = 1000
PARTITIONS = 3

SCHEMA = f"""
CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL, moves int NOT NULL DEFAULT 0);
CREATE TABLE ledger (id bigserial PRIMARY KEY, src int NOT NULL, dst int NOT NULL, amount int NOT NULL);
INSERT INTO accounts SELECT g, {START_BALANCE}, 0 FROM generate_series(1, {ACCOUNTS}) g;
"""

TRANSFER = f"""\\set a random(1, {ACCOUNTS})
\\set b random(1, {ACCOUNTS})
\\set x random(1, 100)
BEGIN;
UPDATE accounts SET balance = balance - :x, moves = moves + 1 WHERE id = :a;
UPDATE accounts SET balance = balance + :x, moves = moves + 1 WHERE id = :b;
INSERT INTO ledger (src, dst, amount) VALUES (:a, :b, :x);
COMMIT;
"""

INVARIANT = ("SELECT (SELECT sum(balance) FROM accounts) || ' ' || (SELECT sum(moves) FROM accounts) || ' ' || "
             "(SELECT count(*) FROM ledger)")


class PartitionedPair(FlowPair):
    def __init__(self, name, partitions=PARTITIONS, source_env=None, source_settings=None):
        super().__init__(name, source_sql=SCHEMA, tables=("accounts", "ledger"), source_env=source_env,
                         source_settings=source_settings)
        self.partitions = partitions

    def ready(self):
        # The documented re-partitioning step: set, then restart the relay (docs/partitioned.md).
        self.source.query(f"SELECT trellara.set_partitioning('{self.flow}', 'partitioned', {self.partitions})")
        self.source.query(f"SELECT trellara.stop_flow('{self.flow}')")
        self.source.query(f"SELECT trellara.start_flow('{self.flow}')")
        self.script = os.path.join(self.work.name, "transfer.sql")
        with open(self.script, "w") as f:
            f.write(TRANSFER)


def commit_one_transfer(pair):
    """One transfer on the source; returns the WAL insert position after its commit (the slot may
    move up to the commit, never to or past its end, while the transaction is not durable in the log)."""
    pair.source.query("BEGIN; UPDATE accounts SET balance = balance - 5, moves = moves + 1 WHERE id = 1; "
                      "UPDATE accounts SET balance = balance + 5, moves = moves + 1 WHERE id = 2; "
                      "INSERT INTO ledger (src, dst, amount) VALUES (1, 2, 5); COMMIT")
    return lsn_to_int(pair.source.query("SELECT pg_current_wal_insert_lsn()"))


class Proc:
    """One `trellara apply` process (a partition applier with `partition`, else the publisher), our
    child: killed by its Popen handle, restarted on demand; its stderr kept per run."""

    def __init__(self, pair, partition=None, config=None):
        self.pair, self.partition, self.runs, self.process, self.faulted = pair, partition, 0, None, False
        self.config = config  # None: the pair's flow.toml
        self.name = "publisher" if partition is None else f"partition-{partition}"
        self.outputs = []

    def start(self, env=None, defects=False, faulted=False):
        self.runs += 1
        self.env, self.defects = env, defects
        self.faulted = faulted  # this run waits for its own fault point: not a victim of the random kills
        self.err_path = os.path.join(self.pair.work.name, f"{self.name}-{self.runs}.err")
        argv = [TRELLARA_BIN] + (["--enable-test-defects"] if defects else []) + ["apply", "--config", self.config or self.pair.config]
        if self.partition is not None:
            argv += ["--partition", str(self.partition)]
        with open(self.err_path, "w") as err:
            self.process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True)
        self.outputs.append(self.err_path)

    def running(self):
        return self.process is not None and self.process.poll() is None

    def kill(self):
        if self.running():
            self.process.send_signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait(timeout=60)

    def stop(self):
        if self.running():
            self.process.send_signal(signal.SIGTERM)
        if self.process is not None:
            self.process.wait(timeout=120)

    def stderr(self):
        text = ""
        for path in self.outputs:
            with open(path) as f:
                text += f.read()
        return text


class Reader(threading.Thread):
    """Reads the invariant on the target as fast as it answers until stopped; keeps what broke it."""

    def __init__(self, pair):
        super().__init__(daemon=True)
        self.session = PsqlSession(pair.target)
        self.samples, self.violations, self.stopping = 0, [], threading.Event()
        self.seen_ledger = set()

    def run(self):
        while not self.stopping.is_set():
            answer = self.session.query(INVARIANT)
            if not answer:
                time.sleep(0.05)
                continue
            balance, moves, ledger = (int(x) for x in answer.split())
            self.samples += 1
            self.seen_ledger.add(ledger)
            if balance != ACCOUNTS * START_BALANCE or moves != 2 * ledger:
                self.violations.append((balance, moves, ledger))
            time.sleep(0.01)

    def finish(self):
        self.stopping.set()
        self.join(timeout=60)
        self.session.close()


def wait_converged(pair, procs, timeout_s=300):
    """Until the target holds every ledger row of the source. A process that exited or a quarantined
    transaction ends the wait at once (neither goes away by waiting)."""
    expected = pair.source.query("SELECT count(*) FROM ledger")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for proc in procs:
            if not proc.running():
                raise CaptureFailure(f"{proc.name} exited {proc.process.returncode}: {proc.stderr()[-2500:]}")
        has_state = pair.target.query("SELECT to_regclass('trellara.quarantine') IS NOT NULL") == "t"
        quarantined = pair.target.query("SELECT count(*) FROM trellara.quarantine") if has_state else "0"
        if quarantined != "0":
            raise CaptureFailure(f"the publisher quarantined {quarantined} transaction(s): " +
                                 pair.target.query("SELECT string_agg(reason || ': ' || coalesce(detail, ''), '; ') "
                                                   "FROM trellara.quarantine")[:1500])
        if pair.target.query("SELECT count(*) FROM ledger") == expected:
            return
        time.sleep(0.2)
    raise CaptureFailure(f"timed out after {timeout_s}s waiting for the target to hold all {expected} ledger rows "
                         f"({pair.target.query('SELECT count(*) FROM ledger')} there)")


def watermarks(pair):
    result = subprocess.run([TRELLARA_BIN, "partition-watermarks", "--config", pair.config, "--format", "json"],
                            capture_output=True, text=True, timeout=120)
    if result.returncode not in (0, 3):
        raise CaptureFailure(f"partition-watermarks exited {result.returncode}: {result.stderr[-1500:]}")
    return json.loads(result.stdout)


def check_exact(pair, reader, label, config=None):
    """`reader`: the Reader that ran during the replication, or None when none did; `config`: the
    configuration verify runs with (the pair's flow.toml when None)."""
    if reader is not None and reader.violations:
        raise CaptureFailure(f"{label}: the reader saw {len(reader.violations)} partial transaction(s) on the target, "
                             f"first (sum balance, sum moves, ledger rows): {reader.violations[:5]}")
    verify = verify_with_applier(config or pair.config)
    if verify.returncode != 0:
        raise CaptureFailure(f"{label}: verify exited {verify.returncode}: {verify.stdout[-1500:]} {verify.stderr[-1500:]}")
    staged = pair.target.query("SELECT count(*) FROM trellara.partition_stage")
    if staged != "0":
        raise CaptureFailure(f"{label}: {staged} staged chunk(s) are left in trellara.partition_stage")
    duplicates = pair.target.query("SELECT count(*) - count(DISTINCT commit_lsn) FROM trellara.applied_transactions")
    if duplicates != "0":
        raise CaptureFailure(f"{label}: {duplicates} dedup rows repeat a commit LSN")


def run_kills(pair, env=None, defects=False, seed=39):
    """The clean run's workload and kills; returns the reader."""
    parts = [Proc(pair, k) for k in range(pair.partitions)]
    publisher = Proc(pair)
    procs = parts + [publisher]
    # The first runs of partitions 0, 1 and 2 kill themselves at their fault points: 0 with chunks
    # staged in its open target transaction, 1 before its COMMIT, 2 after it (offset not written).
    parts[0].start(env=dict(env or os.environ, TRELLARA_FAULTS="partition.after_stage_chunk:15:crash"),
                   defects=defects, faulted=True)
    parts[1].start(env=dict(env or os.environ, TRELLARA_FAULTS="partition.before_commit:8:crash"), defects=defects,
                   faulted=True)
    parts[2].start(env=dict(env or os.environ, TRELLARA_FAULTS="partition.after_commit:12:crash"), defects=defects,
                   faulted=True)
    publisher.start(env=env, defects=defects)
    reader = Reader(pair)
    reader.start()
    rng = random.Random(seed)
    bench = threading.Thread(target=run_pgbench, args=(pair.source, ["-n", "--random-seed=39", "-c", "4", "-t", "300", "-R", "120", "-f", pair.script]))
    bench.start()
    kills = 0
    try:
        while bench.is_alive():
            time.sleep(0.3 + 0.5 * rng.random())
            victim = rng.choice([proc for proc in procs if not (proc.faulted and proc.running())])
            victim.kill()
            kills += 1
            victim.start(env=env, defects=defects)
            for proc in procs:  # restart the ones a fault point killed (without the fault)
                if not proc.running():
                    proc.start(env=env, defects=defects)
        bench.join()
        for proc in procs:
            if not proc.running():
                proc.start(env=env, defects=defects)
        wait_converged(pair, procs)
        print(f"{kills} SIGKILLs; reader took {reader.samples} samples over {len(reader.seen_ledger)} distinct states")
        return reader, procs
    finally:
        reader.finish()
        for proc in procs:
            if env is not None:
                record_faults_from_output(proc.stderr())
            proc.stop()


@scenario(seed_rows=("partition_applier_before_ack",),
          fault_points=("partition.after_stage_chunk", "partition.before_commit", "partition.after_commit"),
          invariants=("no source transaction is ever partly visible in the user tables (a reader checks "
                      "balances and move counters at every snapshot)",
                      "after SIGKILLs of every partition applier and of the publisher, and crashes at the "
                      "partition appliers' commit fault points, the target equals the source (verify)",
                      "nothing is staged twice or left staged; one dedup row per source transaction"))
def partitioned_flow_survives_kills_with_nothing_partial_visible():
    with PartitionedPair("partitioned-kills") as pair:
        reader, procs = run_kills(pair)
        fired = {}
        for proc in procs:
            for point, count in record_faults_from_output(proc.stderr()).items():
                fired[point] = fired.get(point, 0) + count
        print(f"fault points fired: {fired}")
        for point in ("partition.after_stage_chunk", "partition.before_commit", "partition.after_commit"):
            if not fired.get(point):
                raise CaptureFailure(f"fault point {point} never fired: the run proves nothing about it")
        if reader.samples < 50 or len(reader.seen_ledger) < 5:
            raise CaptureFailure(f"the reader took {reader.samples} samples over {len(reader.seen_ledger)} states: "
                                 "too few to say anything about visibility")
        check_exact(pair, reader, "after the kills")
        marks = watermarks(pair)
        if marks["held_at_lsn"] is not None or marks["staged_chunks"] != 0 or len(marks["partitions"]) != PARTITIONS:
            raise CaptureFailure(f"partition-watermarks after convergence: {json.dumps(marks)[:1500]}")
        pair.check_no_crashes()
        print("ok: partitioned_flow_survives_kills_with_nothing_partial_visible")


def held_by_a_missing_partition(pair, env=None, defects=False):
    parts = [Proc(pair, k) for k in range(pair.partitions)]
    publisher = Proc(pair)
    reader = Reader(pair)
    try:
        parts[0].start(env=env, defects=defects)
        parts[2].start(env=env, defects=defects)
        publisher.start(env=env, defects=defects)
        reader.start()
        run_pgbench(pair.source, ["-n", "--random-seed=39", "-c", "2", "-t", "100", "-f", pair.script])
        end_lsn = pair.source.query("SELECT pg_current_wal_lsn()")
        pair.wait_log_covers_source()

        def others_caught_up():
            marks = watermarks(pair)
            rows = {p["partition"]: p for p in marks["partitions"]}
            return all(k in rows and rows[k]["pending_transactions"] == 0 for k in (0, 2))
        wait_for("partitions 0 and 2 to stage everything they are listed for", others_caught_up, 180)
        marks = watermarks(pair)
        if reader.violations:
            raise CaptureFailure(f"the reader saw {len(reader.violations)} partial transaction(s) while partition 1 "
                                 f"was not running: {reader.violations[:5]}")
        if marks["holding_partitions"] != [1]:
            raise CaptureFailure(f"the watermark is held by {marks['holding_partitions']}, not [1]: {json.dumps(marks)[:1500]}")
        visible = int(pair.target.query("SELECT count(*) FROM ledger"))
        total = int(pair.source.query("SELECT count(*) FROM ledger"))
        if visible >= total:
            raise CaptureFailure(f"all {total} transfers are visible although partition 1 never ran (log end {end_lsn})")
        report = subprocess.run([TRELLARA_BIN, "status", "--config", pair.config, "--view", "report", "--format", "json"],
                                capture_output=True, text=True, timeout=120)
        shown = json.loads(report.stdout) if report.stdout.strip().startswith("{") else {}
        if shown.get("partition_appliers") != 2 or not shown.get("staged_chunks"):
            raise CaptureFailure(f"status --view report does not show the two partition appliers and the staged chunks "
                                 f"(exit {report.returncode}): {report.stdout[-1500:]} {report.stderr[-800:]}")
        print(f"held: {visible} of {total} transfers visible, watermark {marks['global_watermark_lsn']} held at "
              f"{marks['held_at_lsn']} by partition 1")
        parts[1].start(env=env, defects=defects)
        wait_converged(pair, [parts[0], parts[1], parts[2], publisher])
        reader.finish()
        check_exact(pair, reader, "after partition 1 started")
    finally:
        reader.finish()
        for proc in parts + [publisher]:
            if env is not None:
                record_faults_from_output(proc.stderr())
            proc.stop()


@scenario(seed_rows=("partition_applier_before_ack", "partition_manifest_missing_chunk"),
          invariants=("a partitioned transaction becomes visible only once every partition its manifest lists "
                      "holds checkpoint evidence; partition-watermarks names the partition holding it back",))
def the_watermark_holds_publication_until_every_listed_partition_has_evidence():
    with PartitionedPair("partitioned-held") as pair:
        held_by_a_missing_partition(pair)
        pair.check_no_crashes()
        print("ok: the_watermark_holds_publication_until_every_listed_partition_has_evidence")


@scenario(defect="defect.partition_publish_before_evidence",
          pairs_with="the_watermark_holds_publication_until_every_listed_partition_has_evidence",
          invariants=("a publisher that does not wait for every partition's evidence is caught",))
def negative_control_publish_before_evidence_is_caught():
    with PartitionedPair("partitioned-defect") as pair:
        def run_checks(env, outputs):
            try:
                held_by_a_missing_partition(pair, env=env, defects=True)
            finally:
                for path in sorted(os.listdir(pair.work.name)):
                    if path.endswith(".err"):
                        with open(os.path.join(pair.work.name, path)) as f:
                            outputs.append(f.read())
        caught = checks_fail_under_defect("defect.partition_publish_before_evidence", "partition visibility",
                                          run_checks)
        print(f"caught: {str(caught)[:300]}")
        print("ok: negative_control_publish_before_evidence_is_caught")


@scenario(seed_rows=("partition_commit_marker_ack_ambiguous",), suite="capture",
          fault_points=("relay.after_chunks_before_manifest",),
          invariants=("a relay that made a partitioned transaction's chunks durable but not its manifest and "
                      "commit marker never confirms the slot past it",
                      "after the fault is gone the transaction arrives whole and the target is exact"))
def partitioned_relay_failing_before_the_manifest_does_not_advance_the_slot():
    fault = {"TRELLARA_FAULTS": "relay.after_chunks_before_manifest:1:error"}
    with PartitionedPair("partitioned-ack", source_env=fault) as pair:
        after = commit_one_transfer(pair)

        def failed_twice():
            row = pair.source.query("SELECT coalesce(last_error, '') || '|' || consecutive_failures "
                                    f"FROM trellara.status() WHERE flow = '{pair.flow}'")
            error, failures = row.rsplit("|", 1)
            return "relay.after_chunks_before_manifest" in error and int(failures) >= 2
        wait_for("the relay to fail at relay.after_chunks_before_manifest twice", failed_twice, 120)
        confirmed = lsn_to_int(pair.source.query(
            f"SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'trellara_{pair.flow}'"))
        if confirmed >= after:
            raise CaptureFailure(f"the slot was confirmed to {int_to_lsn(confirmed)}, to or past the end of the "
                                 f"transfer's commit ({int_to_lsn(after)}) whose manifest and commit marker never "
                                 "became durable")
        types = [record["type"] for record in log_records(pair.log_dir)]
        if "commit_marker" in types or "manifest" in types:
            raise CaptureFailure(f"the log holds a manifest or commit marker the relay failed before: {types}")
        record_fault_fired("relay.after_chunks_before_manifest", 2)
        print(f"slot held at {int_to_lsn(confirmed)}; the log holds {types.count('chunk')} chunk record(s), no manifest "
              "or marker")
        pair.source.restart_immediate()  # started again without the fault (it was only in the first start's env)
        parts = [Proc(pair, k) for k in range(pair.partitions)]
        publisher = Proc(pair)
        reader = Reader(pair)
        try:
            for proc in parts + [publisher]:
                proc.start()
            reader.start()
            wait_converged(pair, parts + [publisher])
            reader.finish()
            check_exact(pair, reader, "after the relay's fault was removed")
        finally:
            reader.finish()
            for proc in parts + [publisher]:
                proc.stop()
        print("ok: partitioned_relay_failing_before_the_manifest_does_not_advance_the_slot")


@scenario(suite="capture", defect="relay_confirm_decoded",
          pairs_with="partitioned_relay_failing_before_the_manifest_does_not_advance_the_slot",
          fault_points=("defect.relay_confirm_decoded",),
          invariants=("the clean scenario's slot check fails when the relay confirms a partitioned transaction "
                      "whose manifest and commit marker it never made durable",))
def negative_control_partitioned_relay_confirming_before_the_marker_is_caught():
    faults = {"TRELLARA_FAULTS": "relay.after_chunks_before_manifest:1:error,defect.relay_confirm_decoded:1:defect"}
    with PartitionedPair("partitioned-ack-defect", source_env=faults,
                         source_settings={"trellara.enable_test_defects": "on"}) as pair:
        after = commit_one_transfer(pair)

        def slot_check_fails():
            confirmed = pair.source.query("SELECT confirmed_flush_lsn FROM pg_replication_slots "
                                          f"WHERE slot_name = 'trellara_{pair.flow}'")
            return lsn_to_int(confirmed) >= after and confirmed
        confirmed = wait_for("the slot to be confirmed past the transfer whose manifest never became durable (the "
                             "defect; the clean scenario's check fails exactly on this)", slot_check_fails, 90)
        record_fault_fired("defect.relay_confirm_decoded")
        print(f"caught: with the defect the slot moved to {confirmed}, past {int_to_lsn(after)}")
        print("ok: negative_control_partitioned_relay_confirming_before_the_marker_is_caught")


@scenario(defect="defect.partition_checkpoint_outside",
          pairs_with="partitioned_flow_survives_kills_with_nothing_partial_visible",
          fault_points=("partition.after_checkpoint_before_stage",),
          invariants=("a partition applier committing its checkpoint outside the transaction that stages its "
                      "chunks leaves evidence without data after a kill: the flow does not converge",))
def negative_control_partition_checkpoint_outside_the_staging_transaction_is_caught():
    with PartitionedPair("partitioned-ckpt-defect") as pair:
        def run_checks(env, outputs):
            parts = [Proc(pair, k) for k in range(pair.partitions)]
            publisher = Proc(pair)
            try:
                for proc in parts:
                    faults = env["TRELLARA_FAULTS"] + (",partition.after_checkpoint_before_stage:5:crash"
                                                       if proc.partition == 1 else "")
                    proc.start(env=dict(env, TRELLARA_FAULTS=faults), defects=True)
                publisher.start()
                run_pgbench(pair.source, ["-n", "--random-seed=39", "-c", "2", "-t", "60", "-f", pair.script])
                wait_for("partition 1 to die at its fault point", lambda: not parts[1].running(), 120)
                parts[1].start(env=env, defects=True)
                wait_converged(pair, parts + [publisher], timeout_s=120)
                check_exact(pair, Reader(pair), "with the checkpoint outside the staging transaction")
            finally:
                for proc in parts + [publisher]:
                    proc.stop()
                    outputs.append(proc.stderr())
        caught = checks_fail_under_defect("defect.partition_checkpoint_outside", "partition checkpoint", run_checks)
        record_fault_fired("partition.after_checkpoint_before_stage")
        print(f"caught: {str(caught)[:300]}")
        print("ok: negative_control_partition_checkpoint_outside_the_staging_transaction_is_caught")


@scenario(invariants=("`trellara run --local --verify` starts the partition appliers and the publisher, applies the "
                      "flow until caught up and verifies it: exit 0 when the target equals the source",
                      "exit 1 when the target was changed behind the flow's back"))
def run_local_verify_applies_a_partitioned_flow_and_verifies_it():
    with PartitionedPair("partitioned-run") as pair:
        run_pgbench(pair.source, ["-n", "--random-seed=39", "-c", "2", "-t", "75", "-f", pair.script])
        pair.wait_log_covers_source()
        command = [TRELLARA_BIN, "run", "--local", "--verify", "--config", pair.config, "--timeout", "300"]
        first = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if first.returncode != 0 or "the target equals the source" not in first.stdout:
            raise CaptureFailure(f"run --local --verify exited {first.returncode}: {first.stdout[-1500:]} "
                                 f"{first.stderr[-1500:]}")
        if pair.target.query("SELECT count(*) FROM ledger") != pair.source.query("SELECT count(*) FROM ledger"):
            raise CaptureFailure("run --local --verify passed but the target does not hold every transfer")
        marks = watermarks(pair)
        if len(marks["partitions"]) != PARTITIONS:
            raise CaptureFailure(f"run did not start every partition applier: {json.dumps(marks)[:1000]}")
        pair.target.query("UPDATE accounts SET balance = balance + 1 WHERE id = 7")  # behind the flow's back
        second = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if second.returncode != 1:
            raise CaptureFailure(f"run --local --verify on a changed target exited {second.returncode}, not 1: "
                                 f"{second.stdout[-1500:]} {second.stderr[-1500:]}")
        print("ok: run_local_verify_applies_a_partitioned_flow_and_verifies_it")


@scenario(invariants=("`trellara apply --until-caught-up` (the publisher) with a partitioned transaction pending and no "
                      "partition applier connected ends as blocked (exit 3) naming the partitions, having applied "
                      "nothing past it",
                      "partition appliers run with --until-caught-up, then the publisher, catch the flow up: exit 0, "
                      "the target equals the source"))
def until_caught_up_publisher_without_partition_appliers_ends_blocked_then_catches_up():
    with PartitionedPair("partitioned-until") as pair:
        run_pgbench(pair.source, ["-n", "--random-seed=39", "-c", "2", "-t", "40", "-f", pair.script])
        pair.wait_log_covers_source()
        publisher = [TRELLARA_BIN, "apply", "--config", pair.config, "--until-caught-up"]
        alone = subprocess.run(publisher, capture_output=True, text=True, timeout=300)
        if alone.returncode != 3 or "no partition applier of partition(s)" not in alone.stderr:
            raise CaptureFailure(f"the publisher alone with --until-caught-up exited {alone.returncode}, expected 3 naming "
                                 f"the partitions without an applier: {alone.stdout[-800:]} {alone.stderr[-1500:]}")
        print(f"publisher alone: exit 3: {alone.stderr.strip().splitlines()[-1][:400]}")
        ledger = pair.target.query("SELECT count(*) FROM ledger")
        if ledger != "0":
            raise CaptureFailure(f"the blocked publisher made {ledger} transfers visible without the partitions' evidence")
        for k in range(pair.partitions):
            part = subprocess.run([TRELLARA_BIN, "apply", "--config", pair.config, "--partition", str(k), "--until-caught-up"],
                                  capture_output=True, text=True, timeout=300)
            if part.returncode != 0:
                raise CaptureFailure(f"partition applier {k} --until-caught-up exited {part.returncode}: {part.stderr[-1500:]}")
        caught_up = subprocess.run(publisher, capture_output=True, text=True, timeout=300)
        if caught_up.returncode != 0:
            raise CaptureFailure(f"the publisher after the partition appliers exited {caught_up.returncode}: "
                                 f"{caught_up.stderr[-1500:]}")
        check_exact(pair, None, "after the partition appliers and the publisher ran until caught up")
        if pair.target.query("SELECT count(*) FROM ledger") != pair.source.query("SELECT count(*) FROM ledger"):
            raise CaptureFailure("the publisher exited 0 but the target does not hold every transfer")
        print("ok: until_caught_up_publisher_without_partition_appliers_ends_blocked_then_catches_up")


def run_until_caught_up(pair, expect, partition=None):
    argv = [TRELLARA_BIN, "apply", "--config", pair.config, "--until-caught-up"]
    if partition is not None:
        argv += ["--partition", str(partition)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if result.returncode != expect:
        raise CaptureFailure(f"{' '.join(argv[1:])} exited {result.returncode}, expected {expect}: "
                             f"{result.stdout[-800:]} {result.stderr[-1500:]}")
    return result


def partitioned_transfer(pair, a, b, amount):
    """One transfer on the source; returns (xid, commit LSN) once its commit marker is in the log."""
    xid = int(pair.source.query(f"BEGIN; UPDATE accounts SET balance = balance - {amount}, moves = moves + 1 WHERE id = {a}; "
                                f"UPDATE accounts SET balance = balance + {amount}, moves = moves + 1 WHERE id = {b}; "
                                f"INSERT INTO ledger (src, dst, amount) VALUES ({a}, {b}, {amount}); "
                                "SELECT txid_current(); COMMIT").splitlines()[-1])
    pair.wait_log_covers_source()
    marker = next(r for r in log_records(pair.log_dir) if r["type"] == "commit_marker" and r["xid"] == xid)
    return xid, marker["commit_lsn"]


@scenario(seed_rows=("repair_and_replay_ready", "quarantine_replay_ready_requires_exact_boundary"),
          invariants=("a partitioned transaction the publisher cannot apply (an UPDATE matching no row) is quarantined "
                      "whole: none of its partitions' changes, no dedup row, nothing after it visible",
                      "its staged chunks stay for the replay",
                      "replay-ready of another boundary (the xid at another commit LSN, another xid at its commit "
                      "LSN) is refused and marks nothing",
                      "after the repair and replay-ready of the exact boundary the publisher applies it and what "
                      "follows once: the target equals the source, no staged chunk left"))
def partitioned_quarantine_is_repaired_and_replayed_at_the_exact_boundary():
    with PartitionedPair("partitioned-quarantine") as pair:
        for k in range(pair.partitions):
            run_until_caught_up(pair, 0, k)
        run_until_caught_up(pair, 0)
        saved = pair.target.query("SELECT id, balance, moves FROM accounts WHERE id = 7")
        pair.target.query("DELETE FROM accounts WHERE id = 7")  # behind the flow's back
        xid, commit_lsn = partitioned_transfer(pair, 7, 8, 5)
        partitioned_transfer(pair, 20, 21, 3)
        for k in range(pair.partitions):
            run_until_caught_up(pair, 0, k)
        blocked = run_until_caught_up(pair, 3)
        if "matched 0 rows" not in blocked.stderr or f"{xid}" not in blocked.stderr:
            raise CaptureFailure(f"the quarantine message does not name the zero-row UPDATE of xid {xid}: "
                                 f"{blocked.stderr[-1500:]}")
        row = pair.target.query(f"SELECT reason || '|' || state FROM trellara.quarantine WHERE flow = 'app' AND xid = {xid} "
                                f"AND commit_lsn = '{commit_lsn}'")
        if row != "zero_rows_matched|quarantined":
            raise CaptureFailure(f"quarantine row of xid {xid}: {row!r}, expected zero_rows_matched|quarantined")
        visible = pair.target.query("SELECT (SELECT count(*) FROM ledger) || ' ' || (SELECT balance FROM accounts WHERE id = 8)"
                                    f" || ' ' || (SELECT count(*) FROM trellara.applied_transactions WHERE commit_lsn >= '{commit_lsn}')")
        if visible != f"0 {START_BALANCE} 0":
            raise CaptureFailure(f"part of the quarantined transaction or what follows it is visible (ledger rows, "
                                 f"balance of account 8, dedup rows at or past it): {visible}")
        staged = pair.target.query(f"SELECT count(*) FROM trellara.partition_stage WHERE commit_lsn = '{commit_lsn}'")
        if staged == "0":
            raise CaptureFailure("the quarantined transaction's staged chunks are gone: a replay could not apply it")
        v = lsn_to_int(commit_lsn) + 1
        for wrong_xid, wrong_lsn in ((xid, int_to_lsn(v)), (xid + 1, commit_lsn)):
            refused = pair.target.psql(f"SELECT trellara.quarantine_replay_ready({wrong_xid}, '{wrong_lsn}')", check=False)
            state = pair.target.query(f"SELECT state FROM trellara.quarantine WHERE flow = 'app' AND xid = {xid}")
            if refused.returncode == 0 or "refused: no quarantined transaction" not in refused.stderr or state != "quarantined":
                raise CaptureFailure(f"replay-ready of ({wrong_xid}, {wrong_lsn}) was not refused or changed the "
                                     f"boundary ({xid}, {commit_lsn}): {refused.stderr} state {state}")
        vid, balance, moves = saved.split("|")
        pair.target.query(f"INSERT INTO accounts VALUES ({vid}, {balance}, {moves})")
        pair.target.query(f"SELECT trellara.quarantine_replay_ready({xid}, '{commit_lsn}')")
        run_until_caught_up(pair, 0)
        check_exact(pair, None, "after the repair and the replay")
        print(f"ok: partitioned_quarantine_is_repaired_and_replayed_at_the_exact_boundary (xid {xid}, {staged} staged "
              f"chunk(s) kept while quarantined)")



class BrokerPartitionedPair(PartitionedPair):
    """A partitioned flow through the broker: `trellara forward` publishes the source's log
    (forward.toml) to a 3-node JetStream cluster; on the applier's side (remote.toml) the publisher
    keeps the replica of the log from the stream and the partition appliers read that replica."""

    def __init__(self, name, cluster, partitions=2):
        super().__init__(name, partitions=partitions)
        self.cluster = cluster

    def ready(self):
        super().ready()
        transport = (f'[transport]\nkind = "nats"\nservers = "{self.cluster.servers}"\nstream = "{STREAM}"\n'
                     'applier = "eu"\nremote_appliers = "eu"\n')
        self.forward_config = self.write_config(os.path.join(self.work.name, "forward.toml"), extra=transport)
        self.replica_dir = os.path.join(self.work.name, "replica")
        self.remote = self.write_config(os.path.join(self.work.name, "remote.toml"), extra=transport,
                                        log_dir=self.replica_dir)


def source_remote_offset(pair):
    """The next offset the forwarder recorded for remote applier "eu" in the source's log, or None."""
    path = os.path.join(pair.log_dir, "consumers", "remote.eu")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        for word in f.read().split():
            if word.startswith("next_offset="):
                return int(word.split("=", 1)[1])
    return None


def held_for_a_stopped_partition(pair, parts, publisher):
    """Partition 1's applier stopped while transactions listing only partition 0 are published: the
    publisher's own offset in the replica passes partition 1's checkpoint, and for longer than the
    receiver's position resend (5 s) the position the source records for the applier's host must
    stay at or below that checkpoint. Returns (partition 1's checkpoint, the publisher's offset)."""
    account = None
    for candidate in range(1, 40):  # an account whose row routes to partition 0 (no-op updates)
        xid = int(pair.source.query(f"BEGIN; UPDATE accounts SET balance = balance WHERE id = {candidate}; "
                                    "SELECT txid_current(); COMMIT").splitlines()[-1])
        pair.wait_log_covers_source()
        chunks = [r for r in log_records(pair.log_dir) if r["type"] == "chunk" and r["xid"] == xid]
        if chunks and all(chunk["partition_id"] == 0 for chunk in chunks):
            account = candidate
            break
    if account is None:
        raise CaptureFailure("no account among the first 39 routes to partition 0")
    wait_converged(pair, parts + [publisher])
    parts[1].stop()
    floor = int(pair.target.query("SELECT log_offset FROM trellara.partition_checkpoints "
                                  f"WHERE flow = '{pair.flow}' AND partition = 1"))
    for _ in range(30):
        xid = pair.source.query(f"BEGIN; UPDATE accounts SET balance = balance WHERE id = {account}; "
                                "SELECT txid_current(); COMMIT").splitlines()[-1]
    wait_for("the publisher to apply the transactions listing only partition 0",
             lambda: pair.target.query(f"SELECT count(*) FROM trellara.applied_transactions WHERE xid = {xid}") == "1",
             120)
    wait_for("the publisher to record its offset past partition 1's checkpoint",
             lambda: consumer_offset(pair.replica_dir, "applier") > floor, 120)
    ahead = consumer_offset(pair.replica_dir, "applier")
    watch_until = time.monotonic() + 8  # longer than the receiver's resend of its position (5 s)
    while time.monotonic() < watch_until:
        reported = source_remote_offset(pair)
        if reported is not None and reported > floor:
            raise CaptureFailure(f"the source was told offset {reported} is durable on the applier's host while "
                                 f"partition 1's applier (stopped) still needs the log from offset {floor}")
        time.sleep(0.2)
    parts[1].start(env=parts[1].env, defects=parts[1].defects)
    return floor, ahead


def broker_partitioned_run(pair, env=None, defects=False, outputs=None, kills=True):
    """Forwarder, publisher and two partition appliers through the broker; a transfer workload with
    random kill -9s (kills=True), the position phase, convergence and verify; stderr into `outputs`."""
    forward_err = open(os.path.join(pair.work.name, "forward.err"), "w")
    forwarder = subprocess.Popen([TRELLARA_BIN, "forward", "--config", pair.forward_config],
                                 stdout=subprocess.DEVNULL, stderr=forward_err)
    forward_err.close()
    parts = [Proc(pair, k, config=pair.remote) for k in range(pair.partitions)]
    publisher = Proc(pair, config=pair.remote)
    procs = parts + [publisher]
    reader = Reader(pair)
    rng = random.Random(38)
    victims = checks = 0
    try:
        parts[0].start(env=env, defects=defects)  # before the replica exists: it waits for the publisher
        publisher.start(env=env, defects=defects)
        parts[1].start(env=env, defects=defects)
        reader.start()
        bench = threading.Thread(target=run_pgbench, args=(pair.source, [
            "-n", "--random-seed=38", "-c", "2", "-t", "400" if kills else "60", "-R", "60", "-f", pair.script]))
        bench.start()
        while bench.is_alive():
            time.sleep(0.4 + 0.6 * rng.random())
            # The source's record of the reported position first, the checkpoints after: both only
            # grow, so a position past a checkpoint read later was past it when it was sent.
            reported = source_remote_offset(pair)
            if reported is not None and pair.target.query(
                    "SELECT to_regclass('trellara.partition_checkpoints') IS NOT NULL") == "t":
                floor = pair.target.query(f"SELECT min(log_offset) FROM trellara.partition_checkpoints "
                                          f"WHERE flow = '{pair.flow}'")
                if floor and int(floor) < reported:
                    raise CaptureFailure(f"the source was told offset {reported} is durable downstream while a "
                                         f"partition applier's checkpoint is at log offset {floor}")
                checks += 1
            if kills:
                victim = rng.choice(procs)
                victim.kill()
                victims += 1
                victim.start(env=env, defects=defects)
        bench.join()
        wait_converged(pair, procs)
        if kills and (reader.samples < 50 or len(reader.seen_ledger) < 5):
            raise CaptureFailure(f"the reader took {reader.samples} samples over {len(reader.seen_ledger)} "
                                 "states: too few to say anything about visibility")
        floor, ahead = held_for_a_stopped_partition(pair, parts, publisher)
        wait_converged(pair, procs)
        print(f"{victims} SIGKILLs, {checks} position checks; reader took {reader.samples} samples over "
              f"{len(reader.seen_ledger)} distinct states; with partition 1 stopped at log offset {floor} the "
              f"publisher went on to {ahead} and the source kept the log from {source_remote_offset(pair)}")
        reader.finish()
        for proc in procs:
            proc.stop()
        # verify holds an applier at the source's consistent point: what the source logs from here
        # must still travel, so the forwarder runs until verify has answered.
        check_exact(pair, reader, "through the broker", config=pair.remote)
        if not os.listdir(pair.replica_dir):
            raise CaptureFailure("the replica directory is empty: the partition appliers did not read a replica")
    finally:
        reader.finish()
        for proc in procs:
            proc.stop()
            if outputs is not None:
                outputs.append(proc.stderr())
        if forwarder.poll() is None:
            forwarder.terminate()  # our own child, by its Popen handle
        forwarder.wait(timeout=120)


@scenario(suite="broker",
          invariants=("partition appliers read the replica of the log that the publisher keeps from the JetStream "
                      "stream (3 nodes, R3) and stage their chunks; the publisher makes each transfer visible whole",
                      "kill -9 of either partition applier and of the publisher at random moments: no partial "
                      "transaction visible (reader), the target equals the source (verify on the remote "
                      "configuration), nothing staged twice or left staged",
                      "the position reported to the source never passes a partition applier's checkpoint, also "
                      "while that partition's applier is stopped and the publisher goes on past it: the source "
                      "keeps its log for the slowest partition"))
def partition_appliers_through_the_broker_apply_exactly_once():
    with NatsCluster() as cluster, BrokerPartitionedPair("partitioned-broker", cluster) as pair:
        broker_partitioned_run(pair)
        pair.check_no_crashes()
        print("ok: partition_appliers_through_the_broker_apply_exactly_once")


@scenario(suite="broker", defect="defect.receive_position_ignores_partitions",
          pairs_with="partition_appliers_through_the_broker_apply_exactly_once",
          invariants=("a receiver that reports the publisher's own offset to the source, not the least offset of the "
                      "replica's consumers, lets the source let go of log a stopped partition applier still needs: "
                      "the position check catches it",))
def negative_control_position_past_a_partition_checkpoint_is_caught():
    with NatsCluster() as cluster, BrokerPartitionedPair("partitioned-broker-defect", cluster) as pair:
        caught = checks_fail_under_defect("defect.receive_position_ignores_partitions", "retention position",
                                          lambda env, outputs: broker_partitioned_run(pair, env, True, outputs,
                                                                                      kills=False))
        print(f"caught: {str(caught)[:300]}")
        print("ok: negative_control_position_past_a_partition_checkpoint_is_caught")

if __name__ == "__main__":
    run_scenarios([partitioned_flow_survives_kills_with_nothing_partial_visible,
                   the_watermark_holds_publication_until_every_listed_partition_has_evidence,
                   negative_control_publish_before_evidence_is_caught,
                   partitioned_relay_failing_before_the_manifest_does_not_advance_the_slot,
                   negative_control_partitioned_relay_confirming_before_the_marker_is_caught,
                   negative_control_partition_checkpoint_outside_the_staging_transaction_is_caught,
                   run_local_verify_applies_a_partitioned_flow_and_verifies_it,
                   until_caught_up_publisher_without_partition_appliers_ends_blocked_then_catches_up,
                   partitioned_quarantine_is_repaired_and_replayed_at_the_exact_boundary,
                   partition_appliers_through_the_broker_apply_exactly_once,
                   negative_control_position_past_a_partition_checkpoint_is_caught])
