"""The one harness for a source/target pair and its flow configuration (used by every integration
script that runs a flow end to end).

`write_flow_config` (capture_support) is the only place a test writes a flow's TOML file; `FlowPair` starts a source
(with the extension preloaded) and a target (without it), runs the given SQL on each, creates the
publication and the flow, writes the configuration and, on exit, stops both servers by PID and
removes its work directory. Everything a script used to vary by hand is a parameter:

    FlowPair(name,
             source_sql="...",                  # run on the source before the flow exists
             target_sql=None,                   # None: the same as source_sql; "": nothing
             publication="CREATE PUBLICATION pub FOR TABLE a, b",  # or tables=("a", "b")
             flow="app",
             source_settings={...}, target_settings={...},
             source_env={"TRELLARA_FAULTS": ...},  # only the source server's environment
             with_source=True,                  # [source] conninfo in the configuration
             apply_settings={"ddl": "halt"},    # [apply] (values quoted as TOML strings)
             whole_log_consumer=False,          # register a consumer at the log's start
             shared_work_dir=False,             # work dir readable by the postgres user
             with_target=True,                  # False: a capture-only script (source and flow)
             target_preload=False,              # True: the target also preloads trellara
             create_flow=True,                  # False: the script creates its flow itself
             truth=False)                       # True: a test_decoding "truth" slot beside the flow

Shared checks: `table_digest(cluster, table)` (count + md5 of the rows, order independent),
`pair.assert_same_data(tables, label)`, `pair.apply(*args, expect=0)` (`trellara apply --config
<pair's config> --until-caught-up` unless args are given), `run_trellara(args, expect, env)`,
`wait_log_covers_source(source, flow, timeout_s, fail_on_error)` (also `pair.wait_log_covers_source()`).

A script subclasses it for what is its own (a different target schema, extra helpers).
"""
import os
import subprocess
import sys
import tempfile
import time

from capture_support import (TRELLARA_BIN, CaptureFailure, assert_no_backend_crashes, log_records, lsn_to_int,
                             setup_flow, wait_for, write_flow_config)
from harness import PG_BIN, Cluster, ClusterError


def table_digest(cluster, table, dbname="postgres"):
    """Row count and an order-independent md5 over the rows' text: equal on source and target iff
    the table holds the same rows (types render identically on both servers of one version)."""
    return cluster.query(f"SELECT count(*) || ' ' || coalesce(md5(string_agg(md5(t::text), ',' ORDER BY md5(t::text))),"
                         f" '-') FROM {table} t", dbname=dbname)


def run_trellara(args, expect=0, env=None, timeout_s=300, what=None):
    """Runs the trellara binary; fails with both output tails when the exit code is not `expect`
    (None: any exit code is returned). When `env` switches a defect.* fault point on, the explicit
    switch --enable-test-defects goes first (the command refuses a defect without it)."""
    started = time.monotonic()
    defect = env and "defect." in env.get("TRELLARA_FAULTS", "") and "--enable-test-defects" not in args
    switch = ["--enable-test-defects"] if defect else []
    result = subprocess.run([TRELLARA_BIN, *switch, *args], capture_output=True, text=True, timeout=timeout_s, env=env)
    result.seconds = time.monotonic() - started
    if expect is not None and result.returncode != expect:
        raise CaptureFailure(f"{what or 'trellara ' + ' '.join(args[:1])} exited {result.returncode}, expected {expect}\n"
                             f"stdout: {result.stdout[-2000:]}\nstderr: {result.stderr[-3000:]}")
    return result


