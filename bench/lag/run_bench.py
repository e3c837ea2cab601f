#!/usr/bin/env python3
"""End-to-end lag benchmark (issue 14 item 3): source commit → visible on the target, Trellara
(relay + daemon `trellara apply`) beside native logical replication, same source, same load.

One source (pgbench scale S, trellara preloaded) feeds two targets at once: a Trellara flow with
its daemon applier, and a native subscription (copy_data = false, both targets start from the
same copied rows). A run has two phases:

  1. native's maximum throughput: with the subscription disabled, pgbench commits --calibrate
     transactions unthrottled; the subscription is enabled and timed until its slot is confirmed
     past them (the catch-up rate is what native can apply at most). The Trellara applier then
     catches up the same transactions (not timed).
  2. the measured window: pgbench runs at --load (default 0.5) × that rate (`pgbench -R`) for
     --duration seconds, with --clients clients, and a probe client inserts one row per
     --probe-interval into `lag_probe` (id, t_source = clock_timestamp() at its INSERT, an
     autocommit transaction). On each target a deferred constraint trigger (ENABLE ALWAYS, so it
     fires for both appliers) records clock_timestamp() in `lag_seen` when the applying
     transaction commits — the moment the row becomes visible. Lag = t_seen − t_source (one
     machine, one clock). Throughput over time: `pgbench_history` (one row per pgbench
     transaction) counted on each target every 0.5 s.

--broker adds a third consumer into a third target: the broker path (issue 38) — `trellara
forward` publishing the same flow's log to a 3-node JetStream cluster (R3, file storage, on this
machine) and a remote daemon `trellara apply` reading it into its own replica.

Prints per consumer: probes seen, lag p50 / p99 / max, and applied tx/s; writes every sample to
--output DIR (lag.tsv, throughput.tsv, summary.json) and, when gnuplot is installed (Debian
gnuplot-nox, scripts/install-deps), lag.svg and throughput.svg beside them. Checks at the end that
both targets hold the source's rows. A benchmark, never a pass/fail test: the figures are what
they are (docs/performance.md).

--partitions N runs the flow in partitioned scale mode (docs/partitioned.md) with N partition appliers
beside the publisher; a probe row is visible when the publisher commits it (visibility lag).

Usage: bench/lag/run_bench.py [--scale S] [--clients C] [--duration SECONDS] [--load FRACTION] [--broker] [--partitions N]
           [--calibrate N] [--probe-interval MS] [--output DIR] [--runs R]
"""
import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))
from harness import PG_BIN, Cluster  # noqa: E402
from harness.nats_cluster import NatsCluster  # noqa: E402

# The apply benchmark's helpers (schema copy, table digest, condition wait), loaded by path: both
# scripts are called run_bench.py.
_spec = importlib.util.spec_from_file_location(
    "apply_run_bench", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "apply", "run_bench.py"))
_apply_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_apply_bench)
copy_schema, digest, wait_until = _apply_bench.copy_schema, _apply_bench.digest, _apply_bench.wait_until

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TRELLARA = os.environ.get("TRELLARA_BIN", os.path.join(REPO, "build", "bin", "trellara"))
TABLES = ["pgbench_accounts", "pgbench_branches", "pgbench_tellers", "pgbench_history", "lag_probe"]
PROBE_DDL = "CREATE TABLE lag_probe (id bigserial PRIMARY KEY, t_source timestamptz NOT NULL)"
SEEN_DDL = """
CREATE TABLE lag_seen (id bigint PRIMARY KEY, t_source timestamptz NOT NULL, t_seen timestamptz NOT NULL);
CREATE FUNCTION lag_seen_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.lag_seen VALUES (NEW.id, NEW.t_source, pg_catalog.clock_timestamp());
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER lag_seen_at_commit AFTER INSERT ON lag_probe DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION lag_seen_at_commit();
ALTER TABLE lag_probe ENABLE ALWAYS TRIGGER lag_seen_at_commit;
"""


