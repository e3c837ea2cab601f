"""The failover scripts' shared set-up (tests/integration/test_failover.py): a primary with trellara
and flow `app` (table t, publication FOR ALL TABLES), a target with the same table, and a streaming
physical standby made with pg_basebackup, all real servers started and stopped by PID.

The flow's log_directory is an absolute path in trellara.flows, replicated to the standby. On two
machines with the same PGDATA path it names each server's own copy; on this one machine a symlink
plays that part: it points at the primary's data directory, then, from the promotion on, at the
standby's (`Failover.switch_link_to_standby`).
"""

import os
import shutil
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from capture_support import (TRELLARA_BIN, CaptureFailure, lsn_to_int, wait_for, worker_pid,  # noqa: E402
                             write_flow_config)
from flow_pair import run_trellara, table_digest, wait_log_covers_source  # noqa: E402
from harness import Cluster, ClusterError  # noqa: E402

STANDBY_PHYSICAL_SLOT = "failover_standby"
TABLE_SQL = "CREATE TABLE t (id bigserial PRIMARY KEY, label text NOT NULL, at timestamptz NOT NULL DEFAULT now())"


def _with_env(env, start):
    """Runs start() with `env` added to this process's environment (the server inherits it)."""
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        return start()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def wait_promoted_log_timeline(cluster, flow="app", timeout_s=60):
    """The lines of the promoted server's new log's TIMELINE once its relay wrote them. The relay's
    process shows before it has moved the standby's copy of the old log aside (that copy's TIMELINE
    says "1") and written the new log's, so a test reading it at once can read the old one."""
    path = os.path.join(cluster.data_dir, "pg_trellara", flow, "TIMELINE")

    def written():
        try:
            with open(path) as recorded:
                lines = recorded.read().splitlines()
        except FileNotFoundError:
            return None
        return lines if len(lines) >= 2 else None
    return wait_for(f"the relay of flow {flow} on the promoted server to start its new log (TIMELINE with the branch "
                    "point)", written, timeout_s)


