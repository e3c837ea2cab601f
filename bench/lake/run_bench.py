#!/usr/bin/env python3
"""bench/lake/run_bench.py — the fleet fan-in under load (docs/lake.md, docs/performance.md "The
lake"): STORES store clusters, each with a Trellara flow over pgbench's tables (FOR ALL TABLES),
run pgbench at full speed for --duration seconds while `trellara lake fanin run` (a daemon) reads
their logs into one Iceberg lake with --epoch windows; a catalog cluster beside them. Measured:

  - the stores' own rate (pgbench transactions and row changes per second, all stores together);
  - the lake's intake rate while the workload runs (row changes admitted per second, sampled);
  - catch-up: how long after the workload's end the lake has admitted every transaction the stores
    committed, and every epoch holding them is published `complete`;
  - epoch publish latency: from an epoch's end to its catalog commit (published_at), per epoch.

Everything runs on this machine (stores, catalog, fan-in and pgbench share its cores), so the
figures are what one small host does, printed with the command that produced them; never a
pass/fail test.

  python3 bench/lake/run_bench.py [--stores 4] [--duration 20] [--epoch 10s] [--clients 1]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from harness import PG_BIN, Cluster  # noqa: E402
from capture_support import TRELLARA_BIN, setup_flow  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--stores", type=int, default=4)
    parser.add_argument("--duration", type=int, default=20)
    parser.add_argument("--epoch", default="10s")
    parser.add_argument("--clients", type=int, default=1)
    args = parser.parse_args()
    epoch_s = int(args.epoch[:-1]) * {"s": 1, "m": 60, "h": 3600}[args.epoch[-1]]
    clusters = []
    work = tempfile.mkdtemp(prefix="trellara-bench-lake-")
    fanin = None
    try:
        for k in range(args.stores):
            c = Cluster(f"bench-lake-s{k + 1}", settings={"trellara.progress_interval": "300"})
            c.start()
            clusters.append(c)
            subprocess.run([os.path.join(PG_BIN, "pgbench"), "-i", "-s", "1", "-q", "-h", c.socket_dir, "-p",
                            str(c.port), "-U", "postgres", "postgres"], check=True, capture_output=True)
        catalog = Cluster("bench-lake-catalog", preload=False)
        catalog.start()
        clusters.append(catalog)
        config = os.path.join(work, "lake.toml")
        with open(config, "w") as f:
            f.write(f'[lake]\nname = "fleet"\nwarehouse = "{work}/warehouse"\ncatalog = "{catalog.conninfo()}"\n'
                    f'epoch = "{args.epoch}"\ngap_deadline = "1h"\ncommit_skew = "1s"\n')
            for k in range(args.stores):
                log_dir = setup_flow(clusters[k], "CREATE PUBLICATION pub FOR ALL TABLES", truth=False)
                f.write(f'\n[[store]]\nname = "store-{k + 1:02d}"\nlog_directory = "{log_dir}"\n')
        err = open(os.path.join(work, "fanin.err"), "w")
        fanin = subprocess.Popen([TRELLARA_BIN, "lake", "fanin", "run", "--config", config], stderr=err,
                                 stdout=subprocess.DEVNULL)
        err.close()

        def admitted():
            text = catalog.query("SELECT coalesce(sum(changes), 0) || ' ' || count(*) FROM trellara_lake.transactions "
                                 "WHERE lake = 'fleet'") if catalog.query(
                "SELECT to_regclass('trellara_lake.transactions') IS NOT NULL") == "t" else "0 0"
            changes, transactions = text.split()
            return int(changes), int(transactions)

        results = {}

        def bench(k):
            out = subprocess.run([os.path.join(PG_BIN, "pgbench"), "-n", "-c", str(args.clients), "-T",
                                  str(args.duration), "-h", clusters[k].socket_dir, "-p", str(clusters[k].port), "-U",
                                  "postgres", "postgres"], capture_output=True, text=True)
            results[k] = out.stdout
        samples = []
        threads = [threading.Thread(target=bench, args=(k,)) for k in range(args.stores)]
        start = time.monotonic()
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            time.sleep(1)
            samples.append((time.monotonic() - start, admitted()[0]))
        end_of_workload = time.monotonic()
        committed = 0
        for k in range(args.stores):
            line = next(x for x in results[k].splitlines() if x.startswith("number of transactions actually processed"))
            committed += int(line.split(":")[1].split("/")[0])
        # Every store's last epoch must end, and the stores' progress pass it, before it can be complete.
        while True:
            changes, transactions = admitted()
            if transactions >= committed:
                break
            if time.monotonic() - end_of_workload > 600:
                raise SystemExit(f"the lake admitted {transactions} of {committed} transactions in 600 s")
            for c in clusters[:-1]:
                c.query("SELECT txid_current()")
            time.sleep(0.2)
        caught_up = time.monotonic() - end_of_workload
        while True:
            open_epochs = catalog.query("SELECT count(*) FROM (SELECT DISTINCT epoch FROM trellara_lake.transactions) t "
                                        "LEFT JOIN trellara_lake.epochs e USING (epoch) WHERE coalesce(e.state, 'open') "
                                        "<> 'complete'")
            if open_epochs == "0":
                break
            if time.monotonic() - end_of_workload > 600 + epoch_s:
                raise SystemExit(f"{open_epochs} epochs not complete 600 s after the workload")
            for c in clusters[:-1]:
                c.query("SELECT txid_current()")
            time.sleep(0.2)
        published = time.monotonic() - end_of_workload
        latencies = catalog.query(
            f"SELECT string_agg(round((extract(epoch FROM published_at) - (epoch + 1) * {epoch_s})::numeric, 2)::text, "
            "' ' ORDER BY epoch) FROM trellara_lake.epochs WHERE state = 'complete'").split()
        changes, transactions = admitted()
        rates = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(samples, samples[1:]) if b[0] > a[0]]
        rates.sort()
        print(f"stores: {args.stores}, pgbench -c {args.clients} for {args.duration} s each; epochs of {args.epoch}")
        print(f"the stores committed {committed} transactions ({committed / args.duration:.0f} tx/s together, "
              f"{changes} row changes: {changes / args.duration:.0f} changes/s)")
        if rates:
            print(f"the lake's intake during the workload: median {rates[len(rates) // 2]:.0f} changes/s "
                  f"(min {rates[0]:.0f}, max {rates[-1]:.0f})")
        print(f"after the workload: every transaction admitted in {caught_up:.1f} s, every epoch published complete "
              f"in {published:.1f} s")
        if latencies:
            lat = sorted(float(x) for x in latencies)
            print(f"epoch publish latency (epoch end -> catalog commit), {len(lat)} epochs: median {lat[len(lat) // 2]:.2f} s, "
                  f"max {lat[-1]:.2f} s")
        verify = subprocess.run([TRELLARA_BIN, "lake", "fanin", "verify", "--config", config], capture_output=True, text=True)
        print(f"lake fanin verify: exit {verify.returncode}: {verify.stdout.strip().splitlines()[0] if verify.stdout else verify.stderr[-300:]}")
    finally:
        if fanin is not None and fanin.poll() is None:
            fanin.terminate()  # our own child, by its Popen handle
            fanin.wait(timeout=120)
        for c in clusters:
            c.stop()
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
