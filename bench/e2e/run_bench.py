#!/usr/bin/env python3
"""bench/e2e/run_bench.py — end to end, timed the same way for both systems (issue 42, docs/performance.md
"End to end, timed alike"): Trellara (capture by the relay + `trellara apply` as a daemon) against
native logical replication (a subscription), on the same source and WAL, into two targets with the
same settings.

Catch-up shapes (default): the workload's WAL is written while both are stopped — the Trellara flow
stopped (`trellara.stop_flow`: its slot keeps the WAL, no relay runs), the native subscription created
disabled (copy_data = false) before the workload — then a marker row is committed after the workload.
Each system is then started (`trellara.start_flow` + the applier daemon / `ALTER SUBSCRIPTION ...
ENABLE`) and timed until its target shows the marker row (one psql session polling every 2 ms), so
Trellara's time includes its capture and native's its decoding and apply. The order alternates run by
run. Both targets are then compared with the source (count + md5 per table).

--steady: both run before the workload starts; timed from the marker's commit (after the workload)
until each target shows it, i.e. how far behind each is when the workload ends, plus the workload's
own duration for the rate.

Targets and source: autovacuum off, max_wal_size 8 GB, shared_buffers 512 MB, all alike.

  python3 bench/e2e/run_bench.py [--runs 3] [--transactions 20000] [--scale 10] [--clients 1]
                                 [--workload pgbench|inserts] [--long-read] [--steady]
"""
import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests"))
sys.path.insert(0, os.path.join(HERE, "..", "apply"))
from harness import Cluster  # noqa: E402
from run_bench import INSERT_SCRIPT, TRELLARA, Poller, copy_rows, copy_schema, digest, hold_snapshot, pgbench, \
    release_snapshot, wait_until  # noqa: E402

SETTINGS = {"autovacuum": "off", "max_wal_size": "'8GB'", "shared_buffers": "'512MB'"}
PGBENCH_TABLES = ["pgbench_accounts", "pgbench_branches", "pgbench_tellers", "pgbench_history"]


def marker_visible(poller):
    return poller.query("SELECT count(*) FROM bench_marker") == "1"


def start_trellara(source, target, work):
    config = os.path.join(work, "flow.toml")
    log_dir = source.query("SELECT log_directory FROM trellara.flows WHERE name = 'bench'")
    with open(config, "w") as f:
        f.write(f'[flow]\nname = "bench"\nlog_directory = "{log_dir}"\n\n[target]\nconninfo = "{target.conninfo()}"\n')
    source.query("SELECT trellara.start_flow('bench')")
    out = open(os.path.join(work, "apply.out"), "w")
    proc = subprocess.Popen([TRELLARA, "apply", "--config", config], stdout=out, stderr=subprocess.STDOUT)
    out.close()
    return proc


def stop(proc):
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # our own child, by its Popen handle
        proc.wait(timeout=120)


