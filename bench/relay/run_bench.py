#!/usr/bin/env python3
"""Relay throughput benchmark: Trellara's relay against pgoutput over the identical WAL.

What it measures: a pgbench workload is run once while two logical slots sit at the same start
point: the flow's slot (plugin trellara) with its relay stopped, and a pgoutput slot. Then, side by
side over that same WAL:
  * pgoutput: pg_logical_slot_peek_binary_changes(...) on the pgoutput slot (decode + output only,
    nothing written anywhere) -- the baseline;
  * trellara: start_flow and time until the relay has decoded, encoded, checksummed and durably
    appended every transaction to the local log and confirmed the slot past the workload's end.
Reports transactions/s of each, the ratio trellara/pgoutput (target >= 0.8), and bytes per change
(log bytes vs pgoutput output bytes). Repeats --runs times with fresh slots; prints medians.
It is a benchmark, never a pass/fail test: it exits 0 whatever the ratio.

Usage: bench/relay/run_bench.py [--transactions N] [--runs R] [--clients C]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))
from harness import Cluster  # noqa: E402

PGBENCH = "/usr/lib/postgresql/15/bin/pgbench"


def pgbench(cluster, *args):
    subprocess.run([PGBENCH, *args], env=cluster.env(), check=True, capture_output=True, text=True)


def one_run(cluster, run, transactions, clients):
    flow = f"bench{run}"
    cluster.psql(f"SELECT trellara.create_flow('{flow}', 'bench_pub')")
    # Wait for the relay to start, then stop it so the workload's WAL waits in the slot.
    wait_state(cluster, flow, "running")
    cluster.psql(f"SELECT trellara.stop_flow('{flow}')")
    cluster.psql(f"SELECT 'x' FROM pg_create_logical_replication_slot('bench_pgoutput_{run}', 'pgoutput')")
    pgbench(cluster, "-n", "-c", str(clients), "-j", str(clients), "-t", str(transactions // clients))
    end_lsn = cluster.query("SELECT pg_current_wal_lsn()").strip()
    # Baseline: pgoutput decodes the same WAL.
    t0 = time.monotonic()
    out = cluster.query(
        f"SELECT count(*) FILTER (WHERE substr(data, 1, 1) = 'C'::bytea), sum(length(data)), "
        f"count(*) FILTER (WHERE substr(data, 1, 1) IN ('I'::bytea, 'U'::bytea, 'D'::bytea)) "
        f"FROM pg_logical_slot_peek_binary_changes('bench_pgoutput_{run}', NULL, NULL, "
        f"'proto_version', '1', 'publication_names', 'bench_pub')").strip()
    pgoutput_s = time.monotonic() - t0
    commits, pgoutput_bytes, changes = (int(x) for x in out.split("|"))
    # Trellara: relay decodes, encodes, checksums and durably appends, then confirms.
    log_bytes_before = int(cluster.query(f"SELECT coalesce(log_bytes, 0) FROM trellara.status() WHERE flow = '{flow}'"))
    t0 = time.monotonic()
    cluster.psql(f"SELECT trellara.start_flow('{flow}')")
    t_worker = None
    while True:
        if t_worker is None and cluster.query(f"SELECT worker_pid IS NOT NULL FROM trellara.status() "
                                              f"WHERE flow = '{flow}'").strip() == "t":
            t_worker = time.monotonic()
        done = cluster.query(f"SELECT confirmed_flush_lsn >= '{end_lsn}'::pg_lsn FROM pg_replication_slots "
                             f"WHERE slot_name = 'trellara_{flow}'").strip()
        if done == "t":
            break
        if time.monotonic() - t0 > 600:
            raise RuntimeError("relay did not catch up within 600 s")
        time.sleep(0.005)
    trellara_s = time.monotonic() - t0
    worker_s = time.monotonic() - (t_worker or t0)
    log_bytes = int(cluster.query(f"SELECT log_bytes FROM trellara.status() WHERE flow = '{flow}'")) - log_bytes_before
    cluster.psql(f"SELECT trellara.drop_flow('{flow}', true)")
    cluster.psql(f"SELECT pg_drop_replication_slot('bench_pgoutput_{run}')")
    return {
        "transactions": commits, "changes": changes,
        "pgoutput_s": pgoutput_s, "trellara_s": trellara_s,
        "pgoutput_tps": commits / pgoutput_s, "trellara_tps": commits / trellara_s,
        "ratio": pgoutput_s / trellara_s,
        "worker_s": worker_s, "ratio_excluding_start": pgoutput_s / worker_s,
        "pgoutput_bytes_per_change": pgoutput_bytes / max(changes, 1),
        "trellara_bytes_per_change": log_bytes / max(changes, 1),
    }


def wait_state(cluster, flow, state):
    for _ in range(600):
        if cluster.query(f"SELECT state FROM trellara.status() WHERE flow = '{flow}'").strip() == state:
            return
        time.sleep(0.05)
    raise RuntimeError(f"flow {flow} did not reach state {state}: " + cluster.query("SELECT * FROM trellara.status()") + "\n" + cluster.server_log()[-3000:])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transactions", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    with Cluster("bench-relay", settings={"max_wal_size": "'4GB'", "checkpoint_timeout": "'30min'"}) as cluster:
        cluster.psql("CREATE EXTENSION trellara")
        pgbench(cluster, "-i", "-s", "4", "-q")
        cluster.psql("CREATE PUBLICATION bench_pub FOR TABLE pgbench_accounts, pgbench_branches, "
                     "pgbench_tellers, pgbench_history")
        results = []
        for run in range(args.runs):
            r = one_run(cluster, run, args.transactions, args.clients)
            print(f"run {run}: {r['transactions']} tx, {r['changes']} changes | pgoutput {r['pgoutput_s']:.2f} s "
                  f"({r['pgoutput_tps']:.0f} tx/s) | trellara {r['trellara_s']:.2f} s ({r['trellara_tps']:.0f} tx/s) "
                  f"| ratio {r['ratio']:.2f} (from worker start {r['ratio_excluding_start']:.2f}) | bytes/change pgoutput {r['pgoutput_bytes_per_change']:.1f} "
                  f"trellara {r['trellara_bytes_per_change']:.1f}", flush=True)
            results.append(r)
        med = {k: statistics.median(r[k] for r in results) for k in results[0]}
        print(f"median over {args.runs} runs: pgoutput {med['pgoutput_tps']:.0f} tx/s, trellara "
              f"{med['trellara_tps']:.0f} tx/s, ratio trellara/pgoutput {med['ratio']:.2f} (target >= 0.8; "
              f"{med['ratio_excluding_start']:.2f} counted from the worker's start); "
              f"bytes per change: pgoutput {med['pgoutput_bytes_per_change']:.1f}, trellara "
              f"{med['trellara_bytes_per_change']:.1f}")


if __name__ == "__main__":
    main()
