#!/usr/bin/env python3
"""`make demo-cluster`'s script (scripts/demo-cluster, docs/broker.md) runs to its end on a healthy
build: a flow through a 3-node JetStream cluster with trellara forward and a remote trellara apply,
a snapshot through the remote applier, quorum loss (slot held, alert and /readyz), a lost message
refilled, and source and target equal. The script compares the tables itself and exits non-zero
when they differ; here its exit and its story are checked."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import CaptureFailure, run_scenarios, scenario  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@scenario(suite="broker", invariants=("make demo-cluster's story runs to its end and source equals target",))
def demo_cluster_runs_to_its_end():
    result = subprocess.run([os.path.join(ROOT, "scripts", "demo-cluster")], capture_output=True, text=True,
                            timeout=900, cwd=ROOT)
    if result.returncode != 0 or "demo-cluster: done" not in result.stdout:
        raise CaptureFailure(f"scripts/demo-cluster exited {result.returncode}: {result.stdout[-2500:]} "
                             f"{result.stderr[-2500:]}")
    for expected in ("source feedback is withheld", "event=hole", "event=refilled", "broker_quorum_unavailable "
                     "firing=True"):
        if expected not in result.stdout:
            raise CaptureFailure(f"scripts/demo-cluster did not show {expected!r}: {result.stdout[-2500:]}")
    print("ok: demo_cluster_runs_to_its_end")


if __name__ == "__main__":
    run_scenarios([demo_cluster_runs_to_its_end])
