#!/usr/bin/env python3
"""Partitioned mode against strict mode and native logical replication, one run, same workload
(issue 39; docs/partitioned.md, docs/performance.md "Partitioned mode").

One source, one target per system, all with the same data at the start (pg_dump of the source
after pgbench -i) and the same settings. Four Trellara flows over the same publication — strict,
partitioned with 1, 2 and 4 partitions — and one disabled native subscription. The workload
(pgbench with --clients, or the insert-heavy shape) is committed once; each relay writes its log.
Then, one system at a time, its appliers start (strict: `trellara apply`; partitioned: one
`trellara apply --partition K` per partition plus the publisher) or the subscription is enabled,
and it is timed until its target shows the workload's last transaction (pgbench_history's /
bench_rows' row count equals the source's). Prints seconds and transactions/s per system and each
one's ratio to native, then checks every target against the source. A benchmark, not a test.

Usage: bench/partitioned/run_bench.py [--transactions N] [--scale S] [--clients C] [--workload pgbench|inserts]
"""
import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "apply"))
from harness import PG_BIN, Cluster  # noqa: E402
from run_bench import INSERT_SCRIPT, Poller, digest  # noqa: E402

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TRELLARA = os.environ.get("TRELLARA_BIN", os.path.join(REPO, "build", "bin", "trellara"))
SETTINGS = {"autovacuum": "off", "max_wal_size": "8GB", "shared_buffers": "512MB"}
SYSTEMS = [("strict", 0), ("p1", 1), ("p2", 2), ("p4", 4)]


def pgbench(cluster, *args):
    subprocess.run([os.path.join(PG_BIN, "pgbench"), *args], env=cluster.env(), check=True, capture_output=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--transactions", type=int, default=20000)
    parser.add_argument("--scale", type=int, default=10)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--workload", choices=["pgbench", "inserts"], default="pgbench")
    args = parser.parse_args()
    tables = (["pgbench_accounts", "pgbench_branches", "pgbench_tellers", "pgbench_history"]
              if args.workload == "pgbench" else ["bench_rows"])
    counted = "pgbench_history" if args.workload == "pgbench" else "bench_rows"
    work = os.path.join("/tmp", f"trellara-bench-partitioned-{os.getpid()}")
    os.makedirs(work, exist_ok=True)
    os.chmod(work, 0o777)
    names = [name for name, _ in SYSTEMS] + ["native"]
    with Cluster("bench-part-source", settings=dict(SETTINGS, max_replication_slots="16", max_wal_senders="16",
                                                    max_worker_processes="32")) as source:
        if args.workload == "pgbench":
            pgbench(source, "-i", "-q", "-s", str(args.scale))
            source.psql("ALTER TABLE pgbench_history ADD COLUMN id bigserial PRIMARY KEY")
        else:
            source.psql("CREATE TABLE bench_rows (id bigserial PRIMARY KEY, a int, b text)")
        dump = subprocess.run([os.path.join(PG_BIN, "pg_dump"), *sum((["-t", t] for t in tables), [])],
                              env=source.env(), check=True, capture_output=True, text=True).stdout
        source.psql("CREATE EXTENSION trellara")
        source.psql("CREATE PUBLICATION pub FOR TABLE " + ", ".join(tables))
        targets = {}
        try:
            for name in names:
                targets[name] = Cluster(f"bench-part-{name}", preload=False, settings=SETTINGS).__enter__()
                targets[name].psql(dump)
            configs = {}
            for name, partitions in SYSTEMS:
                log_dir = os.path.join(work, f"log-{name}")
                source.psql(f"SELECT trellara.create_flow('{name}', 'pub', '{log_dir}')")
                if partitions:
                    source.psql(f"SELECT trellara.set_partitioning('{name}', 'partitioned', {partitions})")
                    source.psql(f"SELECT trellara.stop_flow('{name}')")
                    source.psql(f"SELECT trellara.start_flow('{name}')")
                configs[name] = os.path.join(work, f"{name}.toml")
                with open(configs[name], "w") as f:
                    f.write(f'[flow]\nname = "{name}"\nlog_directory = "{log_dir}"\n\n'
                            f'[target]\nconninfo = "{targets[name].conninfo()}"\n')
            native = targets["native"]
            native.psql(f"CREATE SUBSCRIPTION sub CONNECTION '{source.conninfo()}' PUBLICATION pub "
                        "WITH (copy_data = false, enabled = false)")
            # The workload, committed once; every flow's relay and the native slot keep it.
            if args.workload == "pgbench":
                per_client = max(1, args.transactions // args.clients)
                pgbench(source, "-n", "-c", str(args.clients), "-j", "2", "-t", str(per_client))
            else:
                script = os.path.join(work, "inserts.sql")
                with open(script, "w") as f:
                    f.write(INSERT_SCRIPT)
                pgbench(source, "-n", "-c", str(args.clients), "-t", str(max(1, args.transactions // args.clients)),
                        "-f", script)
            expected = source.query(f"SELECT count(*) FROM {counted}")
            end = source.query("SELECT pg_current_wal_lsn()")
            for name, _ in SYSTEMS:
                deadline = time.monotonic() + 600
                while source.query(f"SELECT log_durable_lsn >= '{end}' FROM trellara.status() WHERE flow = '{name}'") != "t":
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the relay of {name} did not catch up")
                    time.sleep(0.2)
            results = {}
            for name, partitions in SYSTEMS + [("native", None)]:
                poller = Poller(targets[name])
                procs = []
                t0 = time.monotonic()
                if name == "native":
                    native.psql("ALTER SUBSCRIPTION sub ENABLE")
                else:
                    for k in range(partitions):
                        procs.append(subprocess.Popen([TRELLARA, "apply", "--config", configs[name], "--partition", str(k)],
                                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                    procs.append(subprocess.Popen([TRELLARA, "apply", "--config", configs[name]],
                                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                while poller.query(f"SELECT count(*) FROM {counted}") != expected:
                    if time.monotonic() - t0 > 1800:
                        raise RuntimeError(f"{name} did not catch up within 30 minutes")
                    time.sleep(0.005)
                seconds = time.monotonic() - t0
                poller.close()
                for proc in procs:
                    proc.terminate()
                    proc.wait(timeout=120)
                results[name] = seconds
                print(f"{name:7s} {seconds:8.2f} s  {args.transactions / seconds:9.0f} tx/s", flush=True)
            for name in names:
                print(f"{name:7s} / native: {results['native'] / results[name]:.2f}x")
            want = digest(source, tables)
            for name in names:
                if digest(targets[name], tables) != want:
                    print(f"MISMATCH: the {name} target differs from the source")
                    sys.exit(1)
            print("every target equals the source")
        finally:
            for cluster in targets.values():
                cluster.__exit__(None, None, None)


if __name__ == "__main__":
    main()
