#!/usr/bin/env python3
"""The broker hop's second half (docs/broker.md "Remote apply"): `trellara apply` with [transport]
kind = "nats" reads the flow's stream on a real 3-node JetStream cluster (Debian's nats-server, R3
file storage) into its replica of the log and applies it to its target exactly once, while
`trellara forward` publishes the source's log. The broker is treated as a transport that can lose
what it acknowledged: the scenarios make it do so.

What every scenario checks: the target's tables equal the source's, row for row, and each source
transaction committed once on the target (its dedup rows). Scenarios:
  - remote_applier_applies_through_the_stream_exactly_once: a workload with the remote applier
    killed -9 at random moments while the forwarder publishes and the source writes; then
    `trellara status` and `trellara verify` on the remote configuration;
  - lost_message_is_a_hole_refilled_by_the_forwarder: acknowledged messages deleted from the
    stream (the broker lost them): the applier finds the hole, never skips it, asks the forwarder,
    which publishes again from the local log; paired with defect.apply_hole_check_skipped;
  - lost_tail_is_republished_by_the_forwarder: the broker loses the stream's last records, which
    no remote applier can see as a hole (nothing later arrives): the idle forwarder checks the
    stream's tail and publishes them again (event=tail_republish);
  - the_source_log_is_kept_until_the_remote_applier_reports: the forwarder registers the remote
    applier as a consumer of the source's log; its segments stay until the applier reports its
    durable position back, so a message the broker loses later can still be refilled; paired with
    defect.forward_retention_by_forwarder (the lost records are gone: the applier stops, exit 3);
  - duplicate_and_reordered_delivery_is_applied_once: ten records delivered again newest first,
    then twenty records delivered in reverse order before the forwarder publishes them: duplicates
    counted and skipped, the hole refilled, the target exact;
  - conflicting_duplicate_is_quarantined: an applied offset delivered again with another record's
    content: quarantined as checksum_conflict, the applier stops with exit 3;
  - table_shapes_through_the_broker_arrive_exact: FOR ALL TABLES with a list-partitioned table
    (rows moved between partitions), an inheritance tree updated through its parent, and columns
    with type modifiers (numeric(p,s), varchar(n), char(n), timestamp(3), bit varying, arrays of
    numeric(p,s)) and jsonb, through the broker; every table compared row for row (md5);
  - remote_applier_killed_at_each_receiver_boundary_converges: the remote applier killed (SIGKILL by
    its own fault point) after appending to its replica before the fsync, after the fsync before its
    read position is kept, on finding a hole before asking for the refill, and after its target
    commit before its position reaches the forwarder; restarted each time, it ends exact;
  - quorum_loss_under_remote_apply_resumes_exactly: two of three nodes killed while the source
    writes and both processes run; both wait (state broker_quorum_unavailable, GET /readyz 503 with
    that reason, the forwarder's quorum gauge 0) and finish exactly once the nodes return (200 ready).
"""
import json
import os
import random
import subprocess
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import (TRELLARA_BIN, CaptureFailure, checks_fail_under_defect, heap_checked_env,  # noqa: E402
                             record_faults_from_output, run_scenarios, scenario, verify_with_applier, wait_for)
from harness.cluster import _free_port  # noqa: E402
from harness.nats_client import NatsClient, message_name, pack_message, single_record_message  # noqa: E402
from harness.nats_cluster import NatsCluster  # noqa: E402
from flow_pair import run_trellara  # noqa: E402
from test_broker_forward import SCHEMA, STREAM, BrokerPair, log_frames  # noqa: E402

KILL_SEED = int(os.environ.get("TRELLARA_KILL_SEED", "4242"))


def consumer_offset(log_dir, name):
    """The next offset recorded in consumers/<name> ("trellara-consumer-offset v1 next_offset=N ...")."""
    with open(os.path.join(log_dir, "consumers", name)) as f:
        for word in f.read().split():
            if word.startswith("next_offset="):
                return int(word.split("=", 1)[1])
    raise CaptureFailure(f"consumers/{name} in {log_dir} holds no next_offset")


