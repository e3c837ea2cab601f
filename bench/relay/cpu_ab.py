#!/usr/bin/env python3
"""A/B of capture CPU: the relay worker's CPU seconds against the pgoutput peek backend's over the
same pgbench WAL, alternating two builds of trellara.so (each copied over the installed one; the
second is left installed). CPU time (utime+stime, 10 ms ticks) is less sensitive than wall time to
other load on a shared machine. A benchmark: prints figures, never decides pass/fail.

Usage (as a user allowed to install the extension): bench/relay/cpu_ab.py BEFORE.so AFTER.so [ROUNDS]
with TX=<transactions per run> (default 20000) in the environment."""
import os, sys, time, subprocess, shutil, statistics
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))
from harness import Cluster
PGBENCH = "/usr/lib/postgresql/15/bin/pgbench"
SO = "/usr/lib/postgresql/15/lib/trellara.so"
TCK = os.sysconf("SC_CLK_TCK")
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TCK
def run(label, N=int(os.environ.get("TX", "20000"))):
    with Cluster("cap-ab", settings={"max_wal_size": "'4GB'", "checkpoint_timeout": "'30min'"}) as c:
        c.psql("CREATE EXTENSION trellara")
        subprocess.run([PGBENCH, "-i", "-s", "4", "-q"], env=c.env(), check=True, capture_output=True)
        c.psql("CREATE PUBLICATION bench_pub FOR TABLE pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history")
        c.psql("SELECT trellara.create_flow('p', 'bench_pub')")
        for _ in range(400):
            if c.query("SELECT state FROM trellara.status() WHERE flow='p'").strip() == "running": break
            time.sleep(0.05)
        c.psql("SELECT trellara.stop_flow('p')")
        c.psql("SELECT 'x' FROM pg_create_logical_replication_slot('pgo', 'pgoutput')")
        subprocess.run([PGBENCH, "-n", "-c", "4", "-j", "4", "-t", str(N // 4)], env=c.env(), check=True, capture_output=True)
        end = c.query("SELECT pg_current_wal_lsn()").strip()
        env = c.env()
        p = subprocess.Popen(["psql", "-XAtq", "-d", "postgres"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        p.stdin.write("SELECT pg_backend_pid();\n"); p.stdin.flush()
        bpid = int(p.stdout.readline()); c0 = cpu(bpid)
        p.stdin.write("SELECT count(*) FROM pg_logical_slot_peek_binary_changes('pgo', NULL, NULL, 'proto_version', '1', 'publication_names', 'bench_pub');\n"); p.stdin.flush()
        p.stdout.readline(); pg_cpu = cpu(bpid) - c0
        p.stdin.write("\\q\n"); p.stdin.flush(); p.wait()
        lb0 = int(c.query("SELECT coalesce(log_bytes,0) FROM trellara.status() WHERE flow='p'"))
        t0 = time.monotonic()
        c.psql("SELECT trellara.start_flow('p')")
        pid = None
        while pid is None:
            r = c.query("SELECT worker_pid FROM trellara.status() WHERE flow='p'").strip()
            if r: pid = int(r)
            else: time.sleep(0.002)
        last = 0
        while c.query(f"SELECT confirmed_flush_lsn >= '{end}'::pg_lsn FROM pg_replication_slots WHERE slot_name='trellara_p'").strip() != "t":
            try: last = cpu(pid)
            except Exception: pass
            time.sleep(0.005)
        try: last = cpu(pid)
        except Exception: pass
        wall = time.monotonic() - t0
        lb = int(c.query("SELECT log_bytes FROM trellara.status() WHERE flow='p'")) - lb0
        print(f"{label}: pgoutput cpu {pg_cpu:.2f} s | relay worker cpu {last:.2f} s | cpu ratio {pg_cpu/last:.2f} | relay wall {wall:.2f} s | log bytes/change {lb/(4*N):.1f}", flush=True)
        return pg_cpu / last, last, pg_cpu
res = {}
builds = {"before": sys.argv[1], "after": sys.argv[2]}
for i in range(int(sys.argv[3]) if len(sys.argv) > 3 else 3):
    for label, so in builds.items():
        shutil.copy(so, SO)
        res.setdefault(label, []).append(run(label))
for label, r in res.items():
    print(f"median {label}: cpu ratio pgoutput/relay {statistics.median(x[0] for x in r):.2f}, relay cpu {statistics.median(x[1] for x in r):.2f} s, pgoutput cpu {statistics.median(x[2] for x in r):.2f} s")
shutil.copy(builds["after"], SO)
