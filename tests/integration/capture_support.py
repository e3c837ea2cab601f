#!/usr/bin/env python3
"""Shared pieces of the capture integration tests (tests/integration/test_capture_*.py).

Responsibility: set up a source cluster with a trellara flow and an independent truth slot
(test_decoding), read the flow's log through the real `trellara log records` command, read the
source's committed transactions from the truth slot, and compare the two (no loss, no duplicate,
same order). It also finds the relay worker by PID and proves the PID is that worker before a
test signals it.

It must never decide anything from the relay's own claims alone (the truth comes from WAL through
test_decoding, the log from disk through the CLI), never signal a process it has not identified by
its command line, and never use anything beyond the standard library and tests/harness.
"""

import json
import os
import re
import select
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from harness import PG_BIN  # noqa: E402

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_DIR = os.environ.get("TRELLARA_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))
TRELLARA_BIN = os.environ.get("TRELLARA_BIN", os.path.join(BUILD_DIR, "bin", "trellara"))
TRUTH_SLOT = "truth"
COMPLETING_TYPES = ("envelope", "commit_marker", "progress")


class CaptureFailure(AssertionError):
    """A measured fact contradicts the capture contract; the message says which and by how much."""


_MALLOC_DEBUG = "/usr/lib/x86_64-linux-gnu/libc_malloc_debug.so.0"
_heap_check_usable = None


def heap_checked_env(env=None):
    """`env` (default: ours) plus glibc's checking allocator (libc_malloc_debug, MALLOC_CHECK_=3):
    a write past the end of any block aborts the process when the block is freed, instead of
    corrupting the heap silently. Not under AddressSanitizer (which must come first and checks
    more), nor where the library is missing."""
    global _heap_check_usable
    merged = dict(os.environ if env is None else env)
    if _heap_check_usable is None:
        linked = subprocess.run(["ldd", TRELLARA_BIN], capture_output=True, text=True).stdout
        _heap_check_usable = os.path.exists(_MALLOC_DEBUG) and "libasan" not in linked
    if _heap_check_usable:
        merged["LD_PRELOAD"] = " ".join(filter(None, [merged.get("LD_PRELOAD", ""), _MALLOC_DEBUG]))
        merged["MALLOC_CHECK_"] = "3"
    return merged


def assert_no_backend_crashes(*clusters):
    """No server log of `clusters` reports a backend killed by a signal."""
    for cluster in clusters:
        crashes = cluster.backend_crashes()
        if crashes:
            raise CaptureFailure(f"backends crashed on {cluster.name}: {crashes}")


def lsn_to_int(text):
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def int_to_lsn(value):
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def wait_for(what, predicate, timeout_s, interval_s=0.2):
    """Polls predicate() until it returns a truthy value; raises CaptureFailure naming `what`."""
    deadline = time.monotonic() + timeout_s
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as error:  # the server may be restarting; keep polling
            last_error = error
        time.sleep(interval_s)
    raise CaptureFailure(f"timed out after {timeout_s}s waiting for {what}"
                         + (f" (last error: {last_error})" if last_error else ""))


# ---- the flow configuration: the one writer of a flow's TOML file in the tests ----

def flow_config_text(flow, log_dir, target_conninfo, source_conninfo=None, apply_settings=None, extra=""):
    """The TOML of a flow configuration. `apply_settings`: a dict of [apply] settings (values are
    written as TOML strings) or the text of the [apply] table's lines."""
    text = f'[flow]\nname = "{flow}"\nlog_directory = "{log_dir}"\n\n'
    if source_conninfo is not None:
        text += f'[source]\nconninfo = "{source_conninfo}"\n\n'
    text += f'[target]\nconninfo = "{target_conninfo}"\n'
    if apply_settings:
        if isinstance(apply_settings, dict):
            lines = "".join(f'{key} = "{value}"\n' for key, value in apply_settings.items())
        else:
            lines = apply_settings.rstrip("\n") + "\n"
        text += f"\n[apply]\n{lines}"
    if extra:
        text += "\n" + extra.rstrip("\n") + "\n"
    return text


def write_flow_config(path, flow, log_dir, target_conninfo, source_conninfo=None, apply_settings=None, extra="",
                      mode=None):
    """Writes a flow configuration file (flow_config_text) and returns its path."""
    with open(path, "w") as config:
        config.write(flow_config_text(flow, log_dir, target_conninfo, source_conninfo, apply_settings, extra))
    if mode is not None:
        os.chmod(path, mode)
    return path


def setup_flow(cluster, publication_sql, flow="app", dbname="postgres", truth=True):
    """CREATE EXTENSION, the publication, the truth slot (unless truth=False: it retains all WAL)
    and the flow, with no write in between that touches published tables, so both slots see the
    same transactions."""
    cluster.query("CREATE EXTENSION IF NOT EXISTS trellara", dbname=dbname)
    cluster.query(publication_sql, dbname=dbname)
    if truth:
        cluster.query(f"SELECT 1 FROM pg_create_logical_replication_slot('{TRUTH_SLOT}', 'test_decoding')",
                      dbname=dbname)
    cluster.query(f"SELECT trellara.create_flow('{flow}', 'pub')", dbname=dbname)
    log_dir = cluster.query(f"SELECT log_directory FROM trellara.flows WHERE name = '{flow}'", dbname=dbname)
    wait_for(f"relay worker of flow {flow} to run", lambda: worker_pid(cluster, flow, dbname), 60)
    return log_dir


def worker_pid(cluster, flow="app", dbname="postgres"):
    """The relay worker's PID from status(), only if /proc proves it is `trellara relay <flow>`."""
    out = cluster.psql(f"SELECT worker_pid FROM trellara.status() WHERE flow = '{flow}'",
                       dbname=dbname, check=False)
    text = out.stdout.strip()
    if out.returncode != 0 or not text:
        return None
    pid = int(text)
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            title = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
    except FileNotFoundError:
        return None
    return pid if f"trellara relay {flow}" in title else None


def log_records(log_dir, from_offset=None):
    """Every durable record of the log, as dicts, through `trellara log records --format json`."""
    command = [TRELLARA_BIN, "log", "records", "--format", "json", "--dir", log_dir]
    if from_offset is not None:
        command += ["--from", str(from_offset)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise CaptureFailure(f"`{' '.join(command)}` failed (exit {result.returncode}): {result.stderr.strip()}")
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


class LogFollower:
    """Reads a growing log incrementally and tracks the LSN it durably covers (commit LSN of the
    last completing frame: envelope, commit marker or progress marker)."""

    def __init__(self, log_dir):
        self.log_dir = log_dir
        self.records = []
        self.covered_lsn = 0

    def refresh(self):
        if not os.path.isdir(self.log_dir):
            return self.covered_lsn
        start = self.records[-1]["offset"] + 1 if self.records else None
        for record in log_records(self.log_dir, start):
            self.records.append(record)
            if record["type"] in COMPLETING_TYPES:
                self.covered_lsn = max(self.covered_lsn, lsn_to_int(record["commit_lsn"]))
        return self.covered_lsn


def log_transactions(records):
    """Completed transactions of the log in log order as (xid, commit_lsn) plus a report of chunk
    re-emissions. Raises CaptureFailure if a whole transaction appears twice, a re-emitted chunk
    differs from the first copy, or a commit marker lacks any of its chunks."""
    completed = []
    seen = {}
    chunks = {}        # (xid, lsn) -> {seq: checksum}
    reemitted = 0
    chunked = 0
    for record in records:
        kind = record["type"]
        if kind in ("progress", "test"):
            continue
        key = (record["xid"], lsn_to_int(record["commit_lsn"]))
        if record.get("checksum_status") == "mismatch":
            raise CaptureFailure(f"log offset {record['offset']}: checksum mismatch in {kind} of xid {key[0]}")
        if kind == "chunk":
            have = chunks.setdefault(key, {})
            if record["seq"] in have:
                if have[record["seq"]] != record.get("checksum"):
                    raise CaptureFailure(f"log offset {record['offset']}: chunk {record['seq']} of xid {key[0]} "
                                         f"re-emitted with a different checksum")
                reemitted += 1
            have[record["seq"]] = record.get("checksum")
            continue
        if kind == "manifest":
            continue
        if kind == "commit_marker":
            have = chunks.get(key, {})
            if len(have) != record["total_chunks"] or set(have) != set(range(record["total_chunks"])):
                raise CaptureFailure(f"log offset {record['offset']}: commit marker of xid {key[0]} lists "
                                     f"{record['total_chunks']} chunks, the log holds seqs {sorted(have)[:5]}... "
                                     f"({len(have)})")
            chunked += 1
        if key in seen:
            raise CaptureFailure(f"transaction xid {key[0]} commit {int_to_lsn(key[1])} appears twice in the log "
                                 f"(offsets {seen[key]} and {record['offset']})")
        seen[key] = record["offset"]
        completed.append(key)
    return completed, {"chunked_transactions": chunked, "reemitted_chunks": reemitted}


def truth_transactions(cluster, table_prefix, dbname="postgres"):
    """Committed transactions that touched a table whose qualified name starts with
    `table_prefix`, from the test_decoding truth slot (peek: the slot is not consumed), as
    (xid, commit end LSN) in commit order."""
    rows = cluster.query(
        f"SELECT lsn, xid, data FROM pg_logical_slot_peek_changes('{TRUTH_SLOT}', NULL, NULL, "
        f"'include-xids', '1', 'skip-empty-xacts', '1')", dbname=dbname)
    transactions = []
    touched = False
    for line in rows.splitlines():
        lsn, xid, data = line.split("|", 2)
        if data.startswith("BEGIN"):
            touched = False
        elif data.startswith(f"table {table_prefix}"):
            touched = True
        elif data.startswith("COMMIT"):
            if touched:
                transactions.append((int(xid), lsn_to_int(lsn)))
    return transactions


def compare(truth, logged, label):
    """Same transactions, same order, no loss, no duplicate; commit LSNs strictly increasing."""
    for previous, current in zip(logged, logged[1:]):
        if current[1] <= previous[1]:
            raise CaptureFailure(f"{label}: log commit LSNs not strictly increasing: xid {previous[0]} "
                                 f"{int_to_lsn(previous[1])} then xid {current[0]} {int_to_lsn(current[1])}")
    truth_xids = [xid for xid, _ in truth]
    log_xids = [xid for xid, _ in logged]
    missing = sorted(set(truth_xids) - set(log_xids))
    extra = sorted(set(log_xids) - set(truth_xids))
    print(f"{label}: source committed {len(truth)} transactions on published tables; the log holds "
          f"{len(logged)} completed transactions; missing {len(missing)}, extra {len(extra)}")
    if missing or extra:
        raise CaptureFailure(f"{label}: missing from the log: {missing[:10]}; in the log but not committed at "
                             f"the source: {extra[:10]}")
    if truth_xids != log_xids:
        first = next(i for i, (a, b) in enumerate(zip(truth_xids, log_xids)) if a != b)
        raise CaptureFailure(f"{label}: order differs at position {first}: source xid {truth_xids[first]}, "
                             f"log xid {log_xids[first]}")
    lsn_mismatch = [(t, g) for t, g in zip(truth, logged) if t[1] != g[1]]
    if lsn_mismatch:
        t, g = lsn_mismatch[0]
        raise CaptureFailure(f"{label}: {len(lsn_mismatch)} commit LSNs differ from test_decoding's, first xid "
                             f"{t[0]}: source {int_to_lsn(t[1])}, log {int_to_lsn(g[1])}")
    print(f"{label}: same {len(truth)} transactions in the same order with the same commit LSNs")


class PsqlSession:
    """One long-lived psql connection for frequent polling (a sampler must not pay a new
    connection per sample). query() returns the output rows as text, or None when the server is
    unreachable (the session is reopened on the next call)."""

    END = "__trellara_sample_end__"

    def __init__(self, cluster, dbname="postgres"):
        # psql buffers stdout fully on a pipe; stdbuf makes it line-buffered so answers arrive.
        self.command = ["stdbuf", "-oL", os.path.join(PG_BIN, "psql"), "-X", "-q", "-A", "-t", "-h", cluster.socket_dir,
                        "-p", str(cluster.port), "-U", "postgres", "-d", dbname]
        self.process = None

    def query(self, sql, timeout_s=10):
        if self.process is None or self.process.poll() is not None:
            self.close()
            self.process = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.DEVNULL, text=True)
        try:
            self.process.stdin.write(f"{sql};\n\\echo {self.END}\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            self.close()
            return None
        # Raw reads from the pipe: a buffered reader would hide data from select().
        buffered = b""
        marker = f"{self.END}\n".encode()
        deadline = time.monotonic() + timeout_s
        fd = self.process.stdout.fileno()
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            chunk = os.read(fd, 65536)
            if not chunk:
                break  # psql exited: the connection was lost
            buffered += chunk
            if buffered.endswith(marker):
                return buffered[:-len(marker)].decode(errors="replace").rstrip("\n")
        self.close()
        return None

    def close(self):
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()   # our own child, by its Popen handle
            self.process.wait()
            self.process = None


def run_pgbench(cluster, args, dbname="postgres", check=True):
    command = [os.path.join(PG_BIN, "pgbench"), "-h", cluster.socket_dir, "-p", str(cluster.port),
               "-U", "postgres", *args, dbname]
    result = subprocess.run(command, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise CaptureFailure(f"pgbench {' '.join(args)} failed (exit {result.returncode}): {result.stderr[-2000:]}")
    return result


def wait_caught_up(cluster, lsn, flow="app", timeout_s=120, dbname="postgres"):
    """Waits until the flow's slot is confirmed at or past `lsn`."""
    def confirmed():
        text = cluster.query(f"SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = "
                             f"'trellara_{flow}'", dbname=dbname)
        return text and lsn_to_int(text) >= lsn
    wait_for(f"slot trellara_{flow} to be confirmed through {int_to_lsn(lsn)}", confirmed, timeout_s)


def setup_pgbench_apply(source, target, work, flow="app"):
    """pgbench tables on the source, the same schema and initial rows on the target (pg_dump), a
    flow on a publication of the four tables, and `work`/flow.toml naming source and target.
    Returns (log_dir, config_path)."""
    run_pgbench(source, ["-i", "-s", "1", "-q"])
    dump = subprocess.run([os.path.join(PG_BIN, "pg_dump"), "-h", source.socket_dir, "-p", str(source.port),
                           "-U", "postgres", "-t", "pgbench_*", "postgres"], capture_output=True, text=True,
                          check=True)
    target.psql(dump.stdout)
    log_dir = setup_flow(source, "CREATE PUBLICATION pub FOR TABLE pgbench_accounts, pgbench_branches, "
                                 "pgbench_tellers, pgbench_history", flow=flow, truth=False)
    config_path = write_flow_config(os.path.join(work, "flow.toml"), flow, log_dir, target.conninfo(),
                                    source.conninfo())
    return log_dir, config_path


# ---- machine-readable results (docs/correctness.md) ---------------------------------------------
#
# A scenario may declare what it proves with @scenario(...); run_scenarios() then appends one JSON
# line per scenario run to $TRELLARA_RESULTS_DIR/scenarios.jsonl (nothing is written when the
# variable is unset). Undecorated scenarios are recorded too, with empty metadata. The report
# (`trellara chaos report`) reads these lines; a row is covered only by a passing line of this run.

RESULTS_FILE = "scenarios.jsonl"
_current_faults = None   # point -> times fired, for the scenario running now


def scenario(seed_rows=(), suite="integration", fault_points=(), defect=None, pairs_with=None,
             invariants=()):
    """Declares what a scenario function proves, for the results file and the correctness report.

    seed_rows: seed 000 row names this scenario truly proves (the clean run); fault_points: the
    named fault points it injects (it must call record_fault_fired for each); defect: for a paired
    defect run (negative control), the defect it switches on, and pairs_with: the name of the clean
    scenario it pairs with. A defect scenario passes only when it caught its defect, so its status
    is also whether the defect was caught. invariants: what it checks, in words the report shows."""
    def mark(function):
        function.trellara_scenario = {
            "seed_rows": list(seed_rows), "suite": suite, "fault_points": list(fault_points),
            "defect": defect, "pairs_with": pairs_with, "invariants": list(invariants)}
        return function
    return mark


def record_fault_fired(point, count=1):
    """Reports that fault point `point` fired `count` more times in the running scenario (from the
    process's own output where it says so, otherwise from the scenario's own evidence that the
    fault's effect happened). A scenario declaring a fault point with no count recorded is shown as
    "fault not observed" and does not cover its row. No-op outside run_scenarios."""
    if _current_faults is not None:
        _current_faults[point] = _current_faults.get(point, 0) + int(count)


FAULT_FIRED_LINE = re.compile(r"trellara: fault point (\S+) fired (\d+) times")
FAULT_CRASH_LINE = re.compile(r"trellara: fault point (\S+): crash")


def checks_fail_under_defect(point, what, run_checks):
    """A negative control: runs `run_checks(env, outputs)` — the clean scenario's checks, passing `env`
    (TRELLARA_FAULTS=<point>:1:defect) to the `trellara` processes they start and appending those
    processes' stderr to `outputs`. The defect must have fired (its "fault point ... fired" line,
    else a harness failure) and the checks must fail; returns their failure."""
    env = dict(os.environ, TRELLARA_FAULTS=f"{point}:1:defect")
    outputs = []
    try:
        run_checks(env, outputs)
        caught = None
    except CaptureFailure as failure:
        caught = failure
    if not record_faults_from_output("".join(outputs)).get(point, 0):
        raise CaptureFailure(f"harness failure, not a caught defect: {point} never fired (the run "
                             f"{'failed: ' + str(caught)[:1500] if caught else 'passed'}; the processes said: "
                             f"{''.join(outputs)[-1500:]})")
    if caught is None:
        raise CaptureFailure(f"with {point} the {what} checks still passed: they cannot catch that defect")
    return caught


def record_faults_from_output(text):
    """Records the faults a `trellara` process says fired in its stderr `text` (it prints
    `trellara: fault point P fired N times` at exit, and `trellara: fault point P: crash` before a
    crash action kills it). Returns {point: count} of what it found."""
    found = {}
    for point, count in FAULT_FIRED_LINE.findall(text or ""):
        found[point] = found.get(point, 0) + int(count)
    for point in FAULT_CRASH_LINE.findall(text or ""):
        found[point] = found.get(point, 0) + 1
    for point, count in found.items():
        record_fault_fired(point, count)
    return found


def _append_result(record):
    directory = os.environ.get("TRELLARA_RESULTS_DIR")
    if not directory:
        return
    os.makedirs(directory, exist_ok=True)
    line = json.dumps(record, sort_keys=True) + "\n"
    # One write of one line with O_APPEND: lines of concurrent writers do not interleave.
    fd = os.open(os.path.join(directory, RESULTS_FILE), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _result_record(function, script, status, duration_s, error):
    meta = getattr(function, "trellara_scenario", None) or {}
    name = function.__name__
    # Paths inside the source tree are written relative to it ($PWD = the source directory, where
    # the command is run), so a report's commands work in any checkout.
    env = {key: os.environ[key].replace(SOURCE_DIR + os.sep, "$PWD/") if os.environ[key].startswith(SOURCE_DIR + os.sep)
           else os.environ[key] for key in ("TRELLARA_BIN", "TRELLARA_BUILD_DIR") if key in os.environ}
    prefix = " ".join(f"{key}={value}" for key, value in sorted(env.items()))
    command = f"python3 tests/integration/{script} {name}"
    defect = meta.get("defect")
    return {
        "kind": "integration", "name": name, "script": script, "suite": meta.get("suite", "integration"),
        "seed_rows": meta.get("seed_rows", []), "status": status, "duration_s": round(duration_s, 3),
        "command": f"{prefix} {command}" if prefix else command, "env": env,
        "fault_points": meta.get("fault_points", []), "faults_fired": dict(_current_faults or {}),
        "defect": defect, "pairs_with": meta.get("pairs_with"),
        "defect_caught": (status == "passed") if defect else None,
        "invariants": meta.get("invariants", []), "error": error,
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def run_scenarios(scenarios, *args):
    """A test script's main: runs each scenario (or only those named on the command line), with
    its duration; the first failure raises and ends the script non-zero. `args` are passed to every
    scenario (e.g. a shared cluster pair). With TRELLARA_RESULTS_DIR set, one JSON line per
    scenario run (passed or failed) is appended to its results file; scenarios not reached after a
    failure have no line (the report shows them as "no result", never as passed)."""
    global _current_faults
    only = sys.argv[1:]
    known = {scenario.__name__ for scenario in scenarios}
    if only and not known.intersection(only):
        # Naming no scenario of this script must not pass silently having run nothing.
        raise SystemExit(f"no scenario named {only}; this script runs: {sorted(known)}")
    script = os.path.basename(sys.argv[0])
    began = time.monotonic()
    for scenario_function in scenarios:
        if not only or scenario_function.__name__ in only:
            _current_faults = {}
            t0 = time.monotonic()
            try:
                scenario_function(*args)
            except BaseException as error:
                status = "interrupted" if isinstance(error, (KeyboardInterrupt, SystemExit)) else "failed"
                _append_result(_result_record(scenario_function, script, status, time.monotonic() - t0,
                                              f"{type(error).__name__}: {error}"[:2000]))
                _current_faults = None
                raise
            _append_result(_result_record(scenario_function, script, "passed", time.monotonic() - t0, None))
            _current_faults = None
            print(f"{scenario_function.__name__}: {time.monotonic() - t0:.1f}s")
    print(f"total {time.monotonic() - began:.1f}s")


def verify_with_applier(config_path, args=(), timeout_s=300):
    """`trellara verify --config F *args` beside a daemon `trellara apply` (verify compares at a
    point the applier is held at: with no applier it exits 2). The applier is our child, stopped
    with SIGTERM by its Popen handle. Returns verify's CompletedProcess."""
    apply_bin = os.environ.get("TRELLARA_APPLY_BIN", TRELLARA_BIN)  # another build may play the applier
    applier = subprocess.Popen([apply_bin, "apply", "--config", config_path], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    try:
        def running():
            if applier.poll() is not None:
                raise CaptureFailure(f"the applier beside verify exited {applier.returncode}: {applier.stderr.read()[-1500:]}")
            status = subprocess.run([TRELLARA_BIN, "status", "--config", config_path, "--format", "json"],
                                    capture_output=True, text=True, timeout=60)
            return status.returncode == 0 and json.loads(status.stdout).get("applier_running")
        wait_for("the applier beside verify to run", running, 60)
        return subprocess.run([TRELLARA_BIN, "verify", "--config", config_path, *args], capture_output=True, text=True,
                              timeout=timeout_s)
    finally:
        if applier.poll() is None:
            applier.terminate()
        applier.communicate(timeout=60)