class RemotePair(BrokerPair):
    """A flow published by `trellara forward` (flow.toml, on the source's log) and applied by a
    remote `trellara apply` (remote.toml: its own replica directory, reading the stream)."""

    def __init__(self, name, cluster, source_settings=None, schema=SCHEMA, tables=("items",)):
        # No whole-log consumer: the forwarder's and the remote applier's consumers are the only
        # ones holding the source's log (the retention scenarios depend on it). tables=None: the
        # publication is FOR ALL TABLES.
        super().__init__(name, cluster, schema, tables, source_settings, whole_log_consumer=False)
        self.processes = []

    def transport(self):
        return super().transport() + 'applier = "eu"\nremote_appliers = "eu"\n'

    def ready(self):
        self.replica_dir = os.path.join(self.work.name, "replica")
        # Each process serves GET /metrics and /readyz on its own port.
        self.forward_port, self.apply_port = _free_port(), _free_port()
        self.config = self.write_config(extra=f'\n[metrics]\nlisten = "127.0.0.1:{self.forward_port}"\n')
        self.remote = self.write_config(os.path.join(self.work.name, "remote.toml"), log_dir=self.replica_dir,
                                        extra=f'\n[metrics]\nlisten = "127.0.0.1:{self.apply_port}"\n')

    def start_process(self, command, name, env=None):
        path = os.path.join(self.work.name, f"{name}.stderr")
        err = open(path, "a")
        try:
            process = subprocess.Popen(trellara(command, "--config", self.remote if command == "apply" else self.config,
                                                *(["--format", "json"] if command == "forward" else []), env=env),
                                       stdout=subprocess.PIPE, stderr=err, text=True, env=heap_checked_env(env))
        finally:
            err.close()
        process.stderr_path = path
        self.processes.append(process)
        return process

    def __exit__(self, exc_type, exc, tb):
        # Whatever a scenario left running (it failed before stopping it): our own children, by
        # their Popen handles, before the servers stop.
        for process in getattr(self, "processes", []):
            if process.poll() is None:
                process.kill()
                process.communicate(timeout=60)
        return super().__exit__(exc_type, exc, tb)

    @staticmethod
    def stderr_of(process):
        with open(process.stderr_path) as f:
            return f.read()

    def apply_until_caught_up(self, env=None, outputs=None):
        """The remote applier until it has applied what the stream holds; its stderr (also appended
        to `outputs` when given, for a negative control)."""
        result = run_trellara(["apply", "--config", self.remote, "--until-caught-up"], expect=None,
                              env=heap_checked_env(env), timeout_s=600)
        if outputs is not None:
            outputs.append(result.stderr)
        if result.returncode != 0:
            raise CaptureFailure(f"remote trellara apply --until-caught-up exited {result.returncode}: "
                                 f"{result.stderr[-3000:]}")
        return result.stderr

    def rows(self, cluster):
        return cluster.query("SELECT coalesce(string_agg(id || ':' || note || ':' || amount, ',' ORDER BY id), '') "
                             "FROM items")

    def assert_target_exact(self, label):
        source, target = self.rows(self.source), self.rows(self.target)
        if source != target:
            s, t = set(source.split(",")), set(target.split(","))
            raise CaptureFailure(f"{label}: the target differs from the source: {len(s - t)} rows missing "
                                 f"(e.g. {sorted(s - t)[:3]}), {len(t - s)} extra (e.g. {sorted(t - s)[:3]})")
        dedup = int(self.target.query("SELECT count(*) FROM trellara.applied_transactions"))
        again = int(self.target.query("SELECT count(*) - count(DISTINCT (commit_lsn, xid)) "
                                      "FROM trellara.applied_transactions"))
        if again != 0:
            raise CaptureFailure(f"{label}: {again} source transactions committed more than once on the target")
        print(f"{label}: the target equals the source ({len(source.split(','))} rows, {dedup} transactions applied)")

    def wait_stream_holds_log(self, timeout_s=180):
        def held():
            # The stream reaches the log's end (the relay may have appended a progress marker or two
            # since). By offset, not by count: a message the test deleted as lost (several records)
            # is not refilled until a remote applier asks.
            with NatsClient(self.cluster.client_port(0)) as client:
                highest = max((r[2] for r in client.stream_records(STREAM)), default=-1)
            return highest >= max(log_frames(self.log_dir), default=0) - 2
        wait_for("the forwarder to publish the log", held, timeout_s)


