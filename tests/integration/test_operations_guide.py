#!/usr/bin/env python3
"""Integration: docs/operations.md, followed step by step on a fresh pair of clusters.

The test reads every `<!-- step: NAME -->` block of docs/operations.md and carries it out in the
document's order, so the guide and what works cannot drift apart:

  source-conf    appended to the source's postgresql.conf (the source starts as a server that
                 already holds data: wal_level = replica, trellara not preloaded), then
                 `pg_ctl restart`; output_plugin_libraries is dropped on a minor without it
  source-sql     run on the source as a superuser
  source-running polled until it returns running|t (the relay holds its slot)
  source-check   must return no row
  schema-copy    run by bash with SOURCE_CONNINFO / TARGET_CONNINFO set
  target-sql     run on the target as a superuser
  config         written with the log directory create_flow returned, both clusters' sockets and a
                 free metrics port substituted
  check          `trellara check` must exit 0
  service        the unit file's ExecStart (packaging/systemd/trellara-apply@.service, %i = app) is
                 started as a process (no systemd here); it must come up running
  snapshot       must exit 0 while the applier runs and the source keeps writing
  verify         must exit 0
  watch          the curl line is fetched with urllib and its grep pattern must match each metric;
                 `trellara status` must exit 0
  upgrade        run on the source
  remove-source  after the applier was stopped with SIGTERM (exit 0); run on the source
  remove-target  run on the target
Between verify and removal the target must hold exactly the source's rows.
"""

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import CaptureFailure, TRELLARA_BIN, run_scenarios, scenario, wait_for  # noqa: E402
from flow_pair import FlowPair, table_digest  # noqa: E402
from harness import PG_BIN  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
GUIDE = os.path.join(REPO, "docs", "operations.md")
UNIT = os.path.join(REPO, "packaging", "systemd", "trellara-apply@.service")
ORDER = ["source-conf", "source-sql", "source-running", "source-check", "schema-copy", "target-sql", "config", "check", "service",
         "snapshot", "verify", "watch", "upgrade", "remove-source", "remove-target"]
STEP = re.compile(r"<!-- step: (\S+) -->\s*```(\w+)\n(.*?)```", re.S)
EXISTING_DATA = """
CREATE TABLE customers (id bigint PRIMARY KEY, name text NOT NULL, email text);
CREATE TABLE orders (id bigint PRIMARY KEY, customer_id bigint NOT NULL REFERENCES customers, amount numeric(12,2),
                     placed_at timestamptz NOT NULL DEFAULT now());
INSERT INTO customers SELECT g, 'customer ' || g, 'c' || g || '@example.com' FROM generate_series(1, 2000) g;
INSERT INTO orders SELECT g, 1 + g % 2000, (g % 997) * 1.25, '2026-01-01'::timestamptz + g * interval '1 minute'
  FROM generate_series(1, 20000) g;
"""
TABLES = ("public.customers", "public.orders")


def read_steps():
    with open(GUIDE) as f:
        text = f.read()
    steps = [(name, lang, body) for name, lang, body in STEP.findall(text)]
    names = [name for name, _, _ in steps]
    if names != ORDER:
        raise CaptureFailure(f"docs/operations.md holds the steps {names}; this test follows {ORDER}: update both")
    return {name: body for name, _, body in steps}


class GuidePair(FlowPair):
    """A source that starts as a server already holding data (wal_level = replica, trellara not
    preloaded: the guide's step source-conf changes both) and an empty target, in a work directory
    the postgres user can read. The guide's own steps create the extension, the flow, the target's
    schema and the configuration."""

    def __init__(self, name):
        super().__init__(name, source_sql=EXISTING_DATA, target_sql="", shared_work_dir=True, create_flow=False,
                         source_settings={"wal_level": "replica", "shared_preload_libraries": "''"})


def trellara(line, config):
    """A `trellara ...` line of the guide as an argv for the build under test."""
    argv = shlex.split(line)
    if argv[0] != "trellara":
        raise CaptureFailure(f"expected a trellara command, got {line!r}")
    return [TRELLARA_BIN] + [config if a == "/etc/trellara/app.toml" else a for a in argv[1:]]


