#!/usr/bin/env python3
"""`make demo-lake`'s script (scripts/demo-lake, docs/lake.md) runs to its end: an epoch published
with a gap, the late store completing it, the lake read by independent readers and replayed per
store, and `trellara lake fanin verify` agreeing."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capture_support import BUILD_DIR, CaptureFailure, run_scenarios, scenario  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@scenario(suite="lake", invariants=("make demo-lake's story runs to its end: published with a gap, then complete, "
                                    "the lake equal to every store, verify agrees",))
def demo_lake_runs_to_its_end():
    result = subprocess.run([os.path.join(ROOT, "scripts", "demo-lake")], capture_output=True, text=True,
                            timeout=900, env=dict(os.environ, TRELLARA_BUILD_DIR=BUILD_DIR))
    if result.returncode != 0 or "demo-lake: done" not in result.stdout:
        raise CaptureFailure(f"scripts/demo-lake exited {result.returncode}: {result.stdout[-2500:]} "
                             f"{result.stderr[-2500:]}")
    if "complete_with_gaps" not in result.stdout or "missing store-04" not in result.stdout:
        raise CaptureFailure(f"scripts/demo-lake did not publish an epoch with a gap: {result.stdout[-2500:]}")
    print(result.stdout[-1200:])
    print("ok: demo_lake_runs_to_its_end")


if __name__ == "__main__":
    run_scenarios([demo_lake_runs_to_its_end])