def http_get(port, path):
    """(status, body) of GET http://127.0.0.1:<port><path>; (None, error) when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError as error:
        return None, str(error)


def defect_switch(env):
    """A defect named in `env` needs the explicit test switch (a global option, before the command)."""
    return ["--enable-test-defects"] if env and "defect." in env.get("TRELLARA_FAULTS", "") else []


def trellara(*args, env=None):
    """The trellara argv (for a process we start and keep)."""
    return [TRELLARA_BIN, *defect_switch(env), *args]


def stop(process, allowed=(0,)):
    """SIGTERM to our own child; its exit must be in `allowed` (None: any)."""
    if process.poll() is None:
        process.terminate()                       # our own child, by its Popen handle
    out, _ = process.communicate(timeout=120)
    if allowed is not None and process.returncode not in allowed:
        raise CaptureFailure(f"{process.args[1]} exited {process.returncode}: {RemotePair.stderr_of(process)[-3000:]}")
    return out


def stream_transactions(cluster):
    """{offset: stream sequence of the message holding it} of the whole transactions (record type
    1, Envelope) in the stream, read with the independent client."""
    with NatsClient(cluster.client_port(0)) as client:
        return {offset: seq for seq, _headers, offset, kind, _lsn, _payload in client.stream_records(STREAM)
                if kind == 1}


def lose(cluster, offsets, keep_last=False):
    """Deletes the messages holding `offsets` from the stream (a message holds several records):
    the broker lost what it acknowledged. `keep_last`: a message that is the stream's last is not
    deleted but the last one before it holding a transaction — nothing after the stream's last
    message would show its loss as a hole (the forwarder republishes a lost tail by itself).
    Returns the offsets lost."""
    with NatsClient(cluster.client_port(0)) as client:
        records = client.stream_records(STREAM)
        last_seq = max(r[0] for r in records)
        transactions = sorted((offset, seq) for seq, _h, offset, kind, _l, _p in records if kind == 1)
        sequences = dict(transactions)
        doomed = set()
        for offset in offsets:
            seq = sequences[offset]
            if keep_last and seq == last_seq:
                earlier = [s for _o, s in transactions if s < last_seq]
                if not earlier:
                    raise RuntimeError("harness failure: the stream holds its transactions in one message")
                seq = earlier[-1]
            doomed.add(seq)
        for seq in sorted(doomed):
            client.delete_message(STREAM, seq)
    return sorted(offset for seq, _h, offset, *_rest in records if seq in doomed)


@scenario(seed_rows=(), suite="broker",
          invariants=("the remote applier applies every source transaction once through the stream",
                      "kill -9 of the remote applier at any moment loses and repeats nothing",
                      "status and verify work on the remote configuration"))
def remote_applier_applies_through_the_stream_exactly_once():
    rng = random.Random(KILL_SEED)
    with NatsCluster() as cluster, RemotePair("remote-apply", cluster) as pair:
        forwarder = pair.start_process("forward", "forward")
        written = kills = 0
        for _round in range(5):
            applier = pair.start_process("apply", "apply")
            writer = pair.write_in_background(200, start=written)
            written += 200
            time.sleep(rng.uniform(0.2, 1.5))     # a moment to kill at, not a wait for a condition
            if applier.poll() is not None:
                raise CaptureFailure(f"the remote applier ended on its own: {pair.stderr_of(applier)[-2000:]}")
            applier.kill()                        # our own child: kill -9 by its Popen handle
            applier.communicate(timeout=60)
            kills += 1
            if writer.wait(timeout=300) != 0:
                raise CaptureFailure(f"the source workload failed: {writer.stderr.read()[-2000:]}")
        pair.wait_log_covers_source()
        pair.wait_stream_holds_log()
        pair.apply_until_caught_up()
        pair.assert_target_exact(f"after {kills} kill -9 of the remote applier")
        run_trellara(["status", "--config", pair.remote, "--format", "json"], timeout_s=60,
                     what="trellara status on the remote configuration")
        verified = verify_with_applier(pair.remote)
        if verified.returncode != 0:
            raise CaptureFailure(f"trellara verify on the remote configuration exited {verified.returncode}: "
                                 f"{verified.stdout[-1500:]} {verified.stderr[-1500:]}")
        stop(forwarder)
        pair.check_no_crashes()
    print("ok: remote_applier_applies_through_the_stream_exactly_once")


def lost_messages_run(pair, env=None, outputs=None):
    """The forwarder publishes 150 transactions; three acknowledged messages holding transactions
    are deleted from the stream before the remote applier reads them; the applier must come out
    exact, through refills."""
    forwarder = pair.start_process("forward", "forward")
    try:
        pair.write(150)
        pair.wait_log_covers_source()
        pair.wait_stream_holds_log()
        # A message after the ones to lose (the forwarder may have packed all 150 into one): the
        # loss must show as a hole, not as a lost tail the forwarder republishes by itself.
        pair.write(10, start=150)
        pair.wait_log_covers_source()
        pair.wait_stream_holds_log()
        lost = sorted(stream_transactions(pair.cluster))[5:80:30]
        lost_records = lose(pair.cluster, lost, keep_last=True)
        print(f"lost: {len(lost_records)} records (offsets {lost_records[0]}..{lost_records[-1]}) in the messages "
              f"holding transactions {lost} (or the one before the stream's last)")
        err = pair.apply_until_caught_up(env=env, outputs=outputs)
        pair.assert_target_exact(f"after the broker lost offsets {lost}")
        if "event=hole" not in err or "event=refilled" not in err:
            raise CaptureFailure(f"the applier did not report the hole and its refill: {err[-2000:]}")
        return lost
    finally:
        stop(forwarder)


@scenario(seed_rows=(), suite="broker",
          invariants=("a record the broker lost is a hole: never skipped, refilled from the source's log",
                      "the target equals the source after the refill"))
def lost_message_is_a_hole_refilled_by_the_forwarder():
    with NatsCluster() as cluster, RemotePair("remote-hole", cluster) as pair:
        lost = lost_messages_run(pair)
        print(f"lost messages: offsets {lost} deleted from the stream were refilled; the target is exact")
        pair.check_no_crashes()
    print("ok: lost_message_is_a_hole_refilled_by_the_forwarder")


@scenario(seed_rows=(), suite="broker", defect="defect.apply_hole_check_skipped",
          pairs_with="lost_message_is_a_hole_refilled_by_the_forwarder",
          invariants=("an applier that takes the record after a hole as the next one is caught"))
def lost_message_defect_hole_check_skipped_is_caught():
    with NatsCluster() as cluster, RemotePair("remote-hole-defect", cluster) as pair:
        caught = checks_fail_under_defect("defect.apply_hole_check_skipped", "lost-message",
                                          lambda env, outputs: lost_messages_run(pair, env, outputs))
        print(f"caught: {str(caught)[:300]}")
    print("ok: lost_message_defect_hole_check_skipped_is_caught")


BIG_NOTE = "x" * 900


def retention_run(pair, env=None, outputs=None):
    """The source's log rolls 1 MB segments; the forwarder publishes everything while the remote
    applier has not started. Then the message of the log's first transaction is deleted from the
    stream (the broker lost it), and the remote applier catches up: only a source that kept its
    log for the remote applier can refill it."""
    forwarder = pair.start_process("forward", "forward", env=env)
    try:
        for batch in range(4):
            pair.source.psql("".join(f"INSERT INTO items VALUES ({batch * 1000 + i}, '{BIG_NOTE}', {i});\n"
                                     for i in range(600)))
        pair.wait_log_covers_source()
        pair.wait_stream_holds_log()
        first_segment = os.path.join(pair.log_dir, "segment-00000000000000000000.log")
        if env is None:
            # The remote applier holds the log from its start (the rule retention follows).
            if consumer_offset(pair.log_dir, "remote.eu") != 0:
                raise CaptureFailure(f"consumer remote.eu does not hold the log's start: {consumer_offset(pair.log_dir, 'remote.eu')}")
        else:
            try:   # the defect lets the relay's retention (once a second) reclaim what was published
                wait_for("the relay to reclaim the first segment", lambda: not os.path.exists(first_segment), 120)
            except CaptureFailure as failure:
                raise RuntimeError(f"harness failure, not a caught defect: {failure}") from failure
        lost = min(stream_transactions(pair.cluster))
        lose(pair.cluster, [lost])
        pair.apply_until_caught_up(env=env, outputs=outputs)
        pair.assert_target_exact(f"after the broker lost offset {lost}")
        wait_for("the remote applier's position to reach the source's consumer file",
                 lambda: consumer_offset(pair.log_dir, "remote.eu") > lost, 60)
        return len([name for name in os.listdir(pair.log_dir) if name.startswith("segment-")])
    finally:
        try:
            # Under the defect the forwarder may end in any way (the log it republishes from is
            # reclaimed under it); its stderr (the defect's "fired" line) is kept whatever it did.
            stop(forwarder, allowed=(0,) if env is None else None)
        finally:
            if outputs is not None:
                outputs.append(pair.stderr_of(forwarder))


@scenario(seed_rows=(), suite="broker",
          invariants=("the source's log is kept until the remote applier reports past it",
                      "a record the broker loses later is refilled from it"))
def the_source_log_is_kept_until_the_remote_applier_reports():
    with NatsCluster() as cluster, RemotePair("remote-retention", cluster,
                                              source_settings={"trellara.log_segment_size": "1MB"}) as pair:
        segments = retention_run(pair)
        print(f"retention: the source kept {segments} segments for the remote applier; the lost record was "
              f"refilled from the first")
        pair.check_no_crashes()
    print("ok: the_source_log_is_kept_until_the_remote_applier_reports")


@scenario(seed_rows=(), suite="broker", defect="defect.forward_retention_by_forwarder",
          pairs_with="the_source_log_is_kept_until_the_remote_applier_reports",
          invariants=("retention driven by the forwarder instead of the remote applier is caught"))
def retention_defect_by_forwarder_is_caught():
    with NatsCluster() as cluster, RemotePair("remote-retention-defect", cluster,
                                              source_settings={"trellara.log_segment_size": "1MB"}) as pair:
        caught = checks_fail_under_defect("defect.forward_retention_by_forwarder", "retention",
                                          lambda env, outputs: retention_run(pair, env, outputs))
        print(f"caught: {str(caught)[:300]}")
    print("ok: retention_defect_by_forwarder_is_caught")


@scenario(seed_rows=("qualification_broker_outage_quorum_loss",), suite="broker",
          invariants=("remote apply waits while the broker has no quorum (state, /readyz, metrics)",
                      "the target is exact once quorum returns"))
def quorum_loss_under_remote_apply_resumes_exactly():
    with NatsCluster() as cluster, RemotePair("remote-quorum", cluster) as pair:
        forwarder = pair.start_process("forward", "forward")
        applier = pair.start_process("apply", "apply")
        pair.write(50)
        wait_for("the remote applier to apply the first transactions",
                 lambda: int(pair.target.query("SELECT count(*) FROM items")) >= 150, 120)
        cluster.kill(1)
        cluster.kill(2)
        pair.write(50, start=50)
        pair.wait_log_covers_source()
        try:
            wait_for("both processes to report that the broker has no quorum",
                     lambda: "state=broker_quorum_unavailable" in pair.stderr_of(forwarder)
                     and "state=broker_quorum_unavailable" in pair.stderr_of(applier), 180)
        except CaptureFailure as failure:
            raise CaptureFailure(f"{failure}; applier (exit {applier.poll()}): {pair.stderr_of(applier)[-1500:]}; "
                                 f"forwarder: {pair.stderr_of(forwarder)[-800:]}") from None
        wait_for("GET /readyz of both to answer 503 broker_quorum_unavailable",
                 lambda: all(http_get(port, "/readyz") == (503, "broker_quorum_unavailable\n")
                             for port in (pair.forward_port, pair.apply_port)), 60)
        status, body = http_get(pair.forward_port, "/metrics")
        if status != 200 or "trellara_forward_broker_quorum_available{" not in body or \
                not any(line.startswith("trellara_forward_broker_quorum_available{") and line.endswith(" 0")
                        for line in body.splitlines()):
            raise CaptureFailure(f"the forwarder's metrics do not show the quorum loss: {status} {body[:1500]}")
        cluster.start_node(1)
        cluster.start_node(2)
        cluster.wait_ready()
        pair.wait_log_covers_source()
        wait_for("the remote applier to apply everything after quorum returned",
                 lambda: pair.rows(pair.source) == pair.rows(pair.target), 240)
        wait_for("GET /readyz of both to answer 200 ready",
                 lambda: all(http_get(port, "/readyz") == (200, "ready\n")
                             for port in (pair.forward_port, pair.apply_port)), 120)
        stop(applier)
        summary = json.loads(stop(forwarder).strip().splitlines()[-1])
        pair.assert_target_exact("after two of three nodes were down")
        print(f"quorum loss: forwarder {summary['publish_retries']} publish retries; the applier waited and resumed")
        pair.check_no_crashes()
    print("ok: quorum_loss_under_remote_apply_resumes_exactly")


def stream_summary(stderr):
    """The remote applier's counters from its last `event=stream_summary` line."""
    lines = [line for line in stderr.splitlines() if "event=stream_summary" in line]
    if not lines:
        raise CaptureFailure(f"the remote applier printed no stream summary: {stderr[-1500:]}")
    return {key: int(value) for key, value in (field.split("=", 1) for field in lines[-1].split()[1:] if "=" in field)
            if value.isdigit()}


