#!/usr/bin/env python3
"""Initial-copy benchmark: `trellara snapshot` against native logical replication's table sync.

pgbench scale S (default 50: 5 000 000 accounts) on the source; two targets with the schema only.
Native: CREATE SUBSCRIPTION ... WITH (copy_data = true), timed until every table is ready
(pg_subscription_rel.srsubstate = 'r'; max_sync_workers_per_subscription at its default, 2).
Trellara: `trellara snapshot --config F --format json` (default --jobs), timed to its exit, with its
peak RSS (ru_maxrss of that process alone, os.wait4). Then `trellara apply` runs as a daemon and
`trellara verify --format json` is timed on the same tables (rows/s per side as verify reports).
Runs alternate which copy goes first. Prints each run, then medians: trellara/native time ratio
(issue 10 goal <= 0.66), peak RSS (goal <= 64 MiB), verify rows/s. Row counts of both targets are
checked against the source. A benchmark, never a pass/fail test.

Usage: bench/snapshot/run_bench.py [--scale S] [--runs R] [--jobs N]
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))
from harness import Cluster  # noqa: E402

PG_BIN = os.environ.get("TRELLARA_PG_BIN", "/usr/lib/postgresql/15/bin")
REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TRELLARA = os.environ.get("TRELLARA_BIN", os.path.join(REPO, "build", "bin", "trellara"))
TABLES = ["pgbench_accounts", "pgbench_branches", "pgbench_tellers", "pgbench_history"]


def run_timed(args, out_path):
    """Runs a command to its end: (exit code, seconds, peak RSS KiB of that process, output)."""
    t0 = time.monotonic()
    with open(out_path, "w+") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.monotonic() - t0
        out.seek(0)
        return os.waitstatus_to_exitcode(status), seconds, usage.ru_maxrss, out.read()


def counts(cluster):
    return cluster.query(" UNION ALL ".join(f"SELECT '{t}', count(*) FROM {t}" for t in TABLES))


def copy_native(source, target):
    conn = f"host={source.socket_dir} port={source.port} user=postgres dbname=postgres"
    t0 = time.monotonic()
    target.psql(f"CREATE SUBSCRIPTION bench_sub CONNECTION '{conn}' PUBLICATION bench_pub WITH (copy_data = true)")
    while target.query("SELECT count(*) FILTER (WHERE srsubstate <> 'r') || '/' || count(*) "
                       "FROM pg_subscription_rel") != f"0/{len(TABLES)}":
        if time.monotonic() - t0 > 3600:
            raise RuntimeError("native table sync did not finish within an hour")
        time.sleep(0.05)
    seconds = time.monotonic() - t0
    target.psql("ALTER SUBSCRIPTION bench_sub DISABLE")
    target.psql("ALTER SUBSCRIPTION bench_sub SET (slot_name = NONE)")
    target.psql("DROP SUBSCRIPTION bench_sub")
    source.psql("SELECT pg_drop_replication_slot('bench_sub')")
    return seconds


def one_run(run, scale, jobs):
    with Cluster(f"bench-snap-src{run}", settings={"max_wal_size": "'4GB'", "max_wal_senders": "10",
                                                   "max_replication_slots": "10"}) as source, \
            Cluster(f"bench-snap-t{run}", preload=False) as trellara_target, \
            Cluster(f"bench-snap-n{run}", preload=False) as native_target:
        source.psql("CREATE EXTENSION trellara")
        subprocess.run([os.path.join(PG_BIN, "pgbench"), "-i", "-s", str(scale), "-q"], env=source.env(),
                       check=True, capture_output=True)
        dump = subprocess.run([os.path.join(PG_BIN, "pg_dump"), "--schema-only",
                               *sum((["-t", t] for t in TABLES), [])],
                              env=source.env(), check=True, capture_output=True, text=True).stdout
        trellara_target.psql(dump)
        native_target.psql(dump)
        source.psql("CREATE PUBLICATION bench_pub FOR TABLE " + ", ".join(TABLES))
        source.psql("SELECT trellara.create_flow('bench', 'bench_pub')")
        log_dir = source.query("SELECT log_directory FROM trellara.flows WHERE name = 'bench'")
        result = {}
        with tempfile.TemporaryDirectory() as work:
            config = os.path.join(work, "flow.toml")
            with open(config, "w") as f:
                f.write(f'[flow]\nname = "bench"\nlog_directory = "{log_dir}"\n\n'
                        f'[source]\nconninfo = "{source.conninfo()}"\n\n'
                        f'[target]\nconninfo = "{trellara_target.conninfo()}"\n')
            snapshot_args = [TRELLARA, "snapshot", "--config", config, "--format", "json"]
            if jobs:
                snapshot_args += ["--jobs", str(jobs)]

            def trellara_copy():
                code, seconds, rss_kib, output = run_timed(snapshot_args, os.path.join(work, "snapshot.out"))
                if code != 0:
                    raise RuntimeError(f"trellara snapshot exited {code}: {output[-3000:]}")
                result["trellara_s"] = seconds
                result["trellara_rss_mib"] = rss_kib / 1024

            def native_copy():
                result["native_s"] = copy_native(source, native_target)

            order = [trellara_copy, native_copy] if run % 2 == 0 else [native_copy, trellara_copy]
            for step in order:
                step()

            apply = subprocess.Popen([TRELLARA, "apply", "--config", config],
                                     stdout=open(os.path.join(work, "apply.out"), "w"), stderr=subprocess.STDOUT)
            try:
                code, seconds, _, output = run_timed([TRELLARA, "verify", "--config", config, "--format", "json"],
                                                     os.path.join(work, "verify.out"))
                result["verify_s"] = seconds
                result["verify_exit"] = code
                try:
                    result["verify"] = json.loads(output[output.index("{"):])
                except ValueError:
                    result["verify"] = {"output": output[-2000:]}
            finally:
                apply.send_signal(signal.SIGTERM)
                apply.wait(timeout=60)
        source_counts = counts(source)
        result["same_counts"] = source_counts == counts(trellara_target) == counts(native_target)
        rows = sum(int(line.split("|")[1]) for line in source_counts.splitlines())
        result["rows"] = rows
        result["ratio"] = result["trellara_s"] / result["native_s"]
        return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=0, help="trellara snapshot --jobs (0: its default)")
    args = parser.parse_args()
    results = []
    for run in range(args.runs):
        r = one_run(run, args.scale, args.jobs)
        print(f"run {run}: trellara {r['trellara_s']:.1f} s (peak RSS {r['trellara_rss_mib']:.1f} MiB) | native "
              f"{r['native_s']:.1f} s | ratio trellara/native {r['ratio']:.2f} | verify {r['verify_s']:.1f} s "
              f"(exit {r['verify_exit']}, {r['rows'] / r['verify_s']:.0f} rows/s overall) | "
              f"row counts equal: {r['same_counts']}", flush=True)
        print("  verify: " + json.dumps(r["verify"])[:600], flush=True)
        results.append(r)
    med = {k: statistics.median(r[k] for r in results) for k in ("trellara_s", "native_s", "ratio",
                                                                  "trellara_rss_mib", "verify_s")}
    print(f"median over {args.runs} runs (scale {args.scale}): trellara {med['trellara_s']:.1f} s, native "
          f"{med['native_s']:.1f} s, ratio {med['ratio']:.2f} (goal <= 0.66), snapshot peak RSS "
          f"{med['trellara_rss_mib']:.1f} MiB (goal <= 64), verify {med['verify_s']:.1f} s")


if __name__ == "__main__":
    main()
