#!/usr/bin/env python3
"""Catch-up apply benchmark: Trellara's applier against native logical replication, side by side.

A pgbench workload (default 20 000 transactions) is committed once on the source while it waits in
two places: the Trellara flow's durable local log, and a native subscription's slot (the
subscription exists, disabled, without initial copy, before the workload). Two empty-but-schema'd
targets then catch up: `trellara apply --until-caught-up` into one, `ALTER SUBSCRIPTION ... ENABLE`
into the other (timed until the subscription's slot is confirmed past the workload's end). Prints
transactions/s of each and the ratio trellara/native (issue 5 target >= 1.0), then checks that both
targets hold the same rows as the source. A benchmark, never a pass/fail test.

Shapes (issue 14): --scale S --clients C (pgbench), --workload inserts (transactions of 1 000-10 000
inserted rows), --mode daemon (`trellara apply` as a service runs it, timed until the target's replication
origin reaches the log's last commit, instead of --until-caught-up), --mode both (the two on the
same log, each into its own target, in alternating order: daemon/catch-up), --mode broker (the local
daemon and the broker path — trellara forward to a 3-node JetStream cluster, a remote trellara apply
reading it — on the same log, each timed from start until its target's origin reaches the last
commit: broker/local), --long-read (a REPEATABLE READ
transaction holds a snapshot open on each target throughout, as a report or pg_dump does).

Usage: bench/apply/run_bench.py [--transactions N] [--runs R] [--scale S] [--clients C]
           [--workload pgbench|inserts] [--mode catch-up|daemon|both|broker] [--long-read] [--group-transactions on|off]
           [--superseded-updates leave_out|send] [--merge-statements on|off] [--compare-bin PATH]
           [--compare-merge-statements on|off]
"""
import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))
from harness import PG_BIN, Cluster  # noqa: E402
from harness.cluster import PG_USER  # noqa: E402
from harness.nats_client import NatsClient, NatsError  # noqa: E402
from harness.nats_cluster import NatsCluster  # noqa: E402

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TRELLARA = os.environ.get("TRELLARA_BIN", os.path.join(REPO, "build", "bin", "trellara"))
PGBENCH_TABLES = ["pgbench_accounts", "pgbench_branches", "pgbench_tellers", "pgbench_history"]
INSERT_TABLES = ["bench_rows"]
# Transactions of 1 000 - 10 000 inserted rows.
INSERT_SCRIPT = """\\set n random(1000, 10000)
INSERT INTO bench_rows (a, b) SELECT g, md5(g::text) FROM generate_series(1, :n) g;
"""


def pgbench(cluster, *args):
    subprocess.run([os.path.join(PG_BIN, "pgbench"), *args], env=cluster.env(), check=True, capture_output=True)


def copy_schema(source, target, tables):
    dump = subprocess.run([os.path.join(PG_BIN, "pg_dump"), "--schema-only", *sum((["-t", t] for t in tables), [])],
                          env=source.env(), check=True, capture_output=True, text=True).stdout
    target.psql(dump)


def copy_rows(source, target, tables):
    """The tables' rows from `source` into `target` (COPY, outside any timing), then ANALYZE."""
    for t in tables:
        data = subprocess.run([os.path.join(PG_BIN, "psql"), "-X", "-q", "-c", f"COPY {t} TO STDOUT"],
                              env=source.env(), check=True, capture_output=True).stdout
        subprocess.run([os.path.join(PG_BIN, "psql"), "-X", "-q", "-c", f"COPY {t} FROM STDIN"],
                       env=target.env(), input=data, check=True, capture_output=True)
    target.psql("ANALYZE")


def digest(cluster, tables):
    return cluster.query(" UNION ALL ".join(
        f"SELECT '{t}', count(*)::text, md5(coalesce(string_agg(x::text, ',' ORDER BY x::text), '')) FROM {t} x"
        for t in tables))


