#!/usr/bin/env python3
"""bench/soak/soak_window.py — a long `trellara soak` window on throwaway clusters (docs/soak.md).

Starts a source (trellara preloaded, server defaults otherwise: logical_decoding_work_mem 64MB,
trellara.relay_decoding_work_mem at its default) and an empty target, creates a FOR ALL TABLES
flow, runs

    trellara soak --config F --duration D --run-applier --memory-limit-mib 64 --pause 5s --format json

and writes soak's JSON summary to --output (default bench/soak/results/soak-<duration>.json).
With --evidence-dir (`make soak` passes evidence/) it also appends one result line to
<dir>/soak-<UTC time>.jsonl — kind "soak", passed or failed, the measured duration, the revision
and when it finished — which `trellara chaos report` reads for the rows a 24-hour qualification
run proves (docs/correctness.md "Evidence of long runs"). Commit that file, then regenerate the
report. Everything it starts is stopped by PID (the harness), also on failure.

    python3 bench/soak/soak_window.py --duration 1h [--rows-per-transaction 200000] [--pause 5s]
    make soak SOAK_DURATION=24h
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "integration"))

from capture_support import TRELLARA_BIN, setup_flow, write_flow_config  # noqa: E402
from harness import Cluster  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", default="1h")
    parser.add_argument("--rows-per-transaction", default="200000")
    parser.add_argument("--memory-limit-mib", default="64")
    parser.add_argument("--pause", default="5s", help="between workload iterations (a sustained rate)")
    parser.add_argument("--output")
    parser.add_argument("--evidence-dir", help="append the run's result to <dir>/soak-<time>.jsonl (make soak)")
    args = parser.parse_args()
    output = args.output or os.path.join(HERE, "results", f"soak-{args.duration}.json")
    os.makedirs(os.path.dirname(output), exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="trellara-soak-") as work, \
            Cluster("soak-source", settings={"max_wal_size": "'4GB'"}) as source, \
            Cluster("soak-target", preload=False) as target:
        os.chmod(work, 0o755)
        log_dir = setup_flow(source, "CREATE PUBLICATION pub FOR ALL TABLES", truth=False)
        config = write_flow_config(os.path.join(work, "flow.toml"), "app", log_dir, target.conninfo(),
                                   source.conninfo(), mode=0o644)
        command = [TRELLARA_BIN, "soak", "--config", config, "--duration", args.duration, "--run-applier",
                   "--rows-per-transaction", args.rows_per_transaction, "--memory-limit-mib", args.memory_limit_mib,
                   "--pause", args.pause,
                   "--settle-timeout", "30m", "--format", "json"]
        print("running:", " ".join(command), flush=True)
        started = time.monotonic()
        result = subprocess.run(command, capture_output=True, text=True)
        elapsed = time.monotonic() - started
        with open(output, "w") as f:
            f.write(result.stdout)
        print(result.stdout[-4000:])
        print(result.stderr[-2000:], file=sys.stderr)
        print(f"soak exited {result.returncode}; summary in {output}")
        try:
            summary = json.loads(result.stdout)
            print(json.dumps({k: summary.get(k) for k in ("duration_s", "transactions", "relay", "applier",
                                                            "lag_ms", "ok")}))
        except json.JSONDecodeError:
            summary = None
        if args.evidence_dir:
            write_evidence(args, summary, result, elapsed)
        return result.returncode


def write_evidence(args, summary, result, elapsed):
    """One result line for the correctness report: the soak passed only when it exited 0 and its
    summary says ok; the duration is the soak's own measured window (the run's wall time when the
    summary is missing)."""
    repo = os.path.join(HERE, "..", "..")
    revision = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    passed = result.returncode == 0 and bool(summary) and summary.get("ok") is True
    failing = [c.get("name", "?") + ": " + c.get("detail", "") for c in (summary or {}).get("checks", [])
               if not c.get("ok")]
    now = datetime.datetime.now(datetime.timezone.utc)
    line = {"kind": "soak", "name": "soak", "script": "bench/soak/soak_window.py",
            "status": "passed" if passed else "failed",
            "duration_s": float((summary or {}).get("duration_s") or elapsed),
            "revision": revision + ("-dirty" if dirty else ""),
            "finished_at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "command": f"make soak SOAK_DURATION={args.duration}",
            "error": "; ".join(failing) if failing else ("" if passed else f"soak exited {result.returncode}"),
            "summary": summary}
    os.makedirs(args.evidence_dir, exist_ok=True)
    path = os.path.join(args.evidence_dir, f"soak-{now.strftime('%Y%m%dT%H%M%SZ')}.jsonl")
    with open(path, "a") as f:
        f.write(json.dumps(line, sort_keys=True) + "\n")
    print(f"evidence: {path} ({line['status']}, {line['duration_s']:.0f} s at {line['revision'][:12]}); commit it, "
          f"then run make correctness-report")


if __name__ == "__main__":
    sys.exit(main())