def one_run(run, args):
    tables = ["bench_rows"] if args.workload == "inserts" else PGBENCH_TABLES
    with tempfile.TemporaryDirectory() as work, \
            Cluster(f"bench-e2e-src{run}", settings=SETTINGS) as source, \
            Cluster(f"bench-e2e-t{run}", preload=False, settings=SETTINGS) as t_target, \
            Cluster(f"bench-e2e-n{run}", preload=False, settings=SETTINGS) as n_target:
        os.chmod(work, 0o755)
        source.psql("CREATE EXTENSION trellara")
        if args.workload == "inserts":
            source.psql("CREATE TABLE bench_rows (id bigserial PRIMARY KEY, a int NOT NULL, b text)")
        else:
            pgbench(source, "-i", "-s", str(args.scale), "-q")
        source.psql("CREATE TABLE bench_marker (id int PRIMARY KEY)")
        for target in (t_target, n_target):
            copy_schema(source, target, tables + ["bench_marker"])
            copy_rows(source, target, tables)
        source.psql("CREATE PUBLICATION bench_pub FOR TABLE " + ", ".join(tables + ["bench_marker"]))
        source.psql("SELECT trellara.create_flow('bench', 'bench_pub')")
        conn = f"host={source.socket_dir} port={source.port} user=postgres dbname=postgres"
        n_target.psql(f"CREATE SUBSCRIPTION bench_sub CONNECTION '{conn}' PUBLICATION bench_pub "
                      f"WITH (copy_data = false, enabled = {'true' if args.steady else 'false'})")
        trellara_proc = None
        if args.steady:
            trellara_proc = start_trellara(source, t_target, work)
        else:
            source.query("SELECT trellara.stop_flow('bench')")
        clients = args.clients
        per_client = args.transactions // clients
        reports = [hold_snapshot(t) for t in (t_target, n_target)] if args.long_read else []
        t_poll, n_poll = Poller(t_target), Poller(n_target)
        try:
            w0 = time.monotonic()
            if args.workload == "inserts":
                with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
                    script.write(INSERT_SCRIPT)
                os.chmod(script.name, 0o644)
                pgbench(source, "-n", "-c", str(clients), "-j", str(min(clients, 2)), "-t", str(per_client),
                        "-f", script.name, "--random-seed", str(1000 + run))
                os.unlink(script.name)
            else:
                pgbench(source, "-n", "-c", str(clients), "-j", str(min(clients, 2)), "-t", str(per_client))
            source.query("INSERT INTO bench_marker VALUES (1)")
            workload_s = time.monotonic() - w0
            timed = {}
            if args.steady:
                t0 = time.monotonic()
                pending = {"trellara": t_poll, "native": n_poll}
                while pending:
                    for who, poller in list(pending.items()):
                        if marker_visible(poller):
                            timed[who] = time.monotonic() - t0
                            del pending[who]
                    if time.monotonic() - t0 > 900:
                        raise RuntimeError(f"{list(pending)} did not show the marker within 900 s")
                    time.sleep(0.002)
            else:
                order = ["trellara", "native"] if run % 2 == 0 else ["native", "trellara"]
                for who in order:
                    t0 = time.monotonic()
                    if who == "trellara":
                        trellara_proc = start_trellara(source, t_target, work)
                        wait_until("Trellara's target to show the marker", lambda: marker_visible(t_poll), 900, 0.002)
                    else:
                        n_target.psql("ALTER SUBSCRIPTION bench_sub ENABLE")
                        wait_until("native's target to show the marker", lambda: marker_visible(n_poll), 900, 0.002)
                    timed[who] = time.monotonic() - t0
        finally:
            for report in reports:
                release_snapshot(report)
            t_poll.close()
            n_poll.close()
            stop(trellara_proc)
        source_digest = digest(source, tables)
        same = digest(t_target, tables) == source_digest and digest(n_target, tables) == source_digest
        n_target.psql("ALTER SUBSCRIPTION bench_sub DISABLE")
        n_target.psql("ALTER SUBSCRIPTION bench_sub SET (slot_name = NONE)")
        n_target.psql("DROP SUBSCRIPTION bench_sub")
        source.psql("SELECT pg_drop_replication_slot('bench_sub')")
        return {"trellara_s": timed["trellara"], "native_s": timed["native"], "workload_s": workload_s,
                "transactions": per_client * clients, "same": same,
                "order": "both running" if args.steady else ("trellara first" if run % 2 == 0 else "native first")}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--transactions", type=int, default=20000)
    parser.add_argument("--scale", type=int, default=10)
    parser.add_argument("--clients", type=int, default=1)
    parser.add_argument("--workload", choices=["pgbench", "inserts"], default="pgbench")
    parser.add_argument("--long-read", action="store_true")
    parser.add_argument("--steady", action="store_true")
    args = parser.parse_args()
    results = []
    for run in range(args.runs):
        r = one_run(run, args)
        results.append(r)
        print(f"run {run} ({r['order']}): trellara {r['trellara_s']:.2f} s, native {r['native_s']:.2f} s, "
              f"trellara/native speed {r['native_s'] / r['trellara_s']:.2f}x; workload {r['workload_s']:.2f} s; "
              f"targets equal to the source: {r['same']}", flush=True)
    t = statistics.median(r["trellara_s"] for r in results)
    n = statistics.median(r["native_s"] for r in results)
    ratios = sorted(r["native_s"] / r["trellara_s"] for r in results)
    shape = (f"{args.workload}" + (f" scale {args.scale}" if args.workload == "pgbench" else "") +
             f", {args.clients} client(s), {results[0]['transactions']} tx" + (", long read open" if args.long_read else "") +
             (", steady (timed from the marker's commit)" if args.steady else ", catch-up from stopped"))
    print(f"{shape}: median trellara {t:.2f} s, native {n:.2f} s; per-run speed ratio trellara/native "
          f"median {statistics.median(ratios):.2f}x (runs {', '.join(f'{x:.2f}' for x in ratios)}); "
          f"all targets equal: {all(r['same'] for r in results)}")


if __name__ == "__main__":
    main()