def wait_log_covers_source(source, flow="app", timeout_s=120, fail_on_error=False, dbname="postgres"):
    """Waits until the log of `flow` durably covers `source`'s current WAL position; returns the
    seconds it took. With fail_on_error, fails at once (with the relay's last error) when the flow
    is in state `error` — for scripts in which no relay failure is expected; without it a relay that
    fails and restarts is waited for."""
    target_lsn = lsn_to_int(source.query("SELECT pg_current_wal_lsn()", dbname=dbname))
    started = time.monotonic()
    deadline = started + timeout_s
    while True:
        try:
            row = source.query("SELECT coalesce(log_durable_lsn::text, '0/0') || ' ' || state || ' ' || "
                               f"coalesce(last_error, '') FROM trellara.status() WHERE flow = '{flow}'", dbname=dbname)
            durable, state, error = (row.split(" ", 2) + ["", ""])[:3] if row else ("0/0", "absent", "")
        except ClusterError as failed:  # the server restarting: asked again until the deadline
            durable, state, error = "0/0", "unreachable", str(failed)[-300:]
        if lsn_to_int(durable) >= target_lsn:
            return time.monotonic() - started
        if fail_on_error and state == "error":
            raise CaptureFailure(f"flow {flow} is in state error before its log covered source WAL position "
                                 f"{target_lsn:X}: {error}")
        if time.monotonic() > deadline:
            raise CaptureFailure(f"timed out after {timeout_s}s waiting for the log of flow {flow} to cover source "
                                 f"WAL position {target_lsn:X} (durable {durable}, state {state}: {error})")
        time.sleep(0.1 if time.monotonic() - started < 5 else 0.5)  # a long wait polls less often


def log_has_records(log_dir):
    try:
        return bool(log_records(log_dir))
    except CaptureFailure:
        return False