def run(argv, expect=0, what=""):
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    print(f"$ {' '.join(argv[1:])} -> exit {result.returncode}\n{result.stdout.strip()[-1500:]}")
    if result.returncode != expect:
        raise CaptureFailure(f"{what or argv} exited {result.returncode}, expected {expect}\n"
                             f"stdout: {result.stdout[-2000:]}\nstderr: {result.stderr[-2000:]}")
    return result


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def restart(cluster):
    cluster._run_as_postgres([os.path.join(PG_BIN, "pg_ctl"), "restart", "-D", cluster.data_dir, "-l",
                              cluster.log_path, "-w", "-t", "120"], what="pg_ctl restart")
    cluster.pid = cluster._read_postmaster_pid()
    cluster._write_state()


def server_knows(cluster, setting):
    return cluster.query(f"SELECT count(*) FROM pg_settings WHERE name = '{setting}'") == "1"


def write_config(body, path, log_dir, source, target, metrics_port):
    section, out = None, []
    for line in body.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            section = stripped.strip("[]")
        elif stripped.startswith("log_directory"):
            line = f'log_directory = "{log_dir}"'
        elif stripped.startswith("conninfo") and section == "source":
            line = f'conninfo = "{source.conninfo()}"'
        elif stripped.startswith("conninfo") and section == "target":
            line = f'conninfo = "host={target.socket_dir} port={target.port} dbname=postgres user=trellara_apply"'
        elif stripped.startswith("listen"):
            line = f'listen = "127.0.0.1:{metrics_port}"'
        out.append(line)
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    os.chmod(path, 0o644)


def unit_exec_start(config):
    with open(UNIT) as f:
        lines = [line.strip() for line in f if line.strip().startswith("ExecStart=")]
    if len(lines) != 1:
        raise CaptureFailure(f"{UNIT} holds {len(lines)} ExecStart lines, expected 1")
    argv = shlex.split(lines[0][len("ExecStart="):].replace("%i", "app"))
    if argv[0] != "/usr/local/bin/trellara" or argv[1] != "apply" or "/etc/trellara/app.toml" not in argv:
        raise CaptureFailure(f"the unit's ExecStart is {argv}; this test expects /usr/local/bin/trellara apply "
                             f"--config /etc/trellara/%i.toml")
    return [TRELLARA_BIN] + [config if a == "/etc/trellara/app.toml" else a for a in argv[1:]]


@scenario(suite="operations", invariants=(
    "docs/operations.md works as written on a fresh pair of clusters, from an existing server with data "
    "to a monitored flow, an upgrade statement and removal",))
