#!/usr/bin/env python3
"""Catch-up apply benchmark: Trellara's applier against native logical replication, side by side.

A pgbench workload (default 20 000 transactions) is committed once on the source while it waits in
two places: the Trellara flow's durable local log, and a native subscription's slot (the
subscription exists, disabled, without initial copy, before the workload). Two empty-but-schema'd
targets then catch up: `trellara apply --until-caught-up` into one, `ALTER SUBSCRIPTION ... ENABLE`
into the other (timed until the subscription's slot is confirmed past the workload's end). Prints
transactions/s of each and the ratio trellara/native (issue 5 target >= 1.0), then checks that both
targets hold the same rows as the source. A benchmark, never a pass/fail test.

Usage: bench/apply/run_bench.py [--transactions N] [--runs R]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))
from harness import Cluster  # noqa: E402

PG_BIN = "/usr/lib/postgresql/15/bin"
REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TRELLARA = os.environ.get("TRELLARA_BIN", os.path.join(REPO, "build", "bin", "trellara"))
TABLES = ["pgbench_accounts", "pgbench_branches", "pgbench_tellers", "pgbench_history"]


def pgbench(cluster, *args):
    subprocess.run([os.path.join(PG_BIN, "pgbench"), *args], env=cluster.env(), check=True, capture_output=True)


def copy_schema(source, target):
    dump = subprocess.run([os.path.join(PG_BIN, "pg_dump"), "--schema-only", *sum((["-t", t] for t in TABLES), [])],
                          env=source.env(), check=True, capture_output=True, text=True).stdout
    target.psql(dump)


def digest(cluster):
    return cluster.query(" UNION ALL ".join(
        f"SELECT '{t}', count(*)::text, md5(coalesce(string_agg(x::text, ',' ORDER BY x::text), '')) FROM {t} x"
        for t in TABLES))


def one_run(run, transactions):
    with Cluster(f"bench-apply-src{run}", settings={"max_wal_size": "'4GB'"}) as source, \
            Cluster(f"bench-apply-t{run}", preload=False) as trellara_target, \
            Cluster(f"bench-apply-n{run}", preload=False) as native_target:
        source.psql("CREATE EXTENSION trellara")
        pgbench(source, "-i", "-s", "1", "-q")
        copy_schema(source, trellara_target)
        copy_schema(source, native_target)
        # Both targets start from the source's initial rows (copied once, outside the timing).
        for target in (trellara_target, native_target):
            for t in TABLES:
                data = subprocess.run([os.path.join(PG_BIN, "psql"), "-X", "-q", "-c", f"COPY {t} TO STDOUT"],
                                      env=source.env(), check=True, capture_output=True).stdout
                subprocess.run([os.path.join(PG_BIN, "psql"), "-X", "-q", "-c", f"COPY {t} FROM STDIN"],
                               env=target.env(), input=data, check=True, capture_output=True)
        source.psql("CREATE PUBLICATION bench_pub FOR TABLE " + ", ".join(TABLES))
        source.psql("SELECT trellara.create_flow('bench', 'bench_pub')")
        log_dir = source.query("SELECT log_directory FROM trellara.flows WHERE name = 'bench'")
        conn = f"host={source.socket_dir} port={source.port} user=postgres dbname=postgres"
        native_target.psql(f"CREATE SUBSCRIPTION bench_sub CONNECTION '{conn}' PUBLICATION bench_pub "
                           f"WITH (copy_data = false, enabled = false)")
        pgbench(source, "-n", "-c", "4", "-j", "2", "-t", str(transactions // 4))
        end = source.query("SELECT pg_current_wal_lsn()")
        deadline = time.monotonic() + 300
        while source.query(f"SELECT log_durable_lsn >= '{end}' FROM trellara.status()") != "t":
            if time.monotonic() > deadline:
                raise RuntimeError("the flow did not capture the workload within 300 s")
            time.sleep(0.05)
        with tempfile.TemporaryDirectory() as work:
            config = os.path.join(work, "flow.toml")
            with open(config, "w") as f:
                f.write(f'[flow]\nname = "bench"\nlog_directory = "{log_dir}"\n\n'
                        f'[target]\nconninfo = "{trellara_target.conninfo()}"\n')
            t0 = time.monotonic()
            with open(os.path.join(work, "apply.out"), "w+") as out:
                proc = subprocess.Popen([TRELLARA, "apply", "--config", config, "--until-caught-up"],
                                        stdout=out, stderr=subprocess.STDOUT)
                _, status, usage = os.wait4(proc.pid, 0)
                trellara_s = time.monotonic() - t0
                proc.returncode = os.waitstatus_to_exitcode(status)
                out.seek(0)
                output = out.read()
            if proc.returncode != 0:
                raise RuntimeError(f"trellara apply exited {proc.returncode}: {output[-2000:]}")
            # Where the applier's wall time goes: its own CPU (user + system); the rest is waiting
            # for the target.
            applier_cpu_s = usage.ru_utime + usage.ru_stime
        t0 = time.monotonic()
        native_target.psql("ALTER SUBSCRIPTION bench_sub ENABLE")
        while source.query(f"SELECT coalesce(confirmed_flush_lsn >= '{end}', false) FROM pg_replication_slots "
                           f"WHERE slot_name = 'bench_sub'") != "t":
            if time.monotonic() - t0 > 600:
                raise RuntimeError("native replication did not catch up within 600 s")
            time.sleep(0.005)
        native_s = time.monotonic() - t0
        source_digest = digest(source)
        same = source_digest == digest(trellara_target) == digest(native_target)
        native_target.psql("ALTER SUBSCRIPTION bench_sub DISABLE")
        native_target.psql("ALTER SUBSCRIPTION bench_sub SET (slot_name = NONE)")
        native_target.psql("DROP SUBSCRIPTION bench_sub")
        source.psql("SELECT pg_drop_replication_slot('bench_sub')")
        return {"trellara_tps": transactions / trellara_s, "native_tps": transactions / native_s,
                "ratio": native_s / trellara_s, "trellara_s": trellara_s, "native_s": native_s, "same": same,
                "applier_cpu_s": applier_cpu_s}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transactions", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results = []
    for run in range(args.runs):
        r = one_run(run, args.transactions)
        print(f"run {run}: trellara {r['trellara_s']:.2f} s ({r['trellara_tps']:.0f} tx/s) | native "
              f"{r['native_s']:.2f} s ({r['native_tps']:.0f} tx/s) | ratio {r['ratio']:.2f} | "
              f"applier CPU {r['applier_cpu_s']:.2f} s | "
              f"targets equal to source: {r['same']}", flush=True)
        results.append(r)
    med = {k: statistics.median(r[k] for r in results) for k in ("trellara_tps", "native_tps", "ratio")}
    print(f"median over {args.runs} runs: trellara {med['trellara_tps']:.0f} tx/s, native {med['native_tps']:.0f} "
          f"tx/s, ratio trellara/native {med['ratio']:.2f} (target >= 1.0)")


if __name__ == "__main__":
    main()
