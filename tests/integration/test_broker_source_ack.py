#!/usr/bin/env python3
"""Source acknowledgement through the broker (docs/broker.md "Source acknowledgement"): with
`trellara.set_source_ack(flow, 'broker_quorum')` the relay confirms the source's slot only up to
what `trellara forward` has seen the broker's quorum acknowledge, on a real 3-node JetStream
cluster. The invariant every scenario samples: the slot's confirmed_flush_lsn never passes the
commit LSN of the last completing record (transaction or progress marker) the stream holds — or
where the slot stood when broker_quorum took effect. Scenarios:
  - source_feedback_is_withheld_during_quorum_loss: two of three nodes killed while the source
    writes: the slot stays, `trellara status --view alerts` fires broker_quorum_unavailable,
    the forwarder's /readyz answers 503 and its retries count; when quorum returns the slot
    advances past everything and the remote target is exact. Paired with
    defect.forward_progress_before_ack (the forwarder records a record before the broker
    acknowledged it), which the same checks catch;
  - forwarder_crash_around_publish_keeps_the_slot_behind_the_broker: the forwarder crashes (fault
    points forward.before_publish and forward.after_ack_before_progress) with records still to
    publish; the slot stays behind the stream; a restart publishes every record once, the slot
    advances, the remote target is exact.
The pair is test_broker_remote_apply.RemotePair (a FlowPair subclass) with source_ack = broker_quorum.
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import (CaptureFailure, checks_fail_under_defect, lsn_to_int, record_faults_from_output,  # noqa: E402
                             run_scenarios, scenario, wait_for)
from flow_pair import run_trellara  # noqa: E402
from harness.nats_client import NatsClient  # noqa: E402
from harness.nats_cluster import NatsCluster  # noqa: E402
from test_broker_forward import STREAM, assert_stream_is_the_log, log_frames  # noqa: E402
from test_broker_remote_apply import RemotePair, consumer_offset, http_get, stop  # noqa: E402

COMPLETING = {"1", "4", "5"}   # Envelope, CommitMarker, progress marker (relay_progress.h)
HOLD_S = 5.0                   # how long the invariant is sampled while nothing may move


class AckPair(RemotePair):
    """A remote pair whose flow confirms the slot only after the broker's quorum acknowledged."""

    def ready(self):
        super().ready()
        self.source.psql("SELECT trellara.set_source_ack('app', 'broker_quorum');")
        self.source.psql("SELECT trellara.stop_flow('app');")
        self.source.psql("SELECT trellara.start_flow('app');")
        wait_for("the relay to run again with source_ack = broker_quorum",
                 lambda: self.source.query("SELECT state FROM trellara.status() WHERE flow = 'app'") == "running", 120)
        self.baseline = self.slot_confirmed()

    def slot_confirmed(self):
        return lsn_to_int(self.source.query("SELECT confirmed_flush_lsn FROM pg_replication_slots "
                                            "WHERE slot_name = 'trellara_app'"))

    def stream_acknowledged_lsn(self):
        """The commit LSN of the last completing record the stream holds (independent reader)."""
        with NatsClient(self.cluster.client_port(0)) as client:
            lsns = [lsn for _seq, _headers, _offset, kind, lsn, _payload in client.stream_records(STREAM)
                    if str(kind) in COMPLETING]
        return max(lsns, default=0)

    def last_logged_lsn(self):
        return max((lsn for _offset, (kind, lsn, _payload) in log_frames(self.log_dir).items() if kind in (1, 4)),
                   default=0)

    def assert_slot_behind(self, bound, label, hold_s=HOLD_S):
        """Samples the slot for `hold_s` seconds: it must never pass max(baseline, bound)."""
        limit = max(self.baseline, bound)
        until = time.monotonic() + hold_s
        while True:
            confirmed = self.slot_confirmed()
            if confirmed > limit:
                raise CaptureFailure(f"{label}: the slot is confirmed at {confirmed:X}, past {limit:X}, the last "
                                     f"record the broker acknowledged (or the slot when broker_quorum began)")
            if time.monotonic() >= until:
                return confirmed
            time.sleep(0.1)


def quorum_loss_run(pair, env=None, outputs=None):
    cluster = pair.cluster
    forwarder = pair.start_process("forward", "forward", env=env)
    try:
        pair.write(40)
        pair.wait_log_covers_source()
        first = pair.last_logged_lsn()
        wait_for("the slot to follow what the broker acknowledged",
                 lambda: pair.stream_acknowledged_lsn() >= first and pair.slot_confirmed() >= first, 120)
        acknowledged = pair.stream_acknowledged_lsn()
        cluster.kill(1)
        cluster.kill(2)
        pair.write(40, start=40)
        pair.wait_log_covers_source()
        wait_for("the forwarder to report that the broker has no quorum",
                 lambda: "state=broker_quorum_unavailable" in pair.stderr_of(forwarder), 180)
        held = pair.assert_slot_behind(acknowledged, "during quorum loss")
        if pair.last_logged_lsn() <= held:
            raise RuntimeError("harness failure: the local log holds nothing past the slot during the quorum loss")
        alerts = run_trellara(["status", "--config", pair.config, "--view", "alerts", "--format", "json"], expect=None,
                              timeout_s=60)
        fired = [a for a in json.loads(alerts.stdout).get("alerts", []) if a["name"] == "broker_quorum_unavailable"]
        if not fired or not fired[0]["firing"]:
            raise CaptureFailure(f"status --view alerts does not fire broker_quorum_unavailable: {alerts.stdout[-1500:]}")
        wait_for("the forwarder's /readyz to answer 503",
                 lambda: http_get(pair.forward_port, "/readyz") == (503, "broker_quorum_unavailable\n"), 60)
        cluster.start_node(1)
        cluster.start_node(2)
        cluster.wait_ready()
        last = pair.last_logged_lsn()
        try:
            wait_for("the slot to advance past everything once quorum returned",
                     lambda: pair.slot_confirmed() >= last, 180)
        except CaptureFailure as failure:
            raise CaptureFailure(f"{failure}: the slot is at {pair.slot_confirmed():X}, the log's last transaction "
                                 f"at {last:X}, the stream holds through {pair.stream_acknowledged_lsn():X}; "
                                 f"forwarder: {pair.stderr_of(forwarder)[-1500:]}") from None
        summary = json.loads(stop(forwarder).strip().splitlines()[-1])
        if summary["publish_retries"] == 0:
            raise CaptureFailure(f"the forwarder counted no publish retry during the quorum loss: {summary}")
        pair.apply_until_caught_up(env=env, outputs=outputs)
        pair.assert_target_exact("after the quorum loss")
        return held, acknowledged, summary
    finally:
        if forwarder.poll() is None:
            forwarder.terminate()   # SIGTERM: it exits normally and says which fault points fired
            try:
                forwarder.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                forwarder.kill()
                forwarder.communicate(timeout=60)
        if outputs is not None:
            outputs.append(pair.stderr_of(forwarder))


