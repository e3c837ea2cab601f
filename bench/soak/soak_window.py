#!/usr/bin/env python3
"""bench/soak/soak_window.py — a long `trellara soak` window on throwaway clusters (docs/soak.md).

Starts a source (trellara preloaded, server defaults otherwise: logical_decoding_work_mem 64MB,
trellara.relay_decoding_work_mem at its default) and an empty target, creates a FOR ALL TABLES
flow, runs

    trellara soak --config F --duration D --run-applier --memory-limit-mib 64 --pause 5s --format json

and writes soak's JSON summary to --output (default bench/soak/results/soak-<duration>.json).
Everything it starts is stopped by PID (the harness), also on failure.

    python3 bench/soak/soak_window.py --duration 1h [--rows-per-transaction 200000] [--pause 5s]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "integration"))

from capture_support import TRELLARA_BIN, setup_flow  # noqa: E402
from harness import Cluster  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", default="1h")
    parser.add_argument("--rows-per-transaction", default="200000")
    parser.add_argument("--memory-limit-mib", default="64")
    parser.add_argument("--pause", default="5s", help="between workload iterations (a sustained rate)")
    parser.add_argument("--output")
    args = parser.parse_args()
    output = args.output or os.path.join(HERE, "results", f"soak-{args.duration}.json")
    os.makedirs(os.path.dirname(output), exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="trellara-soak-") as work, \
            Cluster("soak-source", settings={"max_wal_size": "'4GB'"}) as source, \
            Cluster("soak-target", preload=False) as target:
        os.chmod(work, 0o755)
        log_dir = setup_flow(source, "CREATE PUBLICATION pub FOR ALL TABLES", truth=False)
        config = os.path.join(work, "flow.toml")
        with open(config, "w") as f:
            f.write(f'[flow]\nname = "app"\nlog_directory = "{log_dir}"\n\n'
                    f'[source]\nconninfo = "{source.conninfo()}"\n\n[target]\nconninfo = "{target.conninfo()}"\n')
        os.chmod(config, 0o644)
        command = [TRELLARA_BIN, "soak", "--config", config, "--duration", args.duration, "--run-applier",
                   "--rows-per-transaction", args.rows_per_transaction, "--memory-limit-mib", args.memory_limit_mib,
                   "--pause", args.pause,
                   "--settle-timeout", "30m", "--format", "json"]
        print("running:", " ".join(command), flush=True)
        result = subprocess.run(command, capture_output=True, text=True)
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
            pass
        return result.returncode


if __name__ == "__main__":
    sys.exit(main())