def republish(client, flow, identity, record, refill, payload=None, single=False):
    """Publishes `record` (offset, type, commit LSN, payload) again on the flow's refill subject under
    a new id, alone in a message: a broker delivering a record again (with `payload`, other content
    than the original). `single`: as a forwarder before packing published it."""
    offset, kind, lsn, data = record
    record = (offset, kind, lsn, data if payload is None else payload)
    headers, body = (single_record_message(flow, identity, record, refill) if single
                     else pack_message(flow, identity, [record], refill))
    return client.publish(f"trellara.{flow}.log.refill", headers, body)


def log_identity_of(headers):
    return message_name(headers["Nats-Msg-Id"])[1]


@scenario(seed_rows=(), suite="broker",
          invariants=("records delivered again (in reverse order) are skipped and counted as duplicates",
                      "records delivered out of order are applied in offset order, holes refilled",
                      "the target equals the source, each transaction committed once"))
def duplicate_and_reordered_delivery_is_applied_once():
    with NatsCluster() as cluster, RemotePair("remote-reorder", cluster) as pair:
        forwarder = pair.start_process("forward", "forward")
        pair.write(60)
        pair.wait_log_covers_source()
        pair.wait_stream_holds_log()
        stop(forwarder)
        with NatsClient(cluster.client_port(0)) as client:
            published = client.stream_records(STREAM)
            identity = log_identity_of(published[0][1])
            # Ten records again, newest first, one per message: half packed, half as a forwarder
            # before packing published them (both are read).
            for i, (_seq, _headers, *record) in enumerate(reversed(published[5:15])):
                republish(client, pair.flow, identity, tuple(record), 1, single=i % 2 == 1)
        # The next records reach the stream in reverse order (we play the broker), then the
        # forwarder publishes them in order as well.
        pair.write(20, start=60)
        pair.wait_log_covers_source()
        last = max(offset for _s, _h, offset, *_rest in published)
        frames = sorted((offset, frame) for offset, frame in log_frames(pair.log_dir).items() if offset > last)
        with NatsClient(cluster.client_port(0)) as client:
            for i, (offset, (kind, commit_lsn, payload)) in enumerate(reversed(frames)):
                republish(client, pair.flow, identity, (offset, kind, commit_lsn, payload), 2, single=i % 2 == 0)
        forwarder = pair.start_process("forward", "forward")
        pair.wait_stream_holds_log()
        err = pair.apply_until_caught_up()
        pair.assert_target_exact("after duplicated and reordered delivery")
        counts = stream_summary(err)
        if counts.get("duplicates", 0) < 10 or counts.get("holes", 0) < 1:
            raise CaptureFailure(f"the applier did not count the duplicates and the hole: {counts}")
        print(f"duplicated and reordered: {counts}")
        stop(forwarder)
        pair.check_no_crashes()
    print("ok: duplicate_and_reordered_delivery_is_applied_once")


