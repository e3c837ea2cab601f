#!/usr/bin/env python3
"""The broker hop's first half (docs/broker.md): `trellara forward` publishes a flow's local log to
a NATS JetStream stream on a real 3-node cluster (Debian's nats-server, R3 file storage).

What every scenario checks, with an independent reader (tests/harness/nats_client.py, not the C
client the command uses): the stream holds each record of the log exactly once, in offset order,
byte for byte the frame's payload (so its checksum is intact), named by flow, log identity and
offset. Scenarios:
  - forward_publishes_every_record_once_in_order: a workload, then forward --until-caught-up;
  - forwarder_kill9_resumes_after_the_streams_last_record: the forwarder killed at random moments
    while the source writes; each restart resumes from the stream, never from its own progress;
  - quorum_loss_holds_publishing_and_resumes: two of three nodes killed while the forwarder runs
    and the source writes; publishing waits (retries counted, state broker_quorum_unavailable),
    nothing is skipped, and everything is published once the nodes return.
"""
import json
import os
import random
import signal
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import TRELLARA_BIN, CaptureFailure, lsn_to_int, run_scenarios, scenario, wait_for  # noqa: E402
from flow_pair import FlowPair, run_trellara  # noqa: E402
from harness.cluster import PG_BIN  # noqa: E402
from harness.nats_client import NatsClient, message_name, message_records  # noqa: E402
from harness.nats_cluster import NatsCluster  # noqa: E402

SCHEMA = "CREATE TABLE items (id bigint PRIMARY KEY, note text, amount numeric);"
STREAM = "TRELLARA_APP"
FRAME_HEADER = struct.Struct("<IBBHIIQQQ")   # core/include/trellara/log/format.h
FRAME_MAGIC = 0x464C5254
KILL_SEED = int(os.environ.get("TRELLARA_KILL_SEED", "4242"))


def log_frames(log_dir):
    """Every frame of the log's segments, parsed here (not through trellara): {offset: (type,
    commit_lsn, payload)}."""
    frames = {}
    for name in sorted(os.listdir(log_dir)):
        if not (name.startswith("segment-") and name.endswith(".log")):
            continue
        with open(os.path.join(log_dir, name), "rb") as segment:
            data = segment.read()
        position = 0
        while position + FRAME_HEADER.size <= len(data):
            magic, _version, kind, _flags, size, _crc, offset, commit_lsn, _durable = FRAME_HEADER.unpack_from(data, position)
            if magic != FRAME_MAGIC or position + FRAME_HEADER.size + size > len(data):
                break
            start = position + FRAME_HEADER.size
            frames[offset] = (kind, commit_lsn, data[start:start + size])
            position = start + size
    return frames


