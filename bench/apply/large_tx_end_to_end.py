#!/usr/bin/env python3
"""End-to-end large-transaction benchmark (issue 12 "Performance"): one N-row INSERT transaction
from the moment it starts on the source to the moment it is visible on the target, with every
consumer already running as users run it:

  trellara     the flow's relay worker (streams and spills the transaction while it runs, logs it
               at commit) and a daemon `trellara apply --config F` (no --until-caught-up);
  native on    a subscription with streaming = on, enabled before the transaction;
  native off   a subscription with streaming = off, enabled before the transaction.

Each consumer gets its own fresh source and target clusters and runs alone (no two compete for
the 2 cores), in the order trellara, native on, native off, repeated --runs times. Reported per
run: seconds from BEGIN to visible, seconds from COMMIT to visible, and rows/s over the whole
(BEGIN to visible); the summary gives medians and the ratio trellara / native. A benchmark, never
a pass/fail test; the machine's other load is printed with it.

With --shape update the table first holds the N rows on both sides (loaded before the flow or the
subscription exists, so not replicated) and the transaction is one UPDATE of all of them.

Usage: bench/apply/large_tx_end_to_end.py [--rows 1000000] [--runs 3] [--shape insert|update]
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

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TRELLARA = os.environ.get("TRELLARA_BIN", os.path.join(REPO, "build", "bin", "trellara"))
SCHEMA = "CREATE TABLE big (id bigint PRIMARY KEY, v text NOT NULL, n integer NOT NULL)"
LOAD = "INSERT INTO big SELECT g, md5(g::text), 0 FROM generate_series(1, {rows}) g"
# Per shape: the source transaction, the target's "it is visible" probe, and the check that all of
# it is (one transaction: visible at once).
SHAPES = {
    "insert": (LOAD, "SELECT EXISTS (SELECT 1 FROM big WHERE id = 1)", "SELECT count(*) FROM big"),
    "update": ("UPDATE big SET n = n + 1", "SELECT EXISTS (SELECT 1 FROM big WHERE id = 1 AND n = 1)",
               "SELECT count(*) FROM big WHERE n = 1"),
}
SHAPE = "insert"


def prepare(source, target, rows):
    source.psql(SCHEMA)
    target.psql(SCHEMA)
    if SHAPE == "update":
        for cluster in (source, target):
            cluster.psql(LOAD.format(rows=rows) + "; VACUUM ANALYZE big")


def run_transaction(source, target, rows, logged_sql=None):
    """BEGIN .. INSERT rows .. COMMIT on the source; polls the target until visible (and, with
    `logged_sql`, the source until the relay has logged it, printed as a breakdown).
    Returns (begin_to_visible_s, commit_to_visible_s)."""
    transaction, visible, whole = SHAPES[SHAPE]
    t_begin = time.monotonic()
    source.psql(transaction.format(rows=rows))
    t_commit = time.monotonic()
    if logged_sql:
        end = source.query("SELECT pg_current_wal_lsn()")
        while source.query(logged_sql.format(lsn=end)) != "t":
            time.sleep(0.02)
        print(f"  trellara: COMMIT -> logged by the relay {time.monotonic() - t_commit:.2f} s", flush=True)
    while target.query(visible) != "t":
        if time.monotonic() - t_commit > 1800:
            raise RuntimeError("the transaction did not become visible on the target within 1800 s")
        time.sleep(0.02)
    t_visible = time.monotonic()
    count = target.query(whole)
    if count != str(rows):
        raise RuntimeError(f"the target shows {count} rows, expected {rows} (not atomic?)")
    return t_visible - t_begin, t_visible - t_commit


def trellara_run(run, rows):
    with Cluster(f"e2e-src-t{run}", settings={"max_wal_size": "'8GB'"}) as source, \
            Cluster(f"e2e-tgt-t{run}", preload=False) as target, tempfile.TemporaryDirectory() as work:
        os.chmod(work, 0o755)
        source.psql("CREATE EXTENSION trellara")
        prepare(source, target, rows)
        source.psql("CREATE PUBLICATION bench_pub FOR TABLE big")
        source.psql("SELECT trellara.create_flow('bench', 'bench_pub')")
        log_dir = source.query("SELECT log_directory FROM trellara.flows WHERE name = 'bench'")
        config = os.path.join(work, "flow.toml")
        with open(config, "w") as f:
            f.write(f'[flow]\nname = "bench"\nlog_directory = "{log_dir}"\n\n'
                    f'[source]\nconninfo = "{source.conninfo()}"\n\n[target]\nconninfo = "{target.conninfo()}"\n')
        with open(os.path.join(work, "apply.out"), "w") as out:
            applier = subprocess.Popen([TRELLARA, "apply", "--config", config], stdout=out, stderr=subprocess.STDOUT)
            try:
                deadline = time.monotonic() + 60
                while source.query("SELECT state FROM trellara.status() WHERE flow = 'bench'") != "running" or \
                        target.query("SELECT to_regclass('trellara.applied_transactions') IS NOT NULL") != "t":
                    if time.monotonic() > deadline or applier.poll() is not None:
                        out.flush()
                        with open(os.path.join(work, "apply.out")) as f:
                            said = f.read()
                        raise RuntimeError(f"the flow or the applier did not start (applier exit code "
                                           f"{applier.poll()}; its output:\n{said})")
                    time.sleep(0.1)
                return run_transaction(source, target, rows, "SELECT log_durable_lsn >= '{lsn}' FROM trellara.status()")
            finally:
                applier.terminate()   # our own child, by its Popen handle
                applier.wait(timeout=120)


def native_run(run, rows, streaming):
    with Cluster(f"e2e-src-n{streaming}{run}", preload=False, settings={"max_wal_size": "'8GB'"}) as source, \
            Cluster(f"e2e-tgt-n{streaming}{run}", preload=False) as target:
        prepare(source, target, rows)
        source.psql("CREATE PUBLICATION bench_pub FOR TABLE big")
        conn = f"host={source.socket_dir} port={source.port} user=postgres dbname=postgres"
        target.psql(f"CREATE SUBSCRIPTION sub CONNECTION '{conn}' PUBLICATION bench_pub "
                    f"WITH (copy_data = false, streaming = {streaming})")
        deadline = time.monotonic() + 60
        while source.query("SELECT count(*) FROM pg_stat_replication") != "1":
            if time.monotonic() > deadline:
                raise RuntimeError("the subscription's walsender did not start")
            time.sleep(0.1)
        try:
            return run_transaction(source, target, rows)
        finally:
            target.psql("DROP SUBSCRIPTION sub")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1000000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--trellara-only", action="store_true", help="skip the native subscriptions")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="insert")
    args = parser.parse_args()
    global SHAPE
    SHAPE = args.shape
    print(f"shape {SHAPE}: {SHAPES[SHAPE][0].format(rows=args.rows)}", flush=True)
    results = {"trellara": [], "native streaming=on": [], "native streaming=off": []}
    for run in range(args.runs):
        print(f"run {run}: load average {open('/proc/loadavg').read().split()[:3]}", flush=True)
        for name, fn in (("trellara", lambda: trellara_run(run, args.rows)),
                         ("native streaming=on", lambda: native_run(run, args.rows, "on")),
                         ("native streaming=off", lambda: native_run(run, args.rows, "off"))):
            if args.trellara_only and name != "trellara":
                continue
            total, after_commit = fn()
            results[name].append((total, after_commit))
            print(f"run {run} {name}: BEGIN->visible {total:.2f} s ({args.rows / total:.0f} rows/s), "
                  f"COMMIT->visible {after_commit:.2f} s", flush=True)
    med = {name: (statistics.median(t for t, _ in v), statistics.median(c for _, c in v))
           for name, v in results.items() if v}
    for name, (total, after_commit) in med.items():
        print(f"median {name}: BEGIN->visible {total:.2f} s ({args.rows / total:.0f} rows/s), "
              f"COMMIT->visible {after_commit:.2f} s")
    for native in ("native streaming=on", "native streaming=off"):
        if native not in med:
            continue
        print(f"ratio trellara / {native} (rows/s, BEGIN->visible): {med[native][0] / med['trellara'][0]:.2f}")


if __name__ == "__main__":
    main()