@scenario(seed_rows=(), suite="broker",
          invariants=("an offset delivered again with other content is quarantined (checksum_conflict), never "
                      "applied", "the flow stops there (exit 3); the target keeps what it applied"))
def conflicting_duplicate_is_quarantined():
    with NatsCluster() as cluster, RemotePair("remote-conflict", cluster) as pair:
        forwarder = pair.start_process("forward", "forward")
        pair.write(30)
        pair.wait_log_covers_source()
        pair.wait_stream_holds_log()
        pair.apply_until_caught_up()
        pair.assert_target_exact("before the conflicting copy")
        with NatsClient(cluster.client_port(0)) as client:
            records = client.stream_records(STREAM)
            identity = log_identity_of(records[0][1])
            envelopes = [tuple(r[2:]) for r in records if r[3] == 1]    # (offset, type, commit LSN, payload)
            a, b = envelopes[3], envelopes[7]
            republish(client, pair.flow, identity, a, 9, payload=b[3])     # offset of a, content of b
        result = run_trellara(["apply", "--config", pair.remote, "--until-caught-up"], expect=None, timeout_s=600)
        if result.returncode != 3 or "again with other content" not in result.stderr:
            raise CaptureFailure(f"the conflicting copy of offset {a[0]} was not refused: exit "
                                 f"{result.returncode}: {result.stderr[-2000:]}")
        reasons = pair.target.query("SELECT string_agg(reason, ',') FROM trellara.quarantine")
        if "checksum_conflict" not in (reasons or ""):
            raise CaptureFailure(f"no checksum_conflict quarantine row on the target: {reasons!r}")
        pair.assert_target_exact("after the conflicting copy")
        print(f"conflicting duplicate of offset {a[0]}: quarantined ({reasons}), exit 3")
        # The daemon (its receiver reads the stream in its own thread) refuses one the same way.
        with NatsClient(cluster.client_port(0)) as client:
            c, d = envelopes[4], envelopes[8]
            republish(client, pair.flow, identity, c, 10, payload=d[3], single=True)   # an older forwarder's form
        daemon = pair.start_process("apply", "apply-daemon")
        try:
            daemon.wait(timeout=120)
        except subprocess.TimeoutExpired:
            raise CaptureFailure("the daemon applier did not stop on the conflicting copy of offset "
                                 f"{c[0]} within 120 s: {pair.stderr_of(daemon)[-2000:]}")
        if daemon.returncode != 3 or "again with other content" not in pair.stderr_of(daemon):
            raise CaptureFailure(f"the daemon applier did not refuse the conflicting copy of offset "
                                 f"{c[0]}: exit {daemon.returncode}: {pair.stderr_of(daemon)[-2000:]}")
        conflicts = pair.target.query("SELECT count(*) FROM trellara.quarantine WHERE reason = 'checksum_conflict'")
        if int(conflicts) != 2:
            raise CaptureFailure(f"{conflicts} checksum_conflict quarantine rows on the target, expected 2")
        pair.assert_target_exact("after the daemon refused the second conflicting copy")
        print(f"the daemon refused the conflicting copy of offset {c[0]} too (exit 3)")
        stop(forwarder)
        pair.check_no_crashes()
    print("ok: conflicting_duplicate_is_quarantined")