class Failover:
    """Primary + target (+ standby, started by `start_standby`). source_ack: the flow's
    trellara.flows.source_ack; hold: trellara.standby_slot_names names the standby's physical slot.
    primary_env / standby_env: extra environment of that server (TRELLARA_FAULTS for a negative
    control; trellara.enable_test_defects is on when it names a defect)."""

    def __init__(self, name, source_ack="local", hold=False, standby_sync=True, standby_feedback=True,
                 primary_env=None, standby_env=None):
        self.name = name
        self.source_ack = source_ack
        self.hold = hold
        self.primary_env = primary_env or {}
        self.standby_env = standby_env or {}
        primary_settings = {"trellara.progress_interval": "'100ms'"}
        if "defect." in self.primary_env.get("TRELLARA_FAULTS", ""):
            primary_settings["trellara.enable_test_defects"] = "on"
        standby_settings = {"hot_standby_feedback": "on" if standby_feedback else "off",
                            "trellara.standby_slot_sync": "on" if standby_sync else "off",
                            "trellara.progress_interval": "'100ms'"}
        if "defect." in self.standby_env.get("TRELLARA_FAULTS", ""):
            standby_settings["trellara.enable_test_defects"] = "on"
        self.primary = Cluster(f"{name}-primary", settings=primary_settings)
        self.standby = Cluster(f"{name}-standby", settings=standby_settings)
        self.target = Cluster(f"{name}-target", preload=False)
        self.link_root = None
        self.primary_stopped = False

    # --- set-up --------------------------------------------------------------------------------

    def __enter__(self):
        try:
            self.link_root = tempfile.mkdtemp(prefix=f"trellara-{self.name}-link-")
            os.chmod(self.link_root, 0o755)
            _with_env(self.primary_env, self.primary.start)
            self.target.start()
            self.target.query(TABLE_SQL)
            os.symlink(self.primary.data_dir, self.link)
            self.primary.query(TABLE_SQL)
            self.primary.query("CREATE EXTENSION trellara")
            self.primary.query("CREATE PUBLICATION pub FOR ALL TABLES")
            self.primary.query(f"SELECT trellara.create_flow('app', 'pub', log_directory => '{self.log_dir}')")
            wait_for("the relay of flow app to run", lambda: worker_pid(self.primary), 60)
            if self.source_ack != "local":
                self.primary.query(f"SELECT trellara.set_source_ack('app', '{self.source_ack}')")
                self.primary.query("SELECT trellara.stop_flow('app')")
                wait_for("the relay of flow app to stop", lambda: not worker_pid(self.primary), 60)
                self.primary.query("SELECT trellara.start_flow('app')")
                wait_for("the relay of flow app to run again", lambda: worker_pid(self.primary), 60)
            self.config_old = write_flow_config(os.path.join(self.link_root, "old.toml"), "app", self.log_dir,
                                                self.target.conninfo(), source_conninfo=self.primary.conninfo())
            return self
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def start_standby(self):
        _with_env(self.standby_env, lambda: self.standby.start_standby_of(self.primary, STANDBY_PHYSICAL_SLOT))
        if self.hold:
            self.primary.query(f"ALTER SYSTEM SET trellara.standby_slot_names = '{STANDBY_PHYSICAL_SLOT}'")
            self.primary.query("SELECT pg_reload_conf()")

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            for cluster in (self.primary, self.standby):
                if cluster.base_dir:
                    cluster.print_log_tail(f"cluster {cluster.name}: server log after failure")
        for cluster in (self.standby, self.target, self.primary):
            try:
                cluster.stop()
            except ClusterError as failed:
                print(f"failover: stopping {cluster.name}: {failed}", file=sys.stderr)
        if self.link_root:
            shutil.rmtree(self.link_root, ignore_errors=True)
        return False

    # --- paths ---------------------------------------------------------------------------------

    @property
    def link(self):
        return os.path.join(self.link_root, "pgdata")

    @property
    def log_dir(self):
        return os.path.join(self.link, "pg_trellara", "app")

    def new_config(self, name="new.toml"):
        return write_flow_config(os.path.join(self.link_root, name), "app", self.log_dir, self.target.conninfo(),
                                 source_conninfo=self.standby.conninfo())

    # --- reading the servers -------------------------------------------------------------------

    def standby_slot(self):
        """(restart_lsn, confirmed_flush_lsn) of trellara_app on the standby, or None."""
        text = self.standby.query("SELECT restart_lsn || ' ' || confirmed_flush_lsn FROM pg_replication_slots "
                                  "WHERE slot_name = 'trellara_app' AND slot_type = 'logical'")
        if not text:
            return None
        restart, confirmed = text.split()
        return lsn_to_int(restart), lsn_to_int(confirmed)

    def primary_confirmed(self):
        return lsn_to_int(self.primary.query(
            "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'trellara_app'"))

    def wait_standby_synced(self, at_least=None, timeout_s=120):
        """Until the standby's slot exists and is confirmed at or past `at_least` (default: the
        primary slot's confirmed position now). CHECKPOINTs on the primary log running_xacts so its
        restart_lsn moves on."""
        want = self.primary_confirmed() if at_least is None else at_least

        def synced():
            self.primary.query("CHECKPOINT")
            slot = self.standby_slot()
            return slot is not None and slot[1] >= want
        wait_for(f"the standby's slot trellara_app to be synced through {want:X}", synced, timeout_s, interval_s=0.5)

    def target_applied_lsn(self):
        text = self.target.query("SELECT coalesce(max(commit_lsn)::text, '0/0') FROM trellara.applied_transactions "
                                 "WHERE flow = 'app'")
        return lsn_to_int(text)

    def relay_metric(self, cluster, metric):
        value = cluster.query(f"SELECT value FROM trellara.relay_metrics() WHERE flow = 'app' AND metric = '{metric}'")
        return float(value) if value else None

    # --- workload and promotion ----------------------------------------------------------------

    def commit_rows(self, cluster, count, label):
        """`count` one-row transactions on `cluster`."""
        cluster.query("".join(f"INSERT INTO t (label) VALUES ('{label} {i}');\n" for i in range(count)))

    def switch_link_to_standby(self):
        os.symlink(self.standby.data_dir, self.link + ".new")
        os.replace(self.link + ".new", self.link)

    def promote(self, how="immediate"):
        """The primary goes away (`immediate`: SIGQUIT, as a crash; `fast`: a clean shutdown that
        sends every WAL record to the standby first), the link moves, the standby is promoted."""
        if how == "fast":
            self.primary.stop_fast()
        else:
            self.primary.stop_immediate()
        self.primary_stopped = True
        self.switch_link_to_standby()
        self.standby.promote()

    def promote_a_cut_off_standby(self, apply_old_log, ahead=15):
        """A target ahead of the promoted server: 20 transactions the standby receives, then the
        standby is cut off and `ahead` more commit on the primary only; `apply_old_log()` applies the
        old primary's log to the target; the primary dies, the standby is started again and
        promoted (a new log), and 5 transactions commit there."""
        self.start_standby()
        self.commit_rows(self.primary, 20, "both have it")
        wait_log_covers_source(self.primary, timeout_s=120)
        self.wait_standby_synced()
        received = lsn_to_int(self.primary.query("SELECT pg_current_wal_lsn()"))
        wait_for("the standby to replay the first batch", lambda: lsn_to_int(
            self.standby.query("SELECT pg_last_wal_replay_lsn()")) >= received, 60)
        self.standby.stop_immediate()  # the standby is cut off: it never receives what follows
        self.commit_rows(self.primary, ahead, "only the old primary has it")
        wait_log_covers_source(self.primary, timeout_s=120)
        apply_old_log()
        self.primary.stop_immediate()
        self.primary_stopped = True
        self.standby._launch("pg_ctl start of the cut-off standby")
        self.switch_link_to_standby()
        self.standby.promote()
        wait_for("the relay of flow app to run on the promoted server", lambda: worker_pid(self.standby), 60)
        self.commit_rows(self.standby, 5, "promoted")
        wait_log_covers_source(self.standby, timeout_s=120)

    def apply_new_log(self, expect=0, env=None, config=None):
        result = run_trellara(["apply", "--config", config or self.new_config(), "--until-caught-up"], expect=expect,
                              env=env, what="trellara apply (the promoted server's log)")
        return result

    def assert_target_equals_promoted(self, what):
        want, have = table_digest(self.standby, "t"), table_digest(self.target, "t")
        if want != have:
            missing = self.standby.query("SELECT count(*) FROM t")
            on_target = self.target.query("SELECT count(*) FROM t")
            raise CaptureFailure(f"{what}: the target differs from the promoted server ({on_target} rows on the "
                                 f"target, {missing} on the promoted server): {have} vs {want}")


