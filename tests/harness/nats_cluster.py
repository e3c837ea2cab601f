"""A 3-node NATS JetStream cluster on loopback for tests, benchmarks and `make demo-cluster`.

Debian's nats-server (2.9.x); each node has its own client, cluster-route and monitoring port
(free ports on 127.0.0.1) and its own data directory under the cluster's base directory. Nodes are
started as our children and stopped by PID (SIGTERM, then SIGKILL after a ceiling), never by name;
a node can be killed (-9) and restarted on the same ports and data to play a crash.

    with NatsCluster() as cluster:        # started, JetStream ready (a meta leader elected)
        cluster.servers                   # "nats://127.0.0.1:P1,nats://127.0.0.1:P2,..."
        cluster.kill(0); cluster.start_node(0)

Also a command: `python3 tests/harness/nats_cluster.py start DIR` starts a cluster whose files
live in DIR (DIR/servers holds the URLs, DIR/pids the PIDs) and returns; `... stop DIR` stops it.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness.cluster import _free_port  # noqa: E402  one free-port rule for every test server

NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"
READY_CEILING_S = 60


class NatsClusterError(Exception):
    """The cluster could not be started or stopped; the message says which node and why."""


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _fresh_ports(nodes):
    """(client, route, http) ports for each node, all distinct."""
    while True:
        ports = [_free_port() for _ in range(3 * nodes)]
        if len(set(ports)) == len(ports):
            return [tuple(ports[3 * n:3 * n + 3]) for n in range(nodes)]


class NatsCluster:
    def __init__(self, nodes=3, base_dir=None, name="trellara"):
        if not os.path.exists(NATS_SERVER):
            raise NatsClusterError("nats-server is not installed (Debian package nats-server; make deps installs it)")
        self.owns_dir = base_dir is None
        self.base_dir = base_dir or tempfile.mkdtemp(prefix="trellara-nats-")
        os.makedirs(self.base_dir, exist_ok=True)
        self.name = name
        self.ports = _fresh_ports(nodes)  # (client, route, http) per node
        self.processes = [None] * nodes
        self.pids = [None] * nodes

    @property
    def servers(self):
        return ",".join(f"nats://127.0.0.1:{client}" for client, _, _ in self.ports)

    def client_port(self, node):
        return self.ports[node][0]

    def _config_path(self, node):
        client, route, http = self.ports[node]
        routes = ", ".join(f"nats-route://127.0.0.1:{r}" for i, (_, r, _) in enumerate(self.ports) if i != node)
        path = os.path.join(self.base_dir, f"n{node}.conf")
        with open(path, "w") as conf:
            conf.write(f"server_name: n{node}\nlisten: 127.0.0.1:{client}\nhttp: 127.0.0.1:{http}\n"
                       f"jetstream {{ store_dir: \"{os.path.join(self.base_dir, f'n{node}')}\" }}\n"
                       f"cluster {{ name: {self.name}, listen: 127.0.0.1:{route}, routes: [{routes}] }}\n")
        return path

    def start_node(self, node):
        if self.pids[node] and _alive(self.pids[node]):
            return
        log = open(os.path.join(self.base_dir, f"n{node}.log"), "a")
        self.processes[node] = subprocess.Popen([NATS_SERVER, "-c", self._config_path(node)], stdout=log,
                                                stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.pids[node] = self.processes[node].pid

    def start(self, attempts=3):
        """Starts every node and waits for JetStream. A node that exits while the cluster starts
        most often lost one of its ports (probed free, then taken by someone's outgoing
        connection before the node bound it): the cluster starts again on fresh ports, at most
        `attempts` times; the error then quotes the node's log."""
        for attempt in range(1, attempts + 1):
            for node in range(len(self.ports)):
                self.start_node(node)
            try:
                self.wait_ready()
                return self
            except NatsClusterError as error:
                exited = [node for node in range(len(self.ports)) if self.pids[node] and not _alive(self.pids[node])]
                if not exited or attempt == attempts:
                    raise NatsClusterError(f"{error}: {self._log_tail(exited[0] if exited else 0)}") from error
                print(f"nats_cluster: node n{exited[0]} exited while starting ({self._log_tail(exited[0])}); "
                      f"starting again on fresh ports (attempt {attempt + 1} of {attempts})", file=sys.stderr)
                for node in range(len(self.ports)):
                    self.stop_node(node)
                    store = os.path.join(self.base_dir, f"n{node}")
                    shutil.rmtree(store, ignore_errors=True)
                self.ports = _fresh_ports(len(self.ports))
        return self

    def _log_tail(self, node, lines=3):
        try:
            with open(os.path.join(self.base_dir, f"n{node}.log")) as log:
                return " | ".join(line.strip() for line in log.readlines()[-lines:])
        except OSError as error:
            return f"(no log: {error})"

    def healthy(self, node):
        """JetStream on `node` answers and has a meta leader (/healthz)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports[node][2]}/healthz", timeout=2) as reply:
                return json.loads(reply.read()).get("status") == "ok"
        except (OSError, ValueError):
            return False

    def wait_ready(self, nodes=None, ceiling_s=READY_CEILING_S):
        nodes = range(len(self.ports)) if nodes is None else nodes
        deadline = time.monotonic() + ceiling_s
        while time.monotonic() < deadline:
            for node in nodes:
                if self.pids[node] and not _alive(self.pids[node]):
                    raise NatsClusterError(f"nats-server n{node} exited: see {self.base_dir}/n{node}.log")
            if all(self.healthy(node) for node in nodes):
                return
            time.sleep(0.1)
        raise NatsClusterError(f"JetStream not ready on nodes {list(nodes)} after {ceiling_s}s: see {self.base_dir}/n*.log")

    def kill(self, node):
        """kill -9 one node (our child, by PID) and reap it."""
        pid = self.pids[node]
        if pid and _alive(pid):
            os.kill(pid, signal.SIGKILL)
            if self.processes[node] is not None:
                self.processes[node].wait(timeout=30)
        self.pids[node] = None
        self.processes[node] = None

    def stop_node(self, node, ceiling_s=30):
        pid = self.pids[node]
        if not pid:
            return
        if _alive(pid):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + ceiling_s
            while _alive(pid) and time.monotonic() < deadline:
                if self.processes[node] is not None and self.processes[node].poll() is not None:
                    break
                time.sleep(0.05)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if self.processes[node] is not None:
            self.processes[node].wait(timeout=30)
        self.pids[node] = None
        self.processes[node] = None

    def stop(self):
        for node in range(len(self.ports)):
            self.stop_node(node)
        if self.owns_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc):
        self.stop()
        return False


def _main(argv):
    if len(argv) != 3 or argv[1] not in ("start", "stop"):
        print("usage: nats_cluster.py start|stop DIR", file=sys.stderr)
        return 2
    base = os.path.abspath(argv[2])
    if argv[1] == "start":
        cluster = NatsCluster(base_dir=base)
        cluster.start()
        with open(os.path.join(base, "pids"), "w") as out:
            out.write(" ".join(str(pid) for pid in cluster.pids) + "\n")
        with open(os.path.join(base, "servers"), "w") as out:
            out.write(cluster.servers + "\n")
        print(cluster.servers)
        return 0
    try:
        with open(os.path.join(base, "pids")) as pids:
            for pid in (int(p) for p in pids.read().split()):
                with open(f"/proc/{pid}/cmdline", "rb") as cmdline:   # ours: nats-server with our config
                    if base.encode() not in cmdline.read():
                        continue
                os.kill(pid, signal.SIGTERM)
    except FileNotFoundError:
        print(f"no cluster recorded in {base}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