@scenario(seed_rows=(), suite="broker",
          invariants=("a tail the broker lost, which shows no hole, is published again by the forwarder",
                      "the target equals the source after it"))
def lost_tail_is_republished_by_the_forwarder():
    with NatsCluster() as cluster, RemotePair("remote-tail", cluster) as pair:
        forwarder = pair.start_process("forward", "forward")
        try:
            pair.write(30)
            pair.wait_log_covers_source()
            last_offset = max(log_frames(pair.log_dir))
            def published():
                with NatsClient(cluster.client_port(0)) as client:
                    return max(r[2] for r in client.stream_records(STREAM)) >= last_offset
            wait_for("the forwarder to publish the whole log", published, 180)
            with NatsClient(cluster.client_port(0)) as client:
                # The last two messages (several records each, perhaps); their records are lost.
                tail = sorted(client.stream_messages(STREAM), key=lambda m: int(m[1]["Trellara-Offset"]))[-2:]
                lost = sorted(r[2] for r in client.stream_records(STREAM) if r[0] in {m[0] for m in tail})
                for sequence, _headers, _data in tail:
                    client.delete_message(STREAM, sequence)
            lost = [lost[0], lost[-1]]
            # The forwarder republishes the tail itself; a record the relay logs meanwhile (a
            # progress marker) would instead show the loss as a hole, refilled on request.
            wait_for("the forwarder to publish the lost tail again",
                     lambda: "event=tail_republish" in pair.stderr_of(forwarder)
                     or "event=refill " in pair.stderr_of(forwarder), 120)
            err = pair.apply_until_caught_up()
            pair.assert_target_exact(f"after the broker lost the stream's tail (offsets {lost})")
            how = "tail_republish" if "event=tail_republish" in pair.stderr_of(forwarder) else "refill"
            print(f"lost tail {lost}: published again by {how}; {stream_summary(err)}")
        finally:
            stop(forwarder)
        pair.check_no_crashes()
    print("ok: lost_tail_is_republished_by_the_forwarder")


