#!/usr/bin/env python3
"""Throwaway PostgreSQL clusters for Trellara's tests and demo.

Responsibility: create a cluster with initdb in a fresh temporary directory, start it as the
`postgres` OS user (the server refuses to run as root) with a unix socket only, wal_level=logical
and shared_preload_libraries=trellara, hand out connection details, and stop it by the PID in its
postmaster.pid -- from `with`, from atexit and from SIGTERM/SIGHUP handlers -- so a failing or
interrupted test never leaves a server behind.

It must never signal a process it cannot prove is the postmaster of its own data directory, never
stop processes by name, never listen on TCP, and never use anything beyond the standard library.

Library use:
    from harness import Cluster
    with Cluster("source") as c:
        print(c.query("SELECT 1"))

Command line (for shell scripts such as scripts/demo):
    cluster.py start [--name N] [--no-preload] [--set name=value ...]
        prints shell assignments: TRELLARA_CLUSTER_DIR, PGHOST, PGPORT, PGUSER, PGDATABASE
    cluster.py stop DIR        stops the cluster created in DIR by PID and removes DIR
"""

import argparse
import atexit
import json
import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

PG_BIN = os.environ.get("TRELLARA_PG_BIN", "/usr/lib/postgresql/15/bin")
PG_USER = "postgres"
STATE_FILE = "cluster.json"
STOP_TIMEOUT_S = 60     # fast shutdown (SIGINT) gets this long before SIGQUIT
QUIT_TIMEOUT_S = 15     # immediate shutdown (SIGQUIT) gets this long before SIGKILL
START_TIMEOUT_S = 120

INITDB_ARGS = ["-U", PG_USER, "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"]
# A data directory made once by make_template() (tests/run-all makes one per run and
# removes it): each cluster then starts from a copy of it with its own system identifier instead
# of running initdb (about a second of CPU each, hundreds of clusters in a run). Unset: initdb.
TEMPLATE_ENV = "TRELLARA_INITDB_TEMPLATE"

# Settings every harness cluster gets; tests add or override with settings={...}.
BASE_SETTINGS = {
    "listen_addresses": "''",
    "wal_level": "logical",
    "max_replication_slots": "16",
    "max_wal_senders": "16",
    "max_worker_processes": "16",
    "max_connections": "40",
    "shared_buffers": "32MB",
    "fsync": "on",
    "synchronous_commit": "on",
    "logging_collector": "off",
    "log_line_prefix": "'%m [%p] %q%a '",
    "lc_messages": "'C'",
    "timezone": "'UTC'",
    "datestyle": "'iso, mdy'",
}


class ClusterError(Exception):
    """A cluster could not be created, started or stopped; the message says which and why."""


_live_clusters = {}        # id(cluster) -> Cluster, for atexit and signal handlers
_live_lock = threading.Lock()
_handlers_installed = False


def stop_all_clusters():
    """Stops every cluster this process started and still owns (atexit/signal path)."""
    with _live_lock:
        clusters = list(_live_clusters.values())
    for cluster in clusters:
        try:
            cluster.stop()
        except Exception as error:  # keep stopping the others; report, never hide
            print(f"harness: could not stop cluster {cluster.name} in {cluster.base_dir}: {error}",
                  file=sys.stderr)


def _on_termination_signal(signum, _frame):
    # Raising SystemExit unwinds the test: `with` blocks and finally clauses stop their clusters,
    # then atexit stops whatever is left.
    raise SystemExit(128 + signum)


def _install_cleanup_handlers():
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    atexit.register(stop_all_clusters)
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) in (signal.SIG_DFL, None):
                signal.signal(signum, _on_termination_signal)


def _as_postgres(command):
    """Runs `command` as the postgres OS user: through runuser when we are root."""
    if os.geteuid() == 0:
        return ["runuser", "-u", PG_USER, "--"] + command
    if pwd.getpwuid(os.geteuid()).pw_name == PG_USER:
        return command
    raise ClusterError(
        f"test clusters must run as the '{PG_USER}' OS user: run the tests as root (they switch "
        f"with runuser) or as '{PG_USER}'; current user is {pwd.getpwuid(os.geteuid()).pw_name}")