class FlowPair:
    """A source with a flow over a publication and a target; stops both by PID. Subclasses
    override prepare() (before the flow) and ready() (after it) for their own set-up."""

    def __init__(self, name, source_sql="", target_sql=None, publication=None, tables=None, flow="app",
                 source_settings=None, target_settings=None, source_env=None, with_source=True,
                 apply_settings=None, whole_log_consumer=False, shared_work_dir=False, with_target=True,
                 target_preload=False, create_flow=True, truth=False):
        if publication is None:
            publication = (f"CREATE PUBLICATION pub FOR TABLE {', '.join(tables)}" if tables
                           else "CREATE PUBLICATION pub FOR ALL TABLES")
        self.name, self.flow, self.tables = name, flow, tables
        self.source_sql = source_sql
        self.target_sql = source_sql if target_sql is None else target_sql
        self.publication = publication
        self.source_settings, self.target_settings = source_settings or {}, target_settings or {}
        self.source_env = source_env or {}
        self.with_source, self.apply_settings = with_source, apply_settings
        self.whole_log_consumer, self.shared_work_dir = whole_log_consumer, shared_work_dir
        self.with_target, self.target_preload, self.create_flow = with_target, target_preload, create_flow
        self.truth = truth
        self.source = self.target = self.work = None
        self.log_dir = self.config = None

    # ---- set-up and tear-down ----

    def __enter__(self):
        self.source = Cluster(f"{self.name}-source", settings=self.source_settings)
        if self.with_target:
            self.target = Cluster(f"{self.name}-target", preload=self.target_preload, settings=self.target_settings)
        self.work = tempfile.TemporaryDirectory(prefix=f"trellara-{self.name}-")
        try:
            if self.shared_work_dir:
                os.chmod(self.work.name, 0o755)
            self._start_source()
            if self.target is not None:
                self.target.start()
            self.prepare()
            if self.create_flow:
                self.start_flow()
            self.ready()
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def prepare(self):
        """Both servers run, no flow yet: the schema and the rows that exist before the flow. A
        subclass with more to do (pgbench -i, pg_dump into the target) overrides it."""
        if self.source_sql:
            self.source.psql(self.source_sql)
        if self.target_sql and self.target is not None:
            self.target.psql(self.target_sql)

    def restore_source_schema_into_target(self):
        """The target restored the way users restore one: `pg_dump --schema-only` of the source
        (identity columns, sequences, types, partitions and inheritance included; no owners, no
        publications) played into the target."""
        schema = subprocess.run([os.path.join(PG_BIN, "pg_dump"), "--schema-only", "--no-owner", "--no-publications",
                                 "-h", self.source.socket_dir, "-p", str(self.source.port), "-U", "postgres",
                                 "postgres"], capture_output=True, text=True, check=True).stdout
        self.target.psql(schema)

    def start_flow(self):
        """The publication and the flow (its relay running), the whole-log consumer when asked,
        and the pair's configuration file (when there is a target to name)."""
        self.log_dir = setup_flow(self.source, self.publication, flow=self.flow, truth=self.truth)
        if self.whole_log_consumer:
            self.register_whole_log_consumer()
        if self.target is not None:
            self.config = self.write_config()
        return self.log_dir

    def ready(self):
        """The flow and its configuration exist: a subclass's last step (e.g. one apply run that
        bootstraps the target's state)."""

    def _start_source(self):
        # The source server alone gets source_env (e.g. TRELLARA_FAULTS): set only while it starts.
        saved = {key: os.environ.get(key) for key in self.source_env}
        os.environ.update(self.source_env)
        try:
            self.source.start()
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def __exit__(self, exc_type, exc, tb):
        for cluster in (self.source, self.target):
            if cluster is not None:
                cluster.__exit__(exc_type, exc, tb)
        if self.work is not None:
            self.work.cleanup()
        return False

    # ---- the flow's configuration ----

    def write_config(self, path=None, target_conninfo=None, apply_settings=None, with_source=None, extra="",
                     log_dir=None):
        """Writes this pair's flow configuration (by default the pair's own flow.toml) and returns
        its path; the arguments override the pair's settings for this one file (`log_dir`: another
        log directory, e.g. a remote applier's replica or another flow's log)."""
        path = path or os.path.join(self.work.name, "flow.toml")
        with_source = self.with_source if with_source is None else with_source
        return write_flow_config(path, self.flow, log_dir or self.log_dir, target_conninfo or self.target.conninfo(),
                                 self.source.conninfo() if with_source else None,
                                 self.apply_settings if apply_settings is None else apply_settings, extra,
                                 mode=0o644 if self.shared_work_dir else None)

    def register_whole_log_consumer(self):
        """A consumer registered at the log's start keeps the relay's retention from deleting a
        segment the applier is done with, so a scenario can compare the dedup rows with every
        transaction the log ever held."""
        wait_for("the flow's log to hold its start marker", lambda: log_has_records(self.log_dir), 60)
        registered = subprocess.run([TRELLARA_BIN, "log", "register-consumer", "whole-log-check", "--dir",
                                     self.log_dir], capture_output=True, text=True, timeout=60)
        if registered.returncode != 0:
            raise CaptureFailure(f"register-consumer whole-log-check failed: {registered.stderr}")

    def wait_log_covers_source(self, timeout_s=120, fail_on_error=False):
        """wait_log_covers_source for this pair's source and flow."""
        return wait_log_covers_source(self.source, self.flow, timeout_s, fail_on_error)

    def check_no_crashes(self):
        assert_no_backend_crashes(*[c for c in (self.source, self.target) if c is not None])

    # ---- running the applier and comparing the data ----

    def apply(self, *args, expect=0, config=None, env=None, timeout_s=300):
        """`trellara apply --config <config> --until-caught-up` (or `trellara apply --config <config>
        <args>`); returns the completed process, failing unless it exited `expect`."""
        args = args or ("--until-caught-up",)
        result = run_trellara(["apply", "--config", config or self.config, *args], expect=expect, env=env,
                              timeout_s=timeout_s, what="trellara apply")
        lines = [line for line in result.stdout.splitlines() if line.startswith("apply flow=")]
        print(f"apply (exit {result.returncode}, {result.seconds:.1f}s): "
              f"{lines[-1] if lines else result.stderr.strip()[-500:]}")
        return result

    def assert_same_data(self, tables, label, dbname="postgres"):
        """Fails naming every table whose rows differ between source and target."""
        differing = []
        for table in tables:
            want, have = table_digest(self.source, table, dbname), table_digest(self.target, table, dbname)
            print(f"{label}: {table}: source {want}, target {have}")
            if want != have:
                differing.append(table)
        if differing:
            raise CaptureFailure(f"{label}: source and target differ in {differing}")