class Workload:
    """One-row INSERT transactions on `cluster` in a thread, until stop() or the server goes away."""

    def __init__(self, cluster, label):
        self.cluster = cluster
        self.label = label
        self.batches = 0
        self.error = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        sql = "".join(f"INSERT INTO t (label) VALUES ('{self.label}');\n" for _ in range(10))
        while not self._stop.is_set():
            try:
                self.cluster.query(sql)
                self.batches += 1
            except ClusterError as failed:  # the server stopped under it: expected at a promotion
                self.error = str(failed)[-200:]
                return

    def __enter__(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=60)

    def __exit__(self, *exc):
        self.stop()
        return False


def start_daemon_applier(config, env=None):
    """`trellara apply --config F` as a daemon (our child; stopped by its Popen handle)."""
    return subprocess.Popen([TRELLARA_BIN, "apply", "--config", config], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env)


def summary_line(result):
    lines = [line for line in result.stdout.splitlines() if line.startswith("apply flow=")]
    return lines[-1] if lines else result.stdout[-300:]


def skipped_duplicates(result):
    for word in summary_line(result).split():
        if word.startswith("skipped_duplicates="):
            return int(word.split("=", 1)[1])
    raise CaptureFailure(f"no skipped_duplicates in the applier's summary: {summary_line(result)!r}")