def operations_guide_works_step_by_step():
    steps = read_steps()
    with GuidePair("ops") as pair:
        source, target, work = pair.source, pair.target, pair.work.name
        # 2. postgresql.conf, restart.
        conf = [line for line in steps["source-conf"].splitlines()
                if not (line.startswith("output_plugin_libraries") and not server_knows(source, "output_plugin_libraries"))]
        with open(os.path.join(source.data_dir, "postgresql.conf"), "a") as f:
            f.write("\n# --- docs/operations.md step source-conf ---\n" + "\n".join(conf) + "\n")
        restart(source)
        if source.query("SHOW wal_level") != "logical" or "trellara" not in source.query("SHOW shared_preload_libraries"):
            raise CaptureFailure("after step source-conf and a restart the source is not preloaded with wal_level logical")
        # 3., 4. extension, roles, publication, flow; check.
        print(source.query(steps["source-sql"]))
        wait_for("the relay to hold its slot (step source-running)",
                 lambda: source.query(steps["source-running"]) == "running|t", 60)
        critical = source.query(steps["source-check"])
        if critical:
            raise CaptureFailure(f"trellara.check('app') reports critical findings after the guide's set-up:\n{critical}")
        log_dir = source.query("SELECT log_directory FROM trellara.flows WHERE name = 'app'")
        # Changes the flow captures, on top of the rows it never saw.
        source.query("INSERT INTO customers SELECT g, 'late ' || g, NULL FROM generate_series(2001, 2100) g; "
                     "UPDATE orders SET amount = amount + 1 WHERE id % 10 = 0; DELETE FROM orders WHERE id % 97 = 0")
        # 5. schema copy and the target role.
        env = dict(os.environ, PATH=PG_BIN + ":" + os.environ.get("PATH", ""),
                   SOURCE_CONNINFO=source.conninfo(), TARGET_CONNINFO=target.conninfo())
        copied = subprocess.run(["bash", "-euo", "pipefail", "-c", steps["schema-copy"]], env=env,
                                capture_output=True, text=True)
        if copied.returncode != 0:
            raise CaptureFailure(f"step schema-copy failed: {copied.stderr[-2000:]}")
        target.query(steps["target-sql"])
        # 6. configuration, check.
        config = os.path.join(work, "app.toml")
        metrics_port = free_port()
        write_config(steps["config"], config, log_dir, source, target, metrics_port)
        run(trellara(steps["check"].strip(), config), 0, "step check")
        # 7. the service, the copy of existing rows while the source keeps writing, verify.
        errors = open(os.path.join(work, "apply.stderr"), "w+")
        applier = subprocess.Popen(unit_exec_start(config), stdout=subprocess.DEVNULL, stderr=errors, text=True)
        try:
            wait_for("the service's applier to run", lambda: applier.poll() is None and target.query(
                "SELECT count(*) FROM pg_tables WHERE schemaname = 'trellara' AND tablename = 'apply_status'")
                == "1" and target.query("SELECT coalesce(max(state), '') FROM trellara.apply_status WHERE flow = 'app'")
                in ("running", "caught_up", "blocked"), 60)
            source.query("INSERT INTO orders SELECT g, 1 + g % 2100, 3.5, now() FROM generate_series(20001, 20500) g")
            run(trellara(steps["snapshot"].strip(), config), 0, "step snapshot")
            source.query("UPDATE customers SET email = 'changed@example.com' WHERE id <= 50")
            run(trellara(steps["verify"].strip(), config), 0, "step verify")
            # 8. what to watch.
            curl, status = [line for line in steps["watch"].splitlines() if line.strip()]
            url = re.search(r"http://\S+", curl).group(0).replace("9187", str(metrics_port))
            pattern = re.search(r"grep -E '([^']+)'", curl).group(1)
            wanted = ("up", "state", "quarantine_open", "lag_seconds")

            def scraped():
                body = urllib.request.urlopen(url, timeout=10).read().decode()
                lines = [line for line in body.splitlines() if re.search(pattern, line)]
                return all(any(line.startswith(f"trellara_apply_{m}") for line in lines) for m in wanted) and lines
            wait_for("the guide's metrics lines", scraped, 60)
            print("\n".join(scraped()))
            run(trellara(status.strip(), config), 0, "step watch (status)")
            wait_for("the target to hold exactly the source's rows", lambda: all(
                table_digest(source, t) == table_digest(target, t) for t in TABLES), 120)
            pair.assert_same_data(TABLES, "the target")
            wait_for("every onboarding quarantine to be retried and resolved", lambda: target.query(
                "SELECT count(*) FROM trellara.quarantine WHERE state <> 'resolved'") == "0", 60)
            print("quarantine rows (onboarding): " + target.query("SELECT count(*) || ' resolved' FROM trellara.quarantine"))
        finally:
            if applier.poll() is None:
                applier.send_signal(signal.SIGTERM)  # our own child: it finishes and exits 0
            applier.wait(timeout=120)
            errors.seek(0)
            stderr = errors.read()
            errors.close()
        if applier.returncode != 0:
            raise CaptureFailure(f"the service's applier exited {applier.returncode} on SIGTERM: {stderr[-2000:]}")
        # 9., 10. upgrade statement, removal.
        source.query(steps["upgrade"])
        source.query(steps["remove-source"])
        target.query(steps["remove-target"])
        left = " ".join(source.query(q) for q in (
            "SELECT count(*) FROM pg_replication_slots", "SELECT count(*) FROM pg_extension WHERE extname = 'trellara'",
            "SELECT count(*) FROM pg_namespace WHERE nspname = 'trellara'",
            "SELECT count(*) FROM pg_roles WHERE rolname IN ('trellara_admin', 'trellara_monitor')"))
        if left != "0 0 0 0" or os.path.exists(log_dir):
            raise CaptureFailure(f"after removal: slots, extension, schema, roles {left}; log directory present "
                                 f"{os.path.exists(log_dir)}")
        if target.query("SELECT count(*) FROM pg_replication_origin") != "0":
            raise CaptureFailure("the target still has a replication origin after removal")
        if target.query("SELECT count(*) FROM orders") != source.query("SELECT count(*) FROM orders"):
            raise CaptureFailure("removal changed the target's rows")
    print("ok: operations_guide_works_step_by_step")


if __name__ == "__main__":
    run_scenarios([operations_guide_works_step_by_step])
