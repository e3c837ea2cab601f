#!/usr/bin/env python3
"""Large-transaction apply benchmark (issue 12 "Performance"): one N-row INSERT transaction and one
N-row UPDATE transaction, each logged by the relay as chunks, applied by `trellara apply
--until-caught-up` (timed, with the applier's peak RSS, VmHWM sampled from /proc/PID/status every
50 ms), and side by side by native logical replication into two other targets (a subscription
with streaming = on and one with streaming = off, enabled after the transaction committed, timed
from ENABLE until the transaction's rows are visible). Prints rows/s, peak RSS and the ratio
trellara/native. A benchmark, never a pass/fail test.

Usage: TRELLARA_PG_BIN=/opt/pg-app/usr/lib/postgresql/15/bin bench/apply/large_tx.py [--rows N] [--runs R]
       [--no-native] [--no-update]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))
from harness import Cluster  # noqa: E402

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TRELLARA = os.environ.get("TRELLARA_BIN", os.path.join(REPO, "build", "bin", "trellara"))
SCHEMA = "CREATE TABLE big (id bigint PRIMARY KEY, v text NOT NULL, n integer NOT NULL)"


def wait_logged(source, end, timeout_s=1800):
    deadline = time.monotonic() + timeout_s
    while source.query(f"SELECT log_durable_lsn >= '{end}' FROM trellara.status()") != "t":
        if time.monotonic() > deadline:
            raise RuntimeError(f"the flow did not log the transaction within {timeout_s} s")
        time.sleep(0.1)


def vm_hwm_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def timed_apply(config, work, label):
    """`trellara apply --until-caught-up`: seconds and the largest VmHWM seen (KiB)."""
    peak = [0]
    t0 = time.monotonic()
    with open(os.path.join(work, f"apply-{label}.out"), "w+") as out:
        proc = subprocess.Popen([TRELLARA, "apply", "--config", config, "--until-caught-up"],
                                stdout=out, stderr=subprocess.STDOUT)
        done = threading.Event()

        def sample():
            while not done.is_set():
                v = vm_hwm_kib(proc.pid)
                if v:
                    peak[0] = max(peak[0], v)
                time.sleep(0.05)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        # The last VmHWM is read before the process is reaped (a zombie has no status figures).
        while True:
            v = vm_hwm_kib(proc.pid)
            if v:
                peak[0] = max(peak[0], v)
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        seconds = time.monotonic() - t0
        done.set()
        sampler.join()
        out.seek(0)
        output = out.read()
    if proc.returncode != 0:
        raise RuntimeError(f"trellara apply exited {proc.returncode}: {output[-3000:]}")
    return seconds, peak[0], output


def timed_native(target, sub, visible_sql):
    t0 = time.monotonic()
    target.psql(f"ALTER SUBSCRIPTION {sub} ENABLE")
    while target.query(visible_sql) != "t":
        if time.monotonic() - t0 > 1800:
            raise RuntimeError(f"native subscription {sub} did not apply within 1800 s")
        time.sleep(0.01)
    seconds = time.monotonic() - t0
    target.psql(f"ALTER SUBSCRIPTION {sub} DISABLE")
    return seconds


def one_run(run, rows, native, update):
    results = {}
    settings = {"max_wal_size": "'8GB'", "logical_decoding_work_mem": "'64MB'"}
    with Cluster(f"bench-ltx-src{run}", settings=settings) as source, \
            Cluster(f"bench-ltx-t{run}", preload=False) as target, \
            Cluster(f"bench-ltx-non{run}", preload=False) as native_on, \
            Cluster(f"bench-ltx-noff{run}", preload=False) as native_off:
        source.psql("CREATE EXTENSION trellara")
        for c in (source, target, native_on, native_off):
            c.psql(SCHEMA)
        source.psql("CREATE PUBLICATION bench_pub FOR TABLE big")
        source.psql("SELECT trellara.create_flow('bench', 'bench_pub')")
        log_dir = source.query("SELECT log_directory FROM trellara.flows WHERE name = 'bench'")
        conn = f"host={source.socket_dir} port={source.port} user=postgres dbname=postgres"
        natives = []
        if native:
            for c, name, streaming in ((native_on, "sub_on", "on"), (native_off, "sub_off", "off")):
                c.psql(f"CREATE SUBSCRIPTION {name} CONNECTION '{conn}' PUBLICATION bench_pub "
                       f"WITH (copy_data = false, enabled = false, streaming = {streaming})")
                natives.append((c, name, streaming))
        with tempfile.TemporaryDirectory() as work:
            config = os.path.join(work, "flow.toml")
            with open(config, "w") as f:
                f.write(f'[flow]\nname = "bench"\nlog_directory = "{log_dir}"\n\n'
                        f'[target]\nconninfo = "{target.conninfo()}"\n')
            steps = [("insert", f"INSERT INTO big SELECT g, md5(g::text), 0 FROM generate_series(1, {rows}) g",
                      "SELECT EXISTS (SELECT 1 FROM big WHERE id = 1)")]
            if update:
                steps.append(("update", "UPDATE big SET n = n + 1",
                              "SELECT coalesce((SELECT n = 1 FROM big WHERE id = 1), false)"))
            for label, sql, visible in steps:
                source.psql(sql)
                end = source.query("SELECT pg_current_wal_lsn()")
                wait_logged(source, end)
                seconds, peak_kib, output = timed_apply(config, work, label)
                if target.query(visible) != "t":
                    raise RuntimeError(f"{label}: the trellara target does not show the transaction:\n{output[-2000:]}")
                r = {"trellara_s": seconds, "trellara_rps": rows / seconds, "peak_mib": peak_kib / 1024}
                for c, name, streaming in natives:
                    s = timed_native(c, name, visible)
                    r[f"native_{streaming}_s"] = s
                    r[f"native_{streaming}_rps"] = rows / s
                results[label] = r
            digest = "SELECT count(*)::text || ':' || md5(string_agg(id || ',' || v || ',' || n, ';' ORDER BY id)) FROM big"
            src = source.query(digest)
            results["same"] = all(c.query(digest) == src for c in [target] + [n[0] for n in natives])
        for c, name, _ in natives:
            c.psql(f"ALTER SUBSCRIPTION {name} SET (slot_name = NONE)")
            c.psql(f"DROP SUBSCRIPTION {name}")
            source.psql(f"SELECT pg_drop_replication_slot('{name}')")
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1000000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-native", action="store_true")
    parser.add_argument("--no-update", action="store_true")
    args = parser.parse_args()
    runs = []
    for run in range(args.runs):
        r = one_run(run, args.rows, not args.no_native, not args.no_update)
        for label in ("insert", "update"):
            if label not in r:
                continue
            x = r[label]
            line = (f"run {run} {label} {args.rows} rows: trellara {x['trellara_s']:.2f} s "
                    f"({x['trellara_rps']:.0f} rows/s, peak RSS {x['peak_mib']:.1f} MiB)")
            for streaming in ("on", "off"):
                if f"native_{streaming}_s" in x:
                    line += (f" | native streaming={streaming} {x[f'native_{streaming}_s']:.2f} s "
                             f"({x[f'native_{streaming}_rps']:.0f} rows/s, ratio "
                             f"{x['trellara_rps'] / x[f'native_{streaming}_rps']:.2f})")
            print(line, flush=True)
        print(f"run {run}: targets equal to source: {r['same']}", flush=True)
        runs.append(r)
    for label in ("insert", "update"):
        if label not in runs[0]:
            continue
        keys = [k for k in runs[0][label]]
        med = {k: statistics.median(r[label][k] for r in runs) for k in keys}
        line = (f"median over {len(runs)} runs, {label}: trellara {med['trellara_rps']:.0f} rows/s, "
                f"peak RSS max {max(r[label]['peak_mib'] for r in runs):.1f} MiB")
        for streaming in ("on", "off"):
            if f"native_{streaming}_rps" in med:
                line += (f", native streaming={streaming} {med[f'native_{streaming}_rps']:.0f} rows/s "
                         f"(ratio {med['trellara_rps'] / med[f'native_{streaming}_rps']:.2f})")
        print(line)


if __name__ == "__main__":
    main()