def _server_has_setting(name):
    out = subprocess.run(["runuser", "-u", PG_USER, "--", os.path.join(PG_BIN, "postgres"), "--describe-config"],
                         capture_output=True, text=True, check=False).stdout
    return any(line.split("\t", 1)[0] == name for line in out.splitlines())


def _free_port():
    # The server listens on a unix socket only; the port just names the socket file. A port that
    # is free on TCP too keeps it unique should someone enable TCP for debugging.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _process_state(pid):
    """Single-letter state from /proc/<pid>/stat, or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def _process_alive(pid):
    state = _process_state(pid)
    return state is not None and state not in ("Z", "X")


def _process_cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().split(b"\0")
    except FileNotFoundError:
        return []


def _children_of(pid):
    children = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                children.append(int(entry))
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
    return children


def _crc32c_update(crc, data):
    """CRC-32C (Castagnoli, reflected), as PostgreSQL's pg_crc32c: start 0xFFFFFFFF, finish ^ 0xFFFFFFFF."""
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc


def set_system_identifier(data_dir, system_identifier):
    """Gives a copied data directory its own database system identifier, as initdb would have: the
    first field of global/pg_control, whose CRC-32C (over the fields before the crc field) is
    recomputed. The crc field's position is found, not assumed: it is where the stored value
    equals the CRC of the bytes before it. Tests depend on distinct identifiers (the dedup rows
    and the broker's log identity name the source by it)."""
    path = os.path.join(data_dir, "global", "pg_control")
    with open(path, "r+b") as control:
        data = bytearray(control.read())
        at, crc = None, _crc32c_update(0xFFFFFFFF, data[:8])
        for n in range(8, 1024, 4):
            if int.from_bytes(data[n:n + 4], "little") == crc ^ 0xFFFFFFFF:
                at = n
                break
            crc = _crc32c_update(crc, data[n:n + 4])
        if at is None:
            raise ClusterError(f"{path}: no CRC-32C field found; cannot set the system identifier of a copy")
        data[0:8] = system_identifier.to_bytes(8, "little")
        data[at:at + 4] = (_crc32c_update(0xFFFFFFFF, data[:at]) ^ 0xFFFFFFFF).to_bytes(4, "little")
        control.seek(0)
        control.write(data)


def new_system_identifier():
    """As initdb makes one (seconds in the high half), with random low bits; below 2^63."""
    return (int(time.time()) << 32) | int.from_bytes(os.urandom(4), "little")