def hold_snapshot(cluster):
    """A report on `cluster`: a REPEATABLE READ transaction holding its snapshot until closed."""
    report = subprocess.Popen([os.path.join(PG_BIN, "psql"), "-X", "-q"], env=cluster.env(), stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    report.stdin.write("BEGIN ISOLATION LEVEL REPEATABLE READ;\nSELECT count(*) FROM pg_class;\n")
    report.stdin.flush()
    deadline = time.monotonic() + 60
    while cluster.query("SELECT count(*) FROM pg_stat_activity WHERE backend_xmin IS NOT NULL "
                        "AND state = 'idle in transaction'") == "0":
        if time.monotonic() > deadline:
            raise RuntimeError("the long read did not start within 60 s")
        time.sleep(0.05)
    return report


def release_snapshot(report):
    report.communicate("COMMIT;\n", timeout=60)


class Poller:
    """One psql session kept open for the catch-up waits: each poll is a round trip on it, not a
    new psql process (spawning one every few ms costs CPU on this 2-core machine and slows whatever
    is being timed, Trellara's daemon and native replication alike)."""

    def __init__(self, cluster):
        self.proc = subprocess.Popen(
            [os.path.join(PG_BIN, "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", cluster.socket_dir,
             "-p", str(cluster.port), "-U", PG_USER, "-d", "postgres"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1, env=cluster.env())

    def query(self, sql):
        """The one-row, one-column answer of `sql`."""
        self.proc.stdin.write(sql.rstrip().rstrip(";") + ";\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the polling psql session ended (exit {self.proc.poll()}) on: {sql}")
        return line.strip()

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def last_commit_lsn(log_dir):
    """The commit LSN of the last transaction the flow's log holds (`trellara log records`)."""
    listing = subprocess.run([TRELLARA, "log", "records", "--dir", log_dir, "--format", "json"], check=True,
                             capture_output=True, text=True).stdout
    lsns = [json.loads(line)["commit_lsn"] for line in listing.splitlines()
            if line.strip() and json.loads(line).get("xid") is not None]
    if not lsns:
        raise RuntimeError(f"the log at {log_dir} holds no transaction")
    return max(lsns, key=lambda lsn: tuple(int(part, 16) for part in lsn.split("/")))


def wait_until(what, condition, timeout_s, interval_s=0.005):
    t0 = time.monotonic()
    while not condition():
        if time.monotonic() - t0 > timeout_s:
            raise RuntimeError(f"{what} did not happen within {timeout_s} s")
        time.sleep(interval_s)


def timed_catch_up(who, target, last_commit, transactions, t0):
    """Seconds from t0 until the target's replication origin reaches the log's last commit, and the
    dedup rows then. The origin's remote_lsn moves at the commit record, a moment before that
    commit's rows are visible to other sessions, so the count is awaited briefly (untimed) before it
    is taken as the applier's."""
    poller = Poller(target)
    try:
        wait_until(f"{who}'s catch-up", lambda: poller.query(
            "SELECT coalesce(max(remote_lsn) >= '" + last_commit + "', false) "
            "FROM pg_replication_origin_status") == "t", 900)
        seconds = time.monotonic() - t0
        count = "SELECT count(*) FROM trellara.applied_transactions"
        with contextlib.suppress(RuntimeError):
            wait_until(f"{who}'s last commits to become visible", lambda: int(poller.query(count)) >= transactions, 30)
        return seconds, int(poller.query(count))
    finally:
        poller.close()


def timed_apply(mode, target, log_dir, transactions, last_commit, args):
    """Runs `trellara apply` into `target` in `mode` (catch-up: --until-caught-up, timed to its exit;
    daemon: timed until the target's replication origin, set in the transaction that applies each
    source transaction, reaches the log's last commit — a read of shared memory; counting the dedup
    rows every 5 ms instead scanned a growing table ~200 times a second on the target, a CPU cost
    on this 2-core machine that native's wait does not pay). Returns (seconds, applier CPU s)."""
    merge = (args.compare_merge_statements or args.merge_statements) if mode == "compare" else args.merge_statements
    with tempfile.TemporaryDirectory() as work:
        config = os.path.join(work, "flow.toml")
        with open(config, "w") as f:
            f.write(f'[flow]\nname = "bench"\nlog_directory = "{log_dir}"\n\n'
                    f'[target]\nconninfo = "{target.conninfo()}"\n\n'
                    f'[apply]\ngroup_transactions = "{args.group_transactions}"\n'
                    f'superseded_updates = "{args.superseded_updates}"\n'
                    f'merge_statements = "{merge}"\n')
        command = [(args.compare_bin or TRELLARA) if mode == "compare" else TRELLARA, "apply", "--config", config]
        if mode in ("catch-up", "compare"):
            command.append("--until-caught-up")
        if os.environ.get("TRELLARA_BENCH_PERF"):  # profiling only: the figures include perf
            command = ["perf", "record", "-g", "-o", os.environ["TRELLARA_BENCH_PERF"], "--"] + command
        t0 = time.monotonic()
        with open(os.path.join(work, "apply.out"), "w+") as out:
            proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
            applied = None
            if mode == "daemon":
                seconds, applied = timed_catch_up("the daemon applier", target, last_commit, transactions, t0)
                proc.send_signal(signal.SIGTERM)
            _, status, usage = os.wait4(proc.pid, 0)
            if mode in ("catch-up", "compare"):
                seconds = time.monotonic() - t0
            proc.returncode = os.waitstatus_to_exitcode(status)
            out.seek(0)
            output = out.read()
        if proc.returncode != 0:
            raise RuntimeError(f"trellara apply ({mode}) exited {proc.returncode}: {output[-2000:]}")
        if applied is not None and applied < transactions:
            raise RuntimeError(f"the daemon applier reached the last commit {last_commit} with {applied} dedup rows, "
                               f"not {transactions}")
    # Where the applier's wall time goes: its own CPU (user + system); the rest is waiting.
    return seconds, usage.ru_utime + usage.ru_stime


def timed_broker(source, target, log_dir, transactions, last_commit, args, run):
    """The broker path (docs/broker.md): `trellara forward` publishes the log to a stream on a
    3-node JetStream cluster (R3, file storage) and a remote `trellara apply` (daemon, its own
    replica directory) applies the stream into `target`; both start together and are timed until
    the target's replication origin reaches the log's last commit, like --mode daemon. Returns
    (seconds, CPU of the applier and the forwarder)."""
    with tempfile.TemporaryDirectory() as work, NatsCluster(base_dir=os.path.join(work, "nats"),
                                                            name=f"bench{run}") as nats:
        transport = (f'[transport]\nkind = "nats"\nservers = "{nats.servers}"\nstream = "BENCH_{run}"\n')
        common = (f'[source]\nconninfo = "{source.conninfo()}"\n\n[target]\nconninfo = "{target.conninfo()}"\n\n'
                  f'[apply]\ngroup_transactions = "{args.group_transactions}"\n'
                  f'superseded_updates = "{args.superseded_updates}"\nmerge_statements = "{args.merge_statements}"\n\n')
        forward_toml, remote_toml = os.path.join(work, "flow.toml"), os.path.join(work, "remote.toml")
        with open(forward_toml, "w") as f:
            f.write(f'[flow]\nname = "bench"\nlog_directory = "{log_dir}"\n\n{common}{transport}')
        with open(remote_toml, "w") as f:
            f.write(f'[flow]\nname = "bench"\nlog_directory = "{os.path.join(work, "replica")}"\n\n{common}{transport}')
        # The stream exists (with its leader) before the clock starts, as in production: the broker
        # path is timed from the same state as the local one, not from the stream's creation.
        def create_stream():
            # A cluster that just reported healthy may not answer JetStream's API for a moment yet.
            try:
                with NatsClient(nats.client_port(0)) as client:
                    client.api(f"$JS.API.STREAM.CREATE.BENCH_{run}", {
                        "name": f"BENCH_{run}", "subjects": ["trellara.bench.log.*"], "num_replicas": 3,
                        "storage": "file", "duplicate_window": 120 * 10**9})
                    return client.stream_info(f"BENCH_{run}").get("cluster", {}).get("leader") is not None
            except (OSError, NatsError):
                return False
        wait_until("the stream and its leader", create_stream, 60, 0.2)
        out = open(os.path.join(work, "processes.out"), "w+")
        nats_cpu_before = sum(process_cpu(pid) for pid in nats.pids)
        t0 = time.monotonic()
        forwarder = subprocess.Popen([TRELLARA, "forward", "--config", forward_toml], stdout=out, stderr=subprocess.STDOUT)
        applier = subprocess.Popen([TRELLARA, "apply", "--config", remote_toml], stdout=out, stderr=subprocess.STDOUT)
        try:
            seconds, applied = timed_catch_up("the remote applier", target, last_commit, transactions, t0)
            nats_cpu = sum(process_cpu(pid) for pid in nats.pids) - nats_cpu_before
        finally:
            cpu = 0.0
            for process in (applier, forwarder):
                process.send_signal(signal.SIGTERM)   # our own children
                _, _status, usage = os.wait4(process.pid, 0)
                cpu += usage.ru_utime + usage.ru_stime
            out.seek(0)
            output = out.read()
            out.close()
        if os.environ.get("BENCH_BROKER_OUTPUT"):   # where the broker path spent its time (diagnosis)
            with open(os.environ["BENCH_BROKER_OUTPUT"], "a") as keep:
                keep.write(f"---- run {run}: {seconds:.2f} s ----\n{output}\n")
        if applied < transactions:
            raise RuntimeError(f"the remote applier reached the last commit with {applied} dedup rows, not "
                               f"{transactions}: {output[-2000:]}")
    return seconds, cpu, nats_cpu


def process_cpu(pid):
    """CPU seconds (user + system) a live process has used so far, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def forget_applier(log_dir):
    """Unregisters consumer "applier" so that the next `trellara apply` (into another target)
    registers again at the log's first offset and applies the whole log."""
    subprocess.run([TRELLARA, "log", "unregister-consumer", "applier", "--dir", log_dir], check=True,
                   capture_output=True, text=True)


def one_run(run, args):
    tables = INSERT_TABLES if args.workload == "inserts" else PGBENCH_TABLES
    modes = (["catch-up", "daemon"] if args.mode == "both" else ["daemon", "broker"] if args.mode == "broker"
             else [args.mode])
    if args.compare_bin or args.compare_merge_statements:
        modes.append("compare")
    if run % 2 == 1:
        modes.reverse()  # --mode both / --compare-bin: alternate which goes first, so drift does not favour one
    with contextlib.ExitStack() as stack:
        source = stack.enter_context(Cluster(f"bench-apply-src{run}", settings={"max_wal_size": "'4GB'"}))
        trellara_targets = {mode: stack.enter_context(Cluster(f"bench-apply-t{run}{mode[:3]}", preload=False))
                            for mode in modes}
        native_target = stack.enter_context(Cluster(f"bench-apply-n{run}", preload=False))
        all_targets = list(trellara_targets.values()) + [native_target]
        source.psql("CREATE EXTENSION trellara")
        if args.workload == "inserts":
            source.psql("CREATE TABLE bench_rows (id bigserial PRIMARY KEY, a int NOT NULL, b text)")
        else:
            pgbench(source, "-i", "-s", str(args.scale), "-q")
        for target in all_targets:
            copy_schema(source, target, tables)
        # Every target starts from the source's initial rows (copied once, outside the timing), then
        # is analyzed as autovacuum would leave it.
        for target in all_targets:
            copy_rows(source, target, tables)
        source.psql("CREATE PUBLICATION bench_pub FOR TABLE " + ", ".join(tables))
        source.psql("SELECT trellara.create_flow('bench', 'bench_pub')")
        log_dir = source.query("SELECT log_directory FROM trellara.flows WHERE name = 'bench'")
        if "broker" in modes:
            # Both paths' consumers hold the log from its start, as running ones do: otherwise the
            # relay's retention reclaims what the path timed first consumed, and the other one
            # starts in the middle of a chunked transaction (a local daemon quarantines it, a remote
            # applier refuses a stream whose start is gone) — seen with the insert-heavy shape.
            for consumer in ("forwarder", "applier"):
                subprocess.run([TRELLARA, "log", "register-consumer", consumer, "--dir", log_dir], check=True,
                               capture_output=True, text=True)
        conn = f"host={source.socket_dir} port={source.port} user=postgres dbname=postgres"
        native_target.psql(f"CREATE SUBSCRIPTION bench_sub CONNECTION '{conn}' PUBLICATION bench_pub "
                           f"WITH (copy_data = false, enabled = false)")
        clients = args.clients
        per_client = args.transactions // clients
        transactions = per_client * clients
        if args.workload == "inserts":
            with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
                script.write(INSERT_SCRIPT)
            os.chmod(script.name, 0o644)
            pgbench(source, "-n", "-c", str(clients), "-j", str(min(clients, 2)), "-t", str(per_client),
                    "-f", script.name, "--random-seed", str(1000 + run))
            os.unlink(script.name)
        else:
            pgbench(source, "-n", "-c", str(clients), "-j", str(min(clients, 2)), "-t", str(per_client))
        rows = int(source.query(f"SELECT count(*) FROM {tables[0]}")) if args.workload == "inserts" else 0
        end = source.query("SELECT pg_current_wal_lsn()")
        wait_until("the flow's capture of the workload",
                   lambda: source.query(f"SELECT log_durable_lsn >= '{end}' FROM trellara.status()") == "t", 600, 0.05)
        last_commit = last_commit_lsn(log_dir) if "daemon" in modes or "broker" in modes else None
        reports = [hold_snapshot(t) for t in all_targets] if args.long_read else []
        timed = {}
        try:
            local_ran = False  # consumer "applier" of the source log exists only after a local apply
            for mode in modes:
                if mode != "broker" and local_ran:
                    forget_applier(log_dir)
                local_ran = local_ran or mode != "broker"
                if mode == "broker":
                    timed[mode] = timed_broker(source, trellara_targets[mode], log_dir, transactions, last_commit,
                                               args, run)
                else:
                    timed[mode] = timed_apply(mode, trellara_targets[mode], log_dir, transactions, last_commit, args)
            poller = Poller(source)
            try:
                t0 = time.monotonic()
                native_target.psql("ALTER SUBSCRIPTION bench_sub ENABLE")
                wait_until("native replication's catch-up", lambda: poller.query(
                    f"SELECT coalesce(confirmed_flush_lsn >= '{end}', false) FROM pg_replication_slots "
                    f"WHERE slot_name = 'bench_sub'") == "t", 900)
                native_s = time.monotonic() - t0
            finally:
                poller.close()
        finally:
            for report in reports:
                release_snapshot(report)
        source_digest = digest(source, tables)
        same = all(digest(t, tables) == source_digest for t in all_targets)
        native_target.psql("ALTER SUBSCRIPTION bench_sub DISABLE")
        native_target.psql("ALTER SUBSCRIPTION bench_sub SET (slot_name = NONE)")
        native_target.psql("DROP SUBSCRIPTION bench_sub")
        source.psql("SELECT pg_drop_replication_slot('bench_sub')")
        first = (timed["catch-up"] if args.mode == "both" else timed["daemon"] if args.mode == "broker"
                 else timed[args.mode])
        result = {"trellara_tps": transactions / first[0], "native_tps": transactions / native_s,
                  "ratio": native_s / first[0], "trellara_s": first[0], "native_s": native_s, "same": same,
                  "applier_cpu_s": first[1], "rows": rows, "transactions": transactions}
        if "compare" in modes:
            compare_s, compare_cpu = timed["compare"]
            result.update({"compare_s": compare_s, "compare_cpu_s": compare_cpu, "compare_tps": transactions / compare_s,
                           "first_vs_compare": compare_s / first[0], "order": " then ".join(modes)})
        if args.mode == "broker":
            broker_s, broker_cpu, nats_cpu = timed["broker"]
            result.update({"broker_s": broker_s, "broker_tps": transactions / broker_s, "broker_cpu_s": broker_cpu,
                           "nats_cpu_s": nats_cpu,
                           "broker_vs_local": first[0] / broker_s, "broker_ratio": native_s / broker_s,
                           "order": " then ".join(modes)})
        if args.mode == "both":
            daemon_s, daemon_cpu = timed["daemon"]
            result.update({"daemon_s": daemon_s, "daemon_tps": transactions / daemon_s, "daemon_cpu_s": daemon_cpu,
                           "daemon_ratio": native_s / daemon_s, "daemon_vs_catch_up": first[0] / daemon_s,
                           "order": " then ".join(modes)})
        return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transactions", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scale", type=int, default=1)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--workload", choices=["pgbench", "inserts"], default="pgbench")
    parser.add_argument("--mode", choices=["catch-up", "daemon", "both", "broker"], default="catch-up",
                        help="both: catch-up and daemon on the same log, each into its own target, in "
                             "alternating order; prints daemon/catch-up. broker: the local daemon and the broker "
                             "path (forward + remote apply through a 3-node JetStream cluster) on the same log, "
                             "alternating; prints broker/local")
    parser.add_argument("--long-read", action="store_true")
    parser.add_argument("--compare-bin", help="another trellara binary that applies the same log in catch-up mode "
                        "into its own target in each run (alternating order): prints trellara/compare")
    parser.add_argument("--compare-merge-statements", choices=["on", "off"],
                        help="a compare run (as --compare-bin, default binary: the same) with this "
                             "apply.merge_statements")
    parser.add_argument("--group-transactions", choices=["on", "off"], default="on",
                        help="the applier's apply.group_transactions (docs/apply.md)")
    parser.add_argument("--superseded-updates", choices=["leave_out", "send"], default="leave_out",
                        help="the applier's apply.superseded_updates (docs/apply.md)")
    parser.add_argument("--merge-statements", choices=["on", "off"], default="on",
                        help="the applier's apply.merge_statements (docs/apply.md)")
    args = parser.parse_args()
    print(f"shape: workload {args.workload}, scale {args.scale}, clients {args.clients}, {args.transactions} "
          f"transactions, mode {args.mode}, long read {'on' if args.long_read else 'off'}, "
          f"group_transactions {args.group_transactions}, superseded_updates {args.superseded_updates}, merge_statements {args.merge_statements}", flush=True)
    results = []
    for run in range(args.runs):
        r = one_run(run, args)
        rows = f" | {r['rows']} rows" if r["rows"] else ""
        label = "catch-up" if args.mode == "both" else "trellara"
        print(f"run {run}: {label} {r['trellara_s']:.2f} s ({r['trellara_tps']:.0f} tx/s) | native "
              f"{r['native_s']:.2f} s ({r['native_tps']:.0f} tx/s) | ratio {r['ratio']:.2f} | "
              f"applier CPU {r['applier_cpu_s']:.2f} s{rows} | "
              f"targets equal to source: {r['same']}", flush=True)
        if "compare_s" in r:
            print(f"run {run}: compare {r['compare_s']:.2f} s ({r['compare_tps']:.0f} tx/s, applier CPU "
                  f"{r['compare_cpu_s']:.2f} s) | trellara/compare {r['first_vs_compare']:.2f} ({r['order']})",
                  flush=True)
        if args.mode == "broker":
            print(f"run {run}: broker {r['broker_s']:.2f} s ({r['broker_tps']:.0f} tx/s, applier + forwarder CPU "
                  f"{r['broker_cpu_s']:.2f} s, three nats-servers' CPU {r['nats_cpu_s']:.2f} s) | broker/local {r['broker_vs_local']:.2f} | broker/native "
                  f"{r['broker_ratio']:.2f} ({r['order']})", flush=True)
        if args.mode == "both":
            print(f"run {run}: daemon {r['daemon_s']:.2f} s ({r['daemon_tps']:.0f} tx/s, applier CPU "
                  f"{r['daemon_cpu_s']:.2f} s) | ratio to native {r['daemon_ratio']:.2f} | daemon/catch-up "
                  f"{r['daemon_vs_catch_up']:.2f} ({r['order']})", flush=True)
        results.append(r)
    med = {k: statistics.median(r[k] for r in results) for k in ("trellara_tps", "native_tps", "ratio")}
    print(f"median over {args.runs} runs: trellara {med['trellara_tps']:.0f} tx/s, native {med['native_tps']:.0f} "
          f"tx/s, ratio trellara/native {med['ratio']:.2f} (issue 14 goal >= 2.0)")
    if "compare_s" in results[0]:
        c = {k: statistics.median(r[k] for r in results) for k in ("compare_tps", "first_vs_compare")}
        print(f"median over {args.runs} runs: compare {c['compare_tps']:.0f} tx/s, trellara/compare on the same "
              f"log {c['first_vs_compare']:.2f}")
    if args.mode == "broker":
        b = {k: statistics.median(r[k] for r in results) for k in ("broker_tps", "broker_vs_local", "broker_ratio")}
        print(f"median over {args.runs} runs: broker path {b['broker_tps']:.0f} tx/s, broker/local daemon on the same "
              f"log {b['broker_vs_local']:.2f} (issue 38 goal >= 0.8), broker/native {b['broker_ratio']:.2f}")
    if args.mode == "both":
        d = {k: statistics.median(r[k] for r in results) for k in ("daemon_tps", "daemon_ratio", "daemon_vs_catch_up")}
        print(f"median over {args.runs} runs: daemon {d['daemon_tps']:.0f} tx/s, ratio daemon/native "
              f"{d['daemon_ratio']:.2f}, daemon/catch-up on the same log {d['daemon_vs_catch_up']:.2f} "
              f"(issue 14 goal: within 10 %)")


if __name__ == "__main__":
    main()