class BrokerPair(FlowPair):
    """A flow whose configuration names the cluster's stream ([transport] kind = "nats")."""

    def __init__(self, name, cluster, schema=SCHEMA, tables=("items",), source_settings=None,
                 whole_log_consumer=True):
        self.cluster = cluster
        super().__init__(name, schema, tables=tables, source_settings=source_settings,
                         whole_log_consumer=whole_log_consumer)

    def transport(self):
        """The [transport] table of every configuration this pair writes."""
        return f'[transport]\nkind = "nats"\nservers = "{self.cluster.servers}"\nstream = "{STREAM}"\n'

    def write_config(self, path=None, target_conninfo=None, apply_settings=None, with_source=None, extra="",
                     log_dir=None):
        return super().write_config(path, target_conninfo, apply_settings, with_source, self.transport() + extra,
                                    log_dir)

    @staticmethod
    def statements(transactions, rows_each=3, start=0):
        lines = []
        for t in range(start, start + transactions):
            values = ", ".join(f"({t * 100 + r}, 'note {t}-{r}', {t}.{r})" for r in range(rows_each))
            lines.append(f"BEGIN; INSERT INTO items VALUES {values}; UPDATE items SET amount = amount + 1 "
                         f"WHERE id = {t * 100}; COMMIT;")
        return "\n".join(lines) + "\n"

    def write(self, transactions, rows_each=3, start=0):
        self.source.psql(self.statements(transactions, rows_each, start))

    def write_in_background(self, transactions, start=0):
        """The same workload as write(), by our child psql, while the test does something else."""
        script = os.path.join(self.work.name, f"workload-{start}.sql")
        with open(script, "w") as out:
            out.write(self.statements(transactions, start=start))
        return subprocess.Popen([os.path.join(PG_BIN, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h",
                                 self.source.socket_dir, "-p", str(self.source.port), "-U", "postgres", "-d",
                                 "postgres", "-f", script], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def forward(self, *extra, timeout_s=300):
        result = run_trellara(["forward", "--config", self.config, "--format", "json", *extra], timeout_s=timeout_s,
                              what="trellara forward")
        return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr

    def start_forwarder(self, stderr_path=None):
        """The forwarder as our child, following the log; its stderr into `stderr_path` when given
        (read while it runs), else a pipe."""
        err = open(stderr_path, "w") if stderr_path else subprocess.PIPE
        try:
            return subprocess.Popen([TRELLARA_BIN, "forward", "--config", self.config, "--format", "json"],
                                    stdout=subprocess.PIPE, stderr=err, text=True)
        finally:
            if stderr_path:
                err.close()


def assert_stream_is_the_log(pair, label, end_offset):
    """The stream holds the log below `end_offset` (what the forwarder said it published; the relay
    may have appended progress markers since): each offset once, in order, the frame's payload
    byte for byte, and nothing else."""
    frames = {offset: frame for offset, frame in log_frames(pair.log_dir).items() if offset < end_offset}
    with NatsClient(pair.cluster.client_port(0)) as client:
        messages = client.stream_messages(STREAM)
    identity = None
    offsets = []
    for seq, headers, data in messages:
        msg_id = headers.get("Nats-Msg-Id", "")
        try:
            flow, log_identity, offset, count = message_name(msg_id)
        except ValueError as error:
            raise CaptureFailure(f"{label}: stream message {seq} is named {msg_id!r}") from error
        if flow != pair.flow or headers.get("Trellara-Offset") != str(offset) or \
                (count > 1 and headers.get("Trellara-Count") != str(count)):
            raise CaptureFailure(f"{label}: stream message {seq} is named {msg_id!r} with headers {headers}")
        identity = identity or log_identity
        if log_identity != identity:
            raise CaptureFailure(f"{label}: stream message {seq} names log {log_identity}, earlier ones {identity}")
        try:   # several records per message (docs/broker.md "Message format"), named by the first
            records = message_records(headers, data)
        except ValueError as error:
            raise CaptureFailure(f"{label}: stream message {seq} ({msg_id!r}) is not readable: {error}") from error
        for offset, kind_held, lsn_held, data_held in records:
            if offset not in frames:
                raise CaptureFailure(f"{label}: stream message {seq} holds offset {offset}, which the log does not")
            kind, commit_lsn, payload = frames[offset]
            if data_held != payload or kind_held != kind or lsn_held != commit_lsn:
                raise CaptureFailure(f"{label}: stream message {seq} (offset {offset}) differs from the log's frame "
                                     f"({len(data_held)} bytes against {len(payload)}, type {kind_held} against "
                                     f"{kind}, commit LSN {lsn_held:X} against {commit_lsn:X})")
            offsets.append(offset)
    expected = sorted(frames)
    if offsets != expected:
        duplicates = len(offsets) - len(set(offsets))
        missing = sorted(set(expected) - set(offsets))[:10]
        raise CaptureFailure(f"{label}: the stream holds {len(offsets)} records ({duplicates} repeated, missing "
                             f"{missing}...), the log {len(expected)} below offset {end_offset} (offsets "
                             f"{expected[:1]}..{expected[-1:]})")
    print(f"{label}: the stream holds the log's {len(offsets)} records once each, in order, byte for byte")
    return len(offsets)


def stop_forwarder(process, stderr_path=None):
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)   # our own child, by its Popen handle
    out, err = process.communicate(timeout=120)
    if stderr_path:
        with open(stderr_path) as stderr_file:
            err = stderr_file.read()
    if process.returncode != 0:
        raise CaptureFailure(f"trellara forward exited {process.returncode} after SIGTERM: {err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1]), err


@scenario(seed_rows=(), suite="broker",
          invariants=("each log record published once, in offset order", "the payload byte for byte (checksum intact)",
                      "named by flow, log identity and offset"))
def forward_publishes_every_record_once_in_order():
    with NatsCluster() as cluster, BrokerPair("broker-forward", cluster) as pair:
        pair.write(200)
        pair.wait_log_covers_source()
        summary, _ = pair.forward("--until-caught-up")
        published = assert_stream_is_the_log(pair, "after forward --until-caught-up", summary["next_offset"])
        if summary["published"] != published or summary["already_held"] != 0:
            raise CaptureFailure(f"forward summary {summary} does not match the {published} records in the stream")
        # A second run publishes nothing again: it resumes after the stream's last record (and
        # publishes only what the relay appended since, progress markers).
        again, _ = pair.forward("--until-caught-up")
        if again["published"] != again["next_offset"] - summary["next_offset"] or again["already_held"] != 0:
            raise CaptureFailure(f"a second forward run published again: {again} after {summary}")
        assert_stream_is_the_log(pair, "after a second forward run", again["next_offset"])
        pair.check_no_crashes()
    print("ok: forward_publishes_every_record_once_in_order")


@scenario(seed_rows=(), suite="broker",
          invariants=("a killed forwarder resumes after the stream's last record",
                      "no record lost or repeated in the stream across kills"))
def forwarder_kill9_resumes_after_the_streams_last_record():
    rng = random.Random(KILL_SEED)
    kills = landed = 0
    with NatsCluster() as cluster, BrokerPair("broker-kill9", cluster) as pair:
        written = 0
        for _round in range(6):
            forwarder = pair.start_forwarder()
            # The source writes while the forwarder publishes; the kill comes at a random moment of
            # that (a moment to kill at, not a wait for a condition).
            writer = pair.write_in_background(300, start=written)
            written += 300
            time.sleep(rng.uniform(0.05, 0.8))
            if forwarder.poll() is not None:
                raise CaptureFailure(f"the forwarder ended on its own: {forwarder.communicate()[1][-2000:]}")
            forwarder.kill()                      # our own child: kill -9 by its Popen handle
            forwarder.communicate(timeout=60)
            kills += 1
            with NatsClient(cluster.client_port(0)) as client:
                in_stream = len(client.stream_records(STREAM))   # records (several per message)
            if in_stream < len(log_frames(pair.log_dir)):
                landed += 1                        # killed with records still to publish
            if writer.wait(timeout=300) != 0:
                raise CaptureFailure(f"the source workload failed: {writer.stderr.read()[-2000:]}")
        pair.wait_log_covers_source()
        summary, _ = pair.forward("--until-caught-up")
        assert_stream_is_the_log(pair, f"after {kills} kill -9 of the forwarder", summary["next_offset"])
        print(f"kill -9: {kills} kills (seed {KILL_SEED}), {landed} with records still to publish; the last run "
              f"published {summary['published']} and found {summary['already_held']} already held")
        if landed == 0:
            raise CaptureFailure("no kill landed while the forwarder had records to publish: the scenario proved nothing")
        pair.check_no_crashes()
    print("ok: forwarder_kill9_resumes_after_the_streams_last_record")


@scenario(seed_rows=(), suite="broker",
          invariants=("publishing waits while the broker has no quorum (retries counted, state reported)",
                      "nothing skipped: every record published once after quorum returns"))
def quorum_loss_holds_publishing_and_resumes():
    with NatsCluster() as cluster, BrokerPair("broker-quorum", cluster) as pair:
        stderr_path = os.path.join(pair.work.name, "forward.stderr")
        forwarder = pair.start_forwarder(stderr_path)

        def forwarder_said(text):
            with open(stderr_path) as stderr_file:
                return text in stderr_file.read()
        pair.write(50)
        pair.wait_log_covers_source()
        with NatsClient(cluster.client_port(0)) as client:
            wait_for("the forwarder to publish the first records",
                     lambda: len(client.stream_records(STREAM)) >= 50, 120)
        cluster.kill(1)
        cluster.kill(2)
        pair.write(50, start=50)        # captured into the local log while the broker has no quorum
        pair.wait_log_covers_source()
        wait_for("the forwarder to report that the broker has no quorum",
                 lambda: forwarder_said("state=broker_quorum_unavailable"), 180)
        cluster.start_node(1)
        cluster.start_node(2)
        cluster.wait_ready()
        pair.wait_log_covers_source()
        with NatsClient(cluster.client_port(0)) as client:
            wait_for("the forwarder to publish everything after quorum returned",
                     lambda: len(client.stream_records(STREAM)) >= len(log_frames(pair.log_dir)), 180)
        summary, err = stop_forwarder(forwarder, stderr_path)
        if summary["publish_retries"] == 0 or "state=broker_quorum_unavailable" not in err:
            raise CaptureFailure(f"the forwarder never waited for quorum: {summary}; stderr {err[-2000:]}")
        assert_stream_is_the_log(pair, "after two of three nodes were down", summary["next_offset"])
        print(f"quorum loss: {summary['publish_retries']} publish retries, then {summary['published']} published")
        pair.check_no_crashes()
    print("ok: quorum_loss_holds_publishing_and_resumes")


if __name__ == "__main__":
    run_scenarios([forward_publishes_every_record_once_in_order, forwarder_kill9_resumes_after_the_streams_last_record,
                   quorum_loss_holds_publishing_and_resumes])
