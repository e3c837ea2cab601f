#!/usr/bin/env python3
"""Integration: a remote applier (reading the flow through the NATS JetStream stream) makes the
same promotion check as one reading the local log (docs/broker.md "After a promotion").

The forwarder sends the log's TIMELINE (written by the relay when it started the log) with every
message (header Trellara-Timeline); the remote applier's receiver writes it into its replica as
TIMELINE before appending the first record that came with it, and the applier checks the target
against it (core DecideTimelineContinuity) before applying anything read after it.

  remote_applier_on_a_target_ahead_of_the_promoted_server_fails_closed
      A primary, a streaming standby and a target; 20 transactions the standby receives, then the
      standby is cut off and 15 more commit on the primary only. `trellara forward` publishes the
      old log, a remote applier applies it through the stream (its replica records timeline 1; the
      target records applying from timeline 1). The primary dies, the standby is promoted (timeline
      2, a new log), 5 transactions commit there. The stream is deleted (it holds the old log, and
      the forwarder refuses a stream whose last record is another log's), the new log is published,
      and a remote applier on a new replica directory exits 3 (blocked) naming the 15 transactions
      the promoted server never had, before changing the target; its replica holds the new log's
      timeline ("2 branched_from 1 at ..."), `trellara.apply_status` says blocked.
  negative_control_remote_timeline_ignored_is_caught
      With defect.receive_timeline_ignored (the replica never records the timeline) the last remote
      applier does not fail closed: the scenario's check catches it.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from capture_support import (CaptureFailure, assert_no_backend_crashes, checks_fail_under_defect,  # noqa: E402
                             run_scenarios, scenario, write_flow_config)
from failover_support import Failover  # noqa: E402
from flow_pair import run_trellara, table_digest  # noqa: E402
from harness.nats_client import NatsClient  # noqa: E402
from harness.nats_cluster import NatsCluster  # noqa: E402

STREAM = "TRELLARA_APP"


def transport(nats):
    return (f'[transport]\nkind = "nats"\nservers = "{nats.servers}"\nstream = "{STREAM}"\n'
            'applier = "eu"\nremote_appliers = "eu"\n')


def read_timeline(replica):
    path = os.path.join(replica, "TIMELINE")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return f.read().strip()


def remote_target_ahead(name, env=None, outputs=None):
    """The scenario; `env` goes to the last remote applier only (a negative control's defect)."""
    with NatsCluster() as nats, Failover(name) as fo:
        extra = transport(nats)
        root = fo.link_root

        def forward(source, label):
            config = write_flow_config(os.path.join(root, f"forward-{label}.toml"), "app", fo.log_dir,
                                       fo.target.conninfo(), source_conninfo=source.conninfo(), extra=extra)
            run_trellara(["forward", "--config", config, "--until-caught-up"], what=f"trellara forward ({label})")

        def remote_config(label):
            replica = os.path.join(root, f"replica-{label}")
            return write_flow_config(os.path.join(root, f"remote-{label}.toml"), "app", replica, fo.target.conninfo(),
                                     extra=extra), replica

        def apply_old_log():
            forward(fo.primary, "old")
            old_remote, old_replica = remote_config("old")
            run_trellara(["apply", "--config", old_remote, "--until-caught-up"], what="remote trellara apply (old log)")
            if read_timeline(old_replica) != "1":
                raise CaptureFailure(f"the replica of the old log holds TIMELINE {read_timeline(old_replica)!r}, not 1")
            recorded = fo.target.query("SELECT string_agg(timeline::text, ',') FROM trellara.source_timelines "
                                       "WHERE flow = 'app'")
            print(f"old log applied through the stream: replica TIMELINE 1, target's source_timelines {recorded!r}, "
                  f"{fo.target.query('SELECT count(*) FROM t')} rows")

        fo.promote_a_cut_off_standby(apply_old_log)
        with NatsClient(nats.client_port(0)) as client:
            client.api(f"$JS.API.STREAM.DELETE.{STREAM}")
        forward(fo.standby, "new")
        new_remote, new_replica = remote_config("new")
        before = table_digest(fo.target, "t")
        result = run_trellara(["apply", "--config", new_remote, "--until-caught-up"], expect=None, env=env,
                              what="remote trellara apply (the promoted server's log)")
        if outputs is not None:
            outputs.append(result.stderr)
        print(f"remote apply of the new log: exit {result.returncode}: {result.stderr.strip()[-600:]}")
        if result.returncode != 3:
            raise CaptureFailure(f"the remote applier exited {result.returncode}, not 3 (blocked): it applied the "
                                 f"promoted server's log onto a target ahead of it: {result.stderr[-1500:]}")
        if "15 transaction(s)" not in result.stderr or "never had them" not in result.stderr:
            raise CaptureFailure(f"the remote applier did not fail closed naming the 15 transactions: "
                                 f"{result.stderr[-1500:]}")
        if table_digest(fo.target, "t") != before:
            raise CaptureFailure("the remote applier changed the target before failing closed")
        timeline = read_timeline(new_replica) or ""
        if not timeline.startswith("2") or "branched_from 1 at" not in timeline:
            raise CaptureFailure(f"the new replica holds TIMELINE {timeline!r}, not timeline 2 branched from 1")
        state = fo.target.query("SELECT state FROM trellara.apply_status WHERE flow = 'app'")
        if state != "blocked":
            raise CaptureFailure(f"trellara.apply_status says {state!r}, not blocked")
        print("failed closed: " + [line for line in result.stderr.splitlines() if "never had them" in line][0][:300])
        assert_no_backend_crashes(fo.target)


@scenario(suite="failover",
          invariants=("a remote applier's replica records the source timeline of the log it holds",
                      "on a promoted server's log, a remote applier fails closed (exit 3, blocked) naming the "
                      "transactions the promoted server never had, before changing the target"))
def remote_applier_on_a_target_ahead_of_the_promoted_server_fails_closed():
    remote_target_ahead("broker-failover")
    print("ok: remote_applier_on_a_target_ahead_of_the_promoted_server_fails_closed")


@scenario(suite="failover", defect="receive_timeline_ignored",
          pairs_with="remote_applier_on_a_target_ahead_of_the_promoted_server_fails_closed",
          invariants=("the scenario's check fails when the replica does not record the source timeline",))
def negative_control_remote_timeline_ignored_is_caught():
    caught = checks_fail_under_defect("defect.receive_timeline_ignored", "fail-closed",
                                      lambda env, outputs: remote_target_ahead("broker-failover-defect", env, outputs))
    print(f"negative control: caught: {str(caught)[:300]}")
    print("ok: negative_control_remote_timeline_ignored_is_caught")


if __name__ == "__main__":
    run_scenarios((remote_applier_on_a_target_ahead_of_the_promoted_server_fails_closed,
                   negative_control_remote_timeline_ignored_is_caught))