SHAPES = """
CREATE TABLE sales (id bigint, region text, amount numeric(12,2), at timestamp(3), PRIMARY KEY (id, region))
  PARTITION BY LIST (region);
CREATE TABLE sales_eu PARTITION OF sales FOR VALUES IN ('eu');
CREATE TABLE sales_us PARTITION OF sales FOR VALUES IN ('us');
CREATE TABLE animals (id bigint PRIMARY KEY, name varchar(20), born date);
CREATE TABLE dogs (breed char(8)) INHERITS (animals);
ALTER TABLE dogs ADD PRIMARY KEY (id);
CREATE TABLE readings (id bigint PRIMARY KEY, v numeric(8,3)[], label bit varying(16), ts timestamptz(0), j jsonb);
"""
SHAPES_WORKLOAD = """
INSERT INTO sales SELECT g, CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'us' END, g * 1.255,
  '2026-01-01'::timestamp + g * interval '1.23456 s' FROM generate_series(1, 300) g;
INSERT INTO animals SELECT g, 'animal ' || g, '2020-01-01'::date + g FROM generate_series(1, 100) g;
INSERT INTO dogs SELECT g, 'dog ' || g, '2021-01-01'::date + g, 'breed' || (g % 7) FROM generate_series(101, 200) g;
INSERT INTO readings SELECT g, ARRAY[g * 0.0015, g * 1.00049], (g % 4096)::bit(12)::varbit,
  '2026-02-01 00:00:00.6+00'::timestamptz + g * interval '1.7 s', jsonb_build_object('g', g, 'half', g / 2.0)
  FROM generate_series(1, 200) g;
UPDATE sales SET amount = amount + 0.015 WHERE id % 5 = 0;
UPDATE sales SET region = 'eu' WHERE id % 11 = 1 AND region = 'us';
DELETE FROM sales WHERE id % 7 = 0;
UPDATE animals SET name = name || ' (seen)' WHERE id % 3 = 0;
DELETE FROM animals WHERE id % 13 = 0;
UPDATE readings SET v = v || ARRAY[id * 0.0001], label = label || B'1' WHERE id % 4 = 0;
BEGIN;
UPDATE dogs SET breed = 'mixed' WHERE id % 2 = 0;
INSERT INTO sales VALUES (1000, 'us', 12.345, '2026-03-01 10:00:00.12345');
COMMIT;
"""
SHAPE_TABLES = ("sales_eu", "sales_us", "ONLY animals", "dogs", "readings")