def make_template(directory):
    """initdb into `directory`/data (owned by postgres); returns that path for TEMPLATE_ENV."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    if os.geteuid() == 0:
        pg = pwd.getpwnam(PG_USER)
        os.chown(directory, pg.pw_uid, pg.pw_gid)
    data_dir = os.path.join(directory, "data")
    result = subprocess.run(_as_postgres([f"{PG_BIN}/initdb", "-D", data_dir] + INITDB_ARGS),
                            capture_output=True, text=True, cwd=directory)
    if result.returncode != 0:
        raise ClusterError(f"initdb of the template {data_dir} failed (exit {result.returncode}): "
                           f"{result.stdout.strip()} {result.stderr.strip()}")
    return data_dir


def _wait_gone(pid, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _process_alive(pid):
            return True
        time.sleep(0.05)
    return not _process_alive(pid)


class Cluster:
    """A throwaway PostgreSQL cluster; use as a context manager or call start()/stop()."""

    def __init__(self, name="trellara", preload=True, settings=None, keep=None, detached=False):
        self.name = name
        self.preload = preload
        self.settings = dict(BASE_SETTINGS)
        # PostgreSQL 15.19+ only lets listed libraries act as output plugins (a security fix);
        # older minors do not know the setting and would refuse to start with it.
        if _server_has_setting("output_plugin_libraries"):
            self.settings["output_plugin_libraries"] = "'pgoutput, test_decoding, trellara'"
        if preload:
            self.settings["shared_preload_libraries"] = "'trellara'"
        self.settings.update(settings or {})
        # TRELLARA_KEEP_CLUSTERS=1 keeps data and logs after stop, for debugging a failure.
        self.keep = keep if keep is not None else os.environ.get("TRELLARA_KEEP_CLUSTERS") == "1"
        self.detached = detached   # CLI use: outlives this process, stopped by `cluster.py stop`
        self.base_dir = None
        self.port = None
        self.pid = None

    # --- paths and connection details -------------------------------------------------------

    @property
    def data_dir(self):
        return os.path.join(self.base_dir, "data")

    @property
    def socket_dir(self):
        return os.path.join(self.base_dir, "socket")

    @property
    def log_path(self):
        return os.path.join(self.base_dir, "server.log")

    def conninfo(self, dbname="postgres"):
        return f"host={self.socket_dir} port={self.port} user={PG_USER} dbname={dbname}"

    def env(self, dbname="postgres"):
        """Environment for libpq clients (psql, pg_regress, trellara) pointed at this cluster."""
        env = dict(os.environ)
        env.update(PGHOST=self.socket_dir, PGPORT=str(self.port), PGUSER=PG_USER, PGDATABASE=dbname)
        return env

    # --- lifecycle --------------------------------------------------------------------------

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and self.base_dir and exc_type is not SystemExit:
            self.print_log_tail(f"cluster {self.name}: server log after failure")
        self.stop()
        return False

    def _make_base_dir(self):
        """A fresh base directory and socket directory (owned by the postgres OS user) and a port."""
        if self.pid is not None:
            raise ClusterError(f"cluster {self.name} in {self.base_dir} is already running (pid {self.pid})")
        if not self.detached:
            _install_cleanup_handlers()
        self.base_dir = tempfile.mkdtemp(prefix=f"trellara-{self.name}-")
        os.chmod(self.base_dir, 0o700)
        os.makedirs(self.socket_dir, mode=0o700)
        if os.geteuid() == 0:
            pg = pwd.getpwnam(PG_USER)
            for path in (self.base_dir, self.socket_dir):
                os.chown(path, pg.pw_uid, pg.pw_gid)
        self.port = _free_port()

    def _launch(self, what):
        """Writes the settings and starts the server on the data directory in place. pg_ctl -w waits
        until the server accepts connections; the PID comes from postmaster.pid, which is the only
        thing stop() trusts."""
        self._write_settings()
        self._write_state()
        with _live_lock:
            if not self.detached:
                _live_clusters[id(self)] = self
        self._run_as_postgres(
            [f"{PG_BIN}/pg_ctl", "start", "-D", self.data_dir, "-l", self.log_path, "-w", "-t", str(START_TIMEOUT_S)],
            what=what)
        self.pid = self._read_postmaster_pid()
        if self.pid is None:
            raise ClusterError(f"cluster {self.name}: pg_ctl reported a start but {self.data_dir}/postmaster.pid names "
                               "no running postmaster")
        self._write_state()

    def start(self):
        self._make_base_dir()
        try:
            template = os.environ.get(TEMPLATE_ENV)
            if template and os.path.isfile(os.path.join(template, "PG_VERSION")):
                self._run_as_postgres(["cp", "-a", template, self.data_dir], what=f"copy of the template {template}")
                set_system_identifier(self.data_dir, new_system_identifier())
                # WAL page headers carry the identifier too: a fresh WAL segment under the new one.
                self._run_as_postgres([f"{PG_BIN}/pg_resetwal", "-D", self.data_dir], what="pg_resetwal of the copy")
            else:
                self._run_as_postgres([f"{PG_BIN}/initdb", "-D", self.data_dir] + INITDB_ARGS, what="initdb")
            self._launch("pg_ctl start")
        except BaseException:
            self.print_log_tail(f"cluster {self.name}: server log after failed start")
            self.stop()
            raise
        return self

    def start_standby_of(self, primary, slot_name):
        """Starts this cluster as a streaming physical standby of `primary` (a running Cluster):
        pg_basebackup -R through a new physical slot `slot_name` on the primary (-C -S), so
        primary_conninfo and primary_slot_name point at it, then this cluster's settings (port,
        socket, and what the caller gave) on top of the copied postgresql.conf."""
        self._make_base_dir()
        try:
            self._run_as_postgres(
                [f"{PG_BIN}/pg_basebackup", "-D", self.data_dir, "-h", primary.socket_dir, "-p", str(primary.port),
                 "-U", PG_USER, "-R", "-C", "-S", slot_name, "-X", "stream", "-c", "fast", "--no-sync"],
                what=f"pg_basebackup from cluster {primary.name}")
            self._launch("pg_ctl start of the standby")
        except BaseException:
            self.print_log_tail(f"cluster {self.name}: server log after failed standby start")
            self.stop()
            raise
        return self

    def promote(self):
        """pg_ctl promote -w: the standby ends recovery and becomes a primary on a new timeline."""
        self._run_as_postgres([f"{PG_BIN}/pg_ctl", "promote", "-D", self.data_dir, "-w", "-t", str(START_TIMEOUT_S)],
                              what="pg_ctl promote")

    def stop_immediate(self):
        """Immediate shutdown (SIGQUIT to our postmaster, by PID), as a crash of the machine looks to
        its peers; the data directory stays until stop()."""
        pid = self._read_postmaster_pid() or self.pid
        if pid is None or not self._is_our_postmaster(pid):
            raise ClusterError(f"cluster {self.name}: no running postmaster of {self.data_dir} to stop")
        os.kill(pid, signal.SIGQUIT)
        if not _wait_gone(pid, QUIT_TIMEOUT_S):
            raise ClusterError(f"cluster {self.name}: postmaster {pid} did not exit {QUIT_TIMEOUT_S}s after SIGQUIT")
        self.pid = None
        return pid

    def stop_fast(self):
        """A clean shutdown (pg_ctl stop -m fast: the walsenders send every WAL record to the
        standbys before the server exits), as before a planned switchover; the data directory stays
        until stop()."""
        pid = self._read_postmaster_pid() or self.pid
        if pid is None or not self._is_our_postmaster(pid):
            raise ClusterError(f"cluster {self.name}: no running postmaster of {self.data_dir} to stop")
        self._run_as_postgres([f"{PG_BIN}/pg_ctl", "stop", "-D", self.data_dir, "-m", "fast", "-w",
                               "-t", str(QUIT_TIMEOUT_S)], what="pg_ctl stop -m fast")
        if not _wait_gone(pid, QUIT_TIMEOUT_S):
            raise ClusterError(f"cluster {self.name}: postmaster {pid} did not exit after pg_ctl stop -m fast")
        self.pid = None
        return pid

    def stop(self):
        """Stops the postmaster by PID (SIGINT, then SIGQUIT, then SIGKILL) and removes the
        cluster's directory unless keep is set. Safe to call more than once."""
        if self.base_dir is None:
            return
        try:
            pid = self._read_postmaster_pid() or self.pid
            if pid is not None and self._is_our_postmaster(pid):
                self._signal_and_wait(pid)
            self.pid = None
        finally:
            with _live_lock:
                _live_clusters.pop(id(self), None)
        if self.keep:
            print(f"harness: kept cluster {self.name} in {self.base_dir} (TRELLARA_KEEP_CLUSTERS=1)",
                  file=sys.stderr)
        else:
            shutil.rmtree(self.base_dir, ignore_errors=True)
        self.base_dir = None

    def restart_immediate(self, stopped_children=()):
        """Immediate shutdown, as `pg_ctl stop -m immediate` does it (SIGQUIT to the postmaster,
        found by the PID in postmaster.pid and proven ours by its command line), then a start of
        the same data directory, which runs crash recovery. Port and socket stay the same.
        `stopped_children`: PIDs of this cluster's own server processes that the caller froze with
        SIGSTOP (they cannot act on SIGQUIT); they get SIGKILL right after the postmaster's SIGQUIT."""
        pid = self._read_postmaster_pid() or self.pid
        if pid is None or not self._is_our_postmaster(pid):
            raise ClusterError(f"cluster {self.name}: no running postmaster of {self.data_dir} to restart")
        os.kill(pid, signal.SIGQUIT)
        for child in stopped_children:
            os.kill(child, signal.SIGKILL)
        if not _wait_gone(pid, QUIT_TIMEOUT_S):
            raise ClusterError(f"cluster {self.name}: postmaster {pid} did not exit {QUIT_TIMEOUT_S}s after SIGQUIT")
        self.pid = None
        self._run_as_postgres(
            [f"{PG_BIN}/pg_ctl", "start", "-D", self.data_dir, "-l", self.log_path, "-w",
             "-t", str(START_TIMEOUT_S)],
            what="pg_ctl start after an immediate stop")
        self.pid = self._read_postmaster_pid()
        if self.pid is None:
            raise ClusterError(f"cluster {self.name}: restarted, but postmaster.pid names no running postmaster")
        self._write_state()
        return pid

    def is_running(self):
        return self.pid is not None and self._is_our_postmaster(self.pid)

    # --- clients ----------------------------------------------------------------------------

    def psql(self, sql, dbname="postgres", check=True, args=()):
        """Runs `sql` with psql (unaligned, tuples only, stop on first error); returns the
        CompletedProcess. With check=True a failure raises ClusterError carrying psql's stderr."""
        command = [f"{PG_BIN}/psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                   "-h", self.socket_dir, "-p", str(self.port), "-U", PG_USER, "-d", dbname,
                   *args, "-f", "-"]
        # SQL goes through stdin: no limit on its size (a command-line argument is capped at 128 KiB).
        result = subprocess.run(command, input=sql, capture_output=True, text=True)
        if check and result.returncode != 0:
            raise ClusterError(f"cluster {self.name}: psql failed (exit {result.returncode}) on: {sql}\n{result.stderr.strip()}")
        return result

    def query(self, sql, dbname="postgres"):
        """Output of `sql` as text (rows on lines, columns separated by |), stripped."""
        return self.psql(sql, dbname=dbname).stdout.strip()

    def server_log(self):
        try:
            with open(self.log_path, errors="replace") as log:
                return log.read()
        except (FileNotFoundError, TypeError):
            return ""

    def backend_crashes(self):
        """Lines of the server log that report a backend killed by a signal (a crash)."""
        return [line for line in self.server_log().splitlines()
                if "terminated by signal" in line or "was terminated by exception" in line]

    def print_log_tail(self, title, lines=60):
        text = self.server_log().splitlines()[-lines:]
        if text:
            print(f"---- {title} ({self.log_path}) ----", file=sys.stderr)
            print("\n".join(text), file=sys.stderr)
            print("---- end of server log ----", file=sys.stderr)

    # --- attach (CLI stop) --------------------------------------------------------------------

    @classmethod
    def attach(cls, base_dir):
        """The cluster created (by cluster.py start) in base_dir, ready for stop()."""
        state_path = os.path.join(base_dir, STATE_FILE)
        try:
            with open(state_path) as state_file:
                state = json.load(state_file)
        except FileNotFoundError:
            raise ClusterError(f"{base_dir} is not a harness cluster directory ({STATE_FILE} missing); nothing stopped") from None
        cluster = cls(name=state["name"], preload=state["preload"], detached=True)
        cluster.base_dir = base_dir
        cluster.port = state["port"]
        cluster.pid = state.get("pid")
        return cluster

    # --- internals ----------------------------------------------------------------------------

    def _run_as_postgres(self, command, what):
        result = subprocess.run(_as_postgres(command), capture_output=True, text=True,
                                cwd=self.base_dir)
        if result.returncode != 0:
            raise ClusterError(
                f"cluster {self.name}: {what} failed (exit {result.returncode}) in {self.base_dir}\n"
                f"{result.stdout.strip()}\n{result.stderr.strip()}\n"
                f"server log: {self.log_path}")
        return result

    def _write_settings(self):
        settings = dict(self.settings)
        settings["port"] = str(self.port)
        settings["unix_socket_directories"] = f"'{self.socket_dir}'"
        lines = ["", "# --- added by tests/harness/cluster.py ---"]
        lines += [f"{key} = {value}" for key, value in settings.items()]
        with open(os.path.join(self.data_dir, "postgresql.conf"), "a") as conf:
            conf.write("\n".join(lines) + "\n")

    def _write_state(self):
        state = {"name": self.name, "preload": self.preload, "port": self.port, "pid": self.pid,
                 "data_dir": self.data_dir, "socket_dir": self.socket_dir}
        with open(os.path.join(self.base_dir, STATE_FILE), "w") as state_file:
            json.dump(state, state_file)

    def _read_postmaster_pid(self):
        try:
            with open(os.path.join(self.data_dir, "postmaster.pid")) as pid_file:
                first_line = pid_file.readline().strip()
            return int(first_line) if first_line else None
        except (FileNotFoundError, ValueError, TypeError):
            return None

    def _is_our_postmaster(self, pid):
        # The PID file may be stale and the PID reused: only a live process whose command line
        # carries our data directory is ours to signal.
        if not _process_alive(pid):
            return False
        return os.fsencode(self.data_dir) in _process_cmdline(pid)

    def _signal_and_wait(self, pid):
        for signum, timeout_s in ((signal.SIGINT, STOP_TIMEOUT_S), (signal.SIGQUIT, QUIT_TIMEOUT_S)):
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                return
            if _wait_gone(pid, timeout_s):
                return
            print(f"harness: cluster {self.name} postmaster {pid} did not exit {timeout_s}s after "
                  f"{signal.Signals(signum).name}; escalating", file=sys.stderr)
        children = _children_of(pid)
        for victim in [pid] + children:
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if not _wait_gone(pid, 10):
            raise ClusterError(f"cluster {self.name}: postmaster {pid} survived SIGKILL; data in {self.base_dir}")