def pgbench(cluster, *args, background=False):
    command = [os.path.join(PG_BIN, "pgbench"), *args]
    if background:
        return subprocess.Popen(command, env=cluster.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(command, env=cluster.env(), check=True, capture_output=True, text=True)


def copy_tables(source, target, tables):
    """The tables' definitions and rows, copied once, outside the timing, then analyzed."""
    copy_schema(source, target, tables)
    for t in tables:
        data = subprocess.run([os.path.join(PG_BIN, "psql"), "-X", "-q", "-c", f"COPY {t} TO STDOUT"],
                              env=source.env(), check=True, capture_output=True).stdout
        subprocess.run([os.path.join(PG_BIN, "psql"), "-X", "-q", "-c", f"COPY {t} FROM STDIN"],
                       env=target.env(), input=data, check=True, capture_output=True)
    target.psql("ANALYZE")


def percentile(values, p):
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def sample_throughput(targets, stop, samples):
    """Every 0.5 s: (seconds since start, consumer, pgbench_history rows) for each target."""
    t0 = time.monotonic()
    while not stop.is_set():
        now = time.monotonic() - t0
        for name, target in targets.items():
            samples.append((now, name, int(target.query("SELECT count(*) FROM pgbench_history"))))
        stop.wait(0.5)


def one_run(run, args, out_dir):
    with contextlib.ExitStack() as stack:
        source = stack.enter_context(Cluster(f"bench-lag-src{run}", settings={"max_wal_size": "'4GB'"}))
        trellara_target = stack.enter_context(Cluster(f"bench-lag-t{run}", preload=False))
        native_target = stack.enter_context(Cluster(f"bench-lag-n{run}", preload=False))
        targets = {"trellara": trellara_target, "native": native_target}
        if args.broker:
            # The broker path: trellara forward → 3-node JetStream cluster (R3) → remote trellara apply.
            targets["broker"] = stack.enter_context(Cluster(f"bench-lag-b{run}", preload=False))
        return measure(run, args, out_dir, source, targets, stack)


def measure(run, args, out_dir, source, targets, stack):
    trellara_target, native_target = targets["trellara"], targets["native"]
    source.psql("CREATE EXTENSION trellara")
    pgbench(source, "-i", "-s", str(args.scale), "-q")
    source.psql(PROBE_DDL)
    for target in targets.values():
        copy_tables(source, target, TABLES)
        target.psql(SEEN_DDL)
    source.psql("CREATE PUBLICATION bench_pub FOR TABLE " + ", ".join(TABLES))
    source.psql("SELECT trellara.create_flow('bench', 'bench_pub')")
    if args.partitions:
        # Partitioned scale mode (docs/partitioned.md): the documented re-partitioning step.
        source.query(f"SELECT trellara.set_partitioning('bench', 'partitioned', {args.partitions})")
        source.query("SELECT trellara.stop_flow('bench')")
        source.query("SELECT trellara.start_flow('bench')")
    log_dir = source.query("SELECT log_directory FROM trellara.flows WHERE name = 'bench'")
    conn = f"host={source.socket_dir} port={source.port} user=postgres dbname=postgres"
    native_target.psql(f"CREATE SUBSCRIPTION bench_sub CONNECTION '{conn}' PUBLICATION bench_pub "
                       f"WITH (copy_data = false, enabled = false)")

    # Phase 1: native's maximum (catch-up) throughput.
    pgbench(source, "-n", "-c", str(args.clients), "-j", str(min(args.clients, 2)), "-t",
            str(args.calibrate // args.clients))
    calibrated = (args.calibrate // args.clients) * args.clients
    end = source.query("SELECT pg_current_wal_lsn()")
    t0 = time.monotonic()
    native_target.psql("ALTER SUBSCRIPTION bench_sub ENABLE")
    wait_until("native replication's catch-up", lambda: source.query(
        f"SELECT coalesce(confirmed_flush_lsn >= '{end}', false) FROM pg_replication_slots "
        f"WHERE slot_name = 'bench_sub'") == "t", 900, 0.005)
    native_max_tps = calibrated / (time.monotonic() - t0)
    rate = max(1, int(native_max_tps * args.load))
    print(f"run {run}: native applied {calibrated} transactions at {native_max_tps:.0f} tx/s; load {rate} tx/s",
          flush=True)

    work = tempfile.mkdtemp(prefix="trellara-bench-lag-")
    applier = None
    processes = []
    try:
        config = os.path.join(work, "flow.toml")
        with open(config, "w") as f:
            f.write(f'[flow]\nname = "bench"\nlog_directory = "{log_dir}"\n\n'
                    f'[target]\nconninfo = "{trellara_target.conninfo()}"\n')
        applier_out = open(os.path.join(work, "apply.out"), "w")
        applier = subprocess.Popen([TRELLARA, "apply", "--config", config], stdout=applier_out,
                                   stderr=subprocess.STDOUT)
        processes.append(applier)
        for k in range(args.partitions):  # partitioned: one partition applier per partition beside the publisher
            processes.append(subprocess.Popen([TRELLARA, "apply", "--config", config, "--partition", str(k)],
                                              stdout=applier_out, stderr=subprocess.STDOUT))
        if "broker" in targets:
            nats = stack.enter_context(NatsCluster(name=f"lag{run}"))
            transport = f'[transport]\nkind = "nats"\nservers = "{nats.servers}"\nstream = "LAG_{run}"\n'
            for name, directory, target in (("forward", log_dir, trellara_target),
                                            ("remote", os.path.join(work, "replica"), targets["broker"])):
                with open(os.path.join(work, f"{name}.toml"), "w") as f:
                    f.write(f'[flow]\nname = "bench"\nlog_directory = "{directory}"\n\n'
                            f'[source]\nconninfo = "{source.conninfo()}"\n\n'
                            f'[target]\nconninfo = "{target.conninfo()}"\n\n{transport}')
            broker_out = open(os.path.join(work, "broker.out"), "w")
            processes.append(subprocess.Popen([TRELLARA, "forward", "--config", os.path.join(work, "forward.toml")],
                                              stdout=broker_out, stderr=subprocess.STDOUT))
            processes.append(subprocess.Popen([TRELLARA, "apply", "--config", os.path.join(work, "remote.toml")],
                                              stdout=broker_out, stderr=subprocess.STDOUT))
        history = source.query("SELECT count(*) FROM pgbench_history")
        for name, target in targets.items():
            wait_until(f"{name} catching up the calibration", lambda t=target: t.query(
                "SELECT count(*) FROM pgbench_history") == history, 900)

        # Phase 2: the measured window.
        with open(os.path.join(work, "probe.sql"), "w") as probe_script:
            probe_script.write("INSERT INTO lag_probe (t_source) VALUES (clock_timestamp());\n")
        os.chmod(work, 0o755)
        os.chmod(probe_script.name, 0o644)
        probes_per_s = max(1, 1000 // args.probe_interval)
        stop, samples = threading.Event(), []
        sampler = threading.Thread(target=sample_throughput, args=(targets, stop, samples), daemon=True)
        t_start = source.query("SELECT clock_timestamp()")
        sampler.start()
        load = pgbench(source, "-n", "-c", str(args.clients), "-j", str(min(args.clients, 2)), "-R", str(rate),
                       "-T", str(args.duration), background=True)
        probe = pgbench(source, "-n", "-c", "1", "-R", str(probes_per_s), "-T", str(args.duration), "-f",
                        probe_script.name, background=True)
        load_out, load_err = load.communicate(timeout=args.duration + 300)
        probe.communicate(timeout=args.duration + 300)
        if load.returncode != 0:
            raise RuntimeError(f"pgbench load exited {load.returncode}: {load_err[-1000:]}")
        probes = int(source.query("SELECT count(*) FROM lag_probe"))
        history = source.query("SELECT count(*) FROM pgbench_history")
        for name, target in targets.items():
            wait_until(f"{name} applying the window", lambda t=target: t.query(
                "SELECT count(*) FROM lag_seen") == str(probes) and t.query(
                "SELECT count(*) FROM pgbench_history") == history, 900)
        stop.set()
        sampler.join()
        committed_tps = next((line.split("=")[1].split()[0] for line in load_out.splitlines()
                              if line.startswith("tps =")), "?")
    finally:
        for process in processes:   # our own children, by their Popen handles
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)

    result = {"run": run, "native_max_tps": native_max_tps, "rate": rate, "source_tps": committed_tps,
              "probes": probes, "consumers": {}}
    lag_rows = []
    for name, target in targets.items():
        rows = target.query(
            "SELECT id, extract(epoch FROM t_source - '" + t_start + "'::timestamptz), "
            "extract(epoch FROM t_seen - t_source) * 1000 FROM lag_seen ORDER BY id").splitlines()
        lags = []
        for row in rows:
            pid, at, lag_ms = row.split("|")
            lags.append(float(lag_ms))
            lag_rows.append((name, float(at), float(lag_ms)))
        counts = [(t, n) for t, c, n in samples if c == name]
        span = counts[-1][0] - counts[0][0] if len(counts) > 1 else 0
        result["consumers"][name] = {
            "probes_seen": len(lags), "lag_p50_ms": percentile(lags, 50), "lag_p99_ms": percentile(lags, 99),
            "lag_max_ms": max(lags) if lags else None,
            "applied_tps_mean": (counts[-1][1] - counts[0][1]) / span if span else None}
    result["targets_equal_source"] = all(digest(source, TABLES) == digest(target, TABLES)
                                         for target in targets.values())
    native_target.psql("ALTER SUBSCRIPTION bench_sub DISABLE")
    native_target.psql("ALTER SUBSCRIPTION bench_sub SET (slot_name = NONE)")
    native_target.psql("DROP SUBSCRIPTION bench_sub")
    source.psql("SELECT pg_drop_replication_slot('bench_sub')")

    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"lag-run{run}.tsv"), "w") as f:
        f.write("# consumer\tseconds_since_start\tlag_ms\n")
        for name, at, lag_ms in lag_rows:
            f.write(f"{name}\t{at:.3f}\t{lag_ms:.3f}\n")
    with open(os.path.join(out_dir, f"throughput-run{run}.tsv"), "w") as f:
        f.write("# consumer\tseconds_since_start\tapplied_tx_per_s\n")
        for name in targets:
            counts = [(t, n) for t, c, n in samples if c == name]
            for (t_prev, n_prev), (t_now, n_now) in zip(counts, counts[1:]):
                f.write(f"{name}\t{t_now:.2f}\t{(n_now - n_prev) / (t_now - t_prev):.1f}\n")
    return result


def plot(out_dir, run, broker=False):
    """lag.svg and throughput.svg of one run, with gnuplot (Debian gnuplot-nox) when installed."""
    if shutil.which("gnuplot") is None:
        print("gnuplot not installed (scripts/install-deps installs gnuplot-nox): no plots written")
        return
    for kind, ylabel, column in (("lag", "source commit -> visible on the target (ms)", 3),
                                 ("throughput", "applied transactions/s (0.5 s samples)", 3)):
        data = os.path.join(out_dir, f"{kind}-run{run}.tsv")
        svg = os.path.join(out_dir, f"{kind}.svg")
        style = "points pt 7 ps 0.3" if kind == "lag" else "lines lw 1.5"
        script = (f"set terminal svg size 900,420 dynamic background '#ffffff'\nset output '{svg}'\n"
                  f"set xlabel 'seconds into the window'\nset ylabel '{ylabel}'\nset key top left\n"
                  f"set grid\n" + ("set logscale y\n" if kind == "lag" else "") +
                  f"plot '< grep ^trellara {data}' using 2:{column} with {style} lc rgb '#1f77b4' title 'Trellara', "
                  f"'< grep ^native {data}' using 2:{column} with {style} lc rgb '#d62728' title 'native logical "
                  f"replication'" +
                  (f", '< grep ^broker {data}' using 2:{column} with {style} lc rgb '#2ca02c' title 'Trellara "
                   f"through the broker'" if broker else "") + "\n")
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
        print(f"wrote {svg}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=int, default=10)
    parser.add_argument("--clients", type=int, default=1)
    parser.add_argument("--duration", type=int, default=60)
    parser.add_argument("--load", type=float, default=0.5, help="fraction of native's maximum throughput")
    parser.add_argument("--calibrate", type=int, default=10000, help="transactions for native's maximum")
    parser.add_argument("--probe-interval", type=int, default=20, help="milliseconds between probe rows")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=0,
                        help="partitioned scale mode with this many partition appliers (0: strict)")
    parser.add_argument("--broker", action="store_true",
                        help="a third consumer: trellara forward through a 3-node JetStream cluster to a remote applier")
    parser.add_argument("--output", default=os.path.join(REPO, "bench", "lag", "results"))
    args = parser.parse_args()
    print(f"shape: pgbench scale {args.scale}, {args.clients} client(s), {args.duration} s at {args.load:.0%} of "
          f"native's maximum, a probe every {args.probe_interval} ms, {args.runs} run(s)", flush=True)
    results = []
    for run in range(args.runs):
        r = one_run(run, args, args.output)
        results.append(r)
        line = " | ".join(f"{name}: {c['probes_seen']} probes, lag p50 {c['lag_p50_ms']:.1f} ms p99 "
                          f"{c['lag_p99_ms']:.1f} ms max {c['lag_max_ms']:.1f} ms, {c['applied_tps_mean']:.0f} tx/s"
                          for name, c in r["consumers"].items())
        print(f"run {run}: native max {r['native_max_tps']:.0f} tx/s, load {r['rate']} tx/s (source committed "
              f"{r['source_tps']} tx/s) | {line} | targets equal to source: {r['targets_equal_source']}", flush=True)
    summary = {"args": vars(args), "runs": results, "median": {}}
    for name in results[0]["consumers"]:
        summary["median"][name] = {k: statistics.median(r["consumers"][name][k] for r in results)
                                   for k in ("lag_p50_ms", "lag_p99_ms", "applied_tps_mean")}
    with open(os.path.join(args.output, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    m = summary["median"]
    print(f"median over {args.runs} runs: lag p50 / p99 trellara {m['trellara']['lag_p50_ms']:.1f} / "
          f"{m['trellara']['lag_p99_ms']:.1f} ms, native {m['native']['lag_p50_ms']:.1f} / "
          f"{m['native']['lag_p99_ms']:.1f} ms (issue 14 goal: trellara p99 < 50 ms)")
    if "broker" in m:
        print(f"median over {args.runs} runs: broker path lag p50 / p99 {m['broker']['lag_p50_ms']:.1f} / "
              f"{m['broker']['lag_p99_ms']:.1f} ms (issue 38 goal: p99 < 100 ms at half of native's maximum)")
    plot(args.output, len(results) - 1, broker=args.broker)


if __name__ == "__main__":
    main()