@scenario(seed_rows=(), suite="broker",
          invariants=("partitions, inheritance children and columns with type modifiers arrive exact through the "
                      "broker (FOR ALL TABLES)", "each source transaction committed once"))
def table_shapes_through_the_broker_arrive_exact():
    with NatsCluster() as cluster, RemotePair("remote-shapes", cluster, schema=SHAPES, tables=None) as pair:
        forwarder = pair.start_process("forward", "forward")
        try:
            pair.source.psql(SHAPES_WORKLOAD)
            pair.wait_log_covers_source()
            pair.wait_stream_holds_log()
            pair.apply_until_caught_up()
        finally:
            stop(forwarder)
        pair.assert_same_data(SHAPE_TABLES, "through the broker")
        pair.check_no_crashes()
    print("ok: table_shapes_through_the_broker_arrive_exact")


RECEIVER_POINTS = ("receive.after_append_before_flush", "receive.after_flush_before_hint",
                   "receive.hole_before_refill_ask", "receive.before_position_sent")


@scenario(seed_rows=(), suite="broker", fault_points=RECEIVER_POINTS,
          invariants=("the remote applier killed at any boundary of its replica loses and repeats nothing",
                      "a hole found before the crash is found again and refilled after the restart",
                      "the target equals the source, each transaction committed once"))
def remote_applier_killed_at_each_receiver_boundary_converges():
    with NatsCluster() as cluster, RemotePair("remote-kill-points", cluster) as pair:
        forwarder = pair.start_process("forward", "forward")
        written = 0
        try:
            for point in RECEIVER_POINTS:
                pair.write(40, start=written)
                written += 40
                pair.wait_log_covers_source()
                pair.wait_stream_holds_log()
                if point == "receive.hole_before_refill_ask":
                    # A later message (the 40 may be in one): the loss below shows as a hole.
                    pair.write(5, start=written)
                    written += 5
                    pair.wait_log_covers_source()
                    pair.wait_stream_holds_log()
                    # The broker loses a message the applier has not read yet: the restarted applier
                    # must find that hole again (its read position was not kept past it).
                    lose(cluster, [sorted(stream_transactions(cluster))[-7]], keep_last=True)
                crashing = pair.start_process("apply", f"apply-{point}",
                                              env=dict(os.environ, TRELLARA_FAULTS=f"{point}:1:crash"))
                try:
                    crashing.communicate(timeout=180)
                except subprocess.TimeoutExpired:
                    crashing.kill()                   # our own child, by its Popen handle
                    crashing.communicate(timeout=60)
                    raise CaptureFailure(f"the remote applier did not reach {point} within 180 s: "
                                         f"{pair.stderr_of(crashing)[-2000:]}")
                err = pair.stderr_of(crashing)
                if crashing.returncode != -9 or not record_faults_from_output(err).get(point):
                    raise CaptureFailure(f"the remote applier did not die at {point}: exit {crashing.returncode}: "
                                         f"{err[-2000:]}")
                print(f"{point}: the remote applier died there (SIGKILL)")
            err = pair.apply_until_caught_up()
            pair.assert_target_exact("after the remote applier was killed at each receiver boundary")
            counts = stream_summary(err)
            print(f"restarted applier: {counts}")
        finally:
            stop(forwarder)
        pair.check_no_crashes()
    print("ok: remote_applier_killed_at_each_receiver_boundary_converges")


if __name__ == "__main__":
    run_scenarios([remote_applier_applies_through_the_stream_exactly_once,
                   lost_message_is_a_hole_refilled_by_the_forwarder,
                   lost_message_defect_hole_check_skipped_is_caught,
                   lost_tail_is_republished_by_the_forwarder,
                   the_source_log_is_kept_until_the_remote_applier_reports,
                   retention_defect_by_forwarder_is_caught,
                   quorum_loss_under_remote_apply_resumes_exactly,
                   remote_applier_killed_at_each_receiver_boundary_converges,
                   table_shapes_through_the_broker_arrive_exact,
                   duplicate_and_reordered_delivery_is_applied_once,
                   conflicting_duplicate_is_quarantined])