def _main(argv):
    parser = argparse.ArgumentParser(prog="cluster.py", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("start", help="create and start a cluster; print shell assignments")
    start.add_argument("--name", default="demo")
    start.add_argument("--no-preload", action="store_true",
                       help="do not put trellara in shared_preload_libraries")
    start.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                       help="extra postgresql.conf setting (value as written in the file)")
    stop = commands.add_parser("stop", help="stop the cluster in DIR by PID and remove DIR")
    stop.add_argument("dir")
    args = parser.parse_args(argv)

    try:
        if args.command == "start":
            settings = {}
            for item in args.set:
                key, sep, value = item.partition("=")
                if not sep:
                    parser.error(f"--set {item}: expected NAME=VALUE")
                settings[key] = value
            cluster = Cluster(args.name, preload=not args.no_preload, settings=settings,
                              detached=True).start()
            for key, value in (("TRELLARA_CLUSTER_DIR", cluster.base_dir),
                               ("PGHOST", cluster.socket_dir), ("PGPORT", cluster.port),
                               ("PGUSER", PG_USER), ("PGDATABASE", "postgres")):
                print(f"{key}={shlex.quote(str(value))}")
        else:
            Cluster.attach(args.dir).stop()
    except ClusterError as error:
        print(f"cluster.py: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