@scenario(seed_rows=("qualification_broker_outage_quorum_loss", "broker_publish_failure"), suite="broker",
          invariants=("source feedback is withheld while the broker has no quorum",
                      "publish retries counted, status alerts and /readyz report broker_quorum_unavailable",
                      "the slot advances once quorum returns; the remote target is exact"))
def source_feedback_is_withheld_during_quorum_loss():
    with NatsCluster() as cluster, AckPair("ack-quorum", cluster) as pair:
        held, acknowledged, summary = quorum_loss_run(pair)
        print(f"quorum loss: the slot stayed at {held:X} (the broker held up to {acknowledged:X}) for {HOLD_S}s; "
              f"{summary['publish_retries']} publish retries; then it advanced past everything")
        pair.check_no_crashes()
    print("ok: source_feedback_is_withheld_during_quorum_loss")


@scenario(suite="broker", defect="defect.forward_progress_before_ack",
          pairs_with="source_feedback_is_withheld_during_quorum_loss",
          invariants=("a forwarder recording progress before the broker's acknowledgement is caught"))
def source_feedback_defect_progress_before_ack_is_caught():
    with NatsCluster() as cluster, AckPair("ack-quorum-defect", cluster) as pair:
        caught = checks_fail_under_defect("defect.forward_progress_before_ack", "source-ack",
                                          lambda env, outputs: quorum_loss_run(pair, env, outputs))
        print(f"caught: {str(caught)[:300]}")
    print("ok: source_feedback_defect_progress_before_ack_is_caught")


@scenario(seed_rows=("relay_before_broker_publish", "relay_after_broker_publish_before_source_feedback"),
          suite="broker", fault_points=("forward.before_publish", "forward.after_ack_before_progress"),
          invariants=("a forwarder crash before publishing or before recording progress never lets the slot "
                      "pass what the broker holds",
                      "the restarted forwarder publishes every record once; the remote target is exact"))
def forwarder_crash_around_publish_keeps_the_slot_behind_the_broker():
    with NatsCluster() as cluster, AckPair("ack-crash", cluster) as pair:
        written = 0
        for point in ("forward.before_publish", "forward.after_ack_before_progress"):
            pair.write(60, start=written)
            written += 60
            pair.wait_log_covers_source()
            crashing = pair.start_process("forward", "forward", env=dict(os.environ, TRELLARA_FAULTS=f"{point}:25:crash"))
            crashing.communicate(timeout=300)
            err = pair.stderr_of(crashing)
            if crashing.returncode == 0 or not record_faults_from_output(err).get(point):
                raise CaptureFailure(f"the forwarder did not crash at {point}: exit {crashing.returncode}: {err[-1500:]}")
            acknowledged = pair.stream_acknowledged_lsn()
            if point == "forward.before_publish" and acknowledged >= pair.last_logged_lsn():
                raise RuntimeError(f"harness failure: the crash at {point} left nothing unpublished")
            if point == "forward.after_ack_before_progress":
                with NatsClient(cluster.client_port(0)) as client:
                    in_stream = max(r[2] for r in client.stream_records(STREAM)) + 1
                recorded = consumer_offset(pair.log_dir, "forwarder")
                if recorded >= in_stream:
                    raise RuntimeError(f"harness failure: the crash at {point} left the forwarder's progress "
                                       f"({recorded}) at what the stream holds ({in_stream})")
            held = pair.assert_slot_behind(acknowledged, f"after a crash at {point}")
            summary, _ = pair.forward("--until-caught-up")
            assert_stream_is_the_log(pair, f"after a crash at {point} and a restart", summary["next_offset"])
            last = pair.last_logged_lsn()
            wait_for("the slot to advance past what the restarted forwarder published",
                     lambda: pair.slot_confirmed() >= last, 120)
            print(f"{point}: the slot stayed at {held:X} behind the broker's {acknowledged:X}; after the restart "
                  f"{summary['published']} published, {summary['already_held']} already held")
        pair.apply_until_caught_up()
        pair.assert_target_exact("after forwarder crashes around publish")
        pair.check_no_crashes()
    print("ok: forwarder_crash_around_publish_keeps_the_slot_behind_the_broker")


if __name__ == "__main__":
    run_scenarios([source_feedback_is_withheld_during_quorum_loss,
                   source_feedback_defect_progress_before_ack_is_caught,
                   forwarder_crash_around_publish_keeps_the_slot_behind_the_broker])
