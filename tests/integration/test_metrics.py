#!/usr/bin/env python3
"""Integration: the applier's Prometheus endpoint ([metrics] listen, docs/apply.md "Metrics") and
the relay's counters (trellara.relay_metrics(), docs/relay.md), against real clusters and a real
`trellara apply` daemon:

  - metrics_endpoint_counts_applied_transactions: after N source transactions, GET /metrics shows
    transactions_applied_total reaching N; every line parses as the text format 0.0.4 (HELP and TYPE
    before each family's samples, every sample labelled flow="app"); once caught up the state is
    caught_up, lag_records and lag_seconds are 0 and last_commit_lsn is the target's origin
    progress; the relay's records_written and payload bytes grew by the workload;
  - quarantine_shows_open_rows_and_blocked_state: an UPDATE whose target row is gone is quarantined:
    quarantine_open 1, quarantined_total 1, state blocked; after repair + replay-ready it applies and
    quarantine_open is 0 again;
  - lost_connection_counts_a_retry: the applier's target session is terminated: retries_total
    grows by one and the applier catches up again;
  - bad_listen_value_is_refused: a malformed metrics.listen is a configuration error (exit 2, the
    setting named); an address already taken ends the command with exit 1 naming metrics.listen,
    nothing applied.

One source + target pair and one daemon for all four (cheap for CI).
"""
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capture_support import CaptureFailure, lsn_to_int, run_scenarios, scenario, wait_for  # noqa: E402
from test_apply_robustness import FlowPair, wait_log_covers_source  # noqa: E402

TRELLARA_BIN = os.environ.get("TRELLARA_BIN", "trellara")
CEILING_S = 120
N = 40
DDL = "CREATE TABLE public.items (id int PRIMARY KEY, qty int NOT NULL);"

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*",?)*)\})? '
                    r'(-?[0-9.eE+-]+|NaN|\+Inf|-Inf)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\.)*)"')


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(pair, name, listen):
    path = os.path.join(pair.work.name, name)
    with open(pair.config) as base, open(path, "w") as out:
        out.write(base.read())
        out.write(f'\n[metrics]\nlisten = "{listen}"\n')
    return path


def scrape(port):
    """GET /metrics: (content type, {(name, frozenset(labels)): value}), checking the format."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        content_type = response.headers.get("Content-Type")
        body = response.read().decode()
    if not body.endswith("\n"):
        raise CaptureFailure(f"the exposition does not end with a newline: {body[-200:]!r}")
    samples, helped, typed = {}, set(), {}
    for line in body.splitlines():
        if line.startswith("# HELP "):
            helped.add(line.split(" ")[2])
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            if kind not in ("counter", "gauge"):
                raise CaptureFailure(f"unexpected metric type in {line!r}")
            typed[name] = kind
            continue
        match = SAMPLE.match(line)
        if not match:
            raise CaptureFailure(f"line does not parse as a sample of the text format 0.0.4: {line!r}")
        name = match.group(1)
        if name not in helped or name not in typed:
            raise CaptureFailure(f"sample {line!r} comes before the HELP and TYPE lines of {name}")
        labels = dict(LABEL.findall(match.group(3) or ""))
        if labels.get("flow") != "app":
            raise CaptureFailure(f"sample {line!r} is not labelled flow=\"app\"")
        if typed[name] == "counter" and not name.endswith("_total"):
            raise CaptureFailure(f"counter {name} does not end in _total")
        samples[(name, frozenset(labels.items()))] = float(match.group(4))
    return content_type, samples


def value(samples, name, **labels):
    key = (name, frozenset({"flow": "app", **labels}.items()))
    if key not in samples:
        raise CaptureFailure(f"metric {name}{labels} is missing from the scrape")
    return samples[key]


def state_of(samples):
    on = [dict(k[1])["state"] for k, v in samples.items() if k[0] == "trellara_apply_state" and v == 1]
    if len(on) != 1:
        raise CaptureFailure(f"trellara_apply_state has {len(on)} states at 1: {on}")
    return on[0]


def relay_metrics(source):
    rows = source.query("SELECT metric, value FROM trellara.relay_metrics() WHERE flow = 'app'")
    return {m: int(v) for m, v in (line.split("|") for line in rows.splitlines())}


class Daemon:
    """`trellara apply` in daemon mode with output to files; stopped by SIGTERM to our own child."""

    def __init__(self, pair, config):
        self.out = open(os.path.join(pair.work.name, "apply.out"), "w")
        self.err_path = os.path.join(pair.work.name, "apply.err")
        self.err = open(self.err_path, "w")
        self.proc = subprocess.Popen([TRELLARA_BIN, "apply", "--config", config], stdout=self.out, stderr=self.err)

    def stderr(self):
        with open(self.err_path) as f:
            return f.read()

    def check_alive(self):
        if self.proc.poll() is not None:
            raise CaptureFailure(f"trellara apply exited {self.proc.returncode}: {self.stderr()[-2000:]}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
                raise CaptureFailure("trellara apply did not stop within 60 s of SIGTERM")
        self.out.close()
        self.err.close()
        return self.proc.returncode


def wait_scrape(daemon, port, what, predicate):
    last = {}

    def check():
        daemon.check_alive()
        try:
            _, samples = scrape(port)
        except (urllib.error.URLError, ConnectionError):
            return None
        last["samples"] = samples
        return samples if predicate(samples) else None
    try:
        return wait_for(what, check, CEILING_S)
    except CaptureFailure as failure:
        shown = {f"{k[0]}{dict(k[1])}": v for k, v in last.get("samples", {}).items()}
        raise CaptureFailure(f"{failure}; last scrape: {shown}") from None


@scenario(invariants=("transactions_applied_total reaches N", "every line parses, HELP/TYPE first, flow label",
                      "caught up: state caught_up, lag 0", "last_commit_lsn is the origin progress",
                      "relay_metrics() counters grow with the workload"))
def metrics_endpoint_counts_applied_transactions(pair, ctx):
    relay_before = relay_metrics(pair.source)
    for counter in ("records_written", "payload_bytes_appended", "fsyncs_completed", "worker_up"):
        if counter not in relay_before:
            raise CaptureFailure(f"trellara.relay_metrics() has no {counter} row: {relay_before}")
    daemon = ctx["daemon"]
    port = ctx["port"]
    wait_scrape(daemon, port, "the metrics endpoint to answer", lambda s: True)
    content_type, _ = scrape(port)
    if content_type != "text/plain; version=0.0.4; charset=utf-8":
        raise CaptureFailure(f"Content-Type {content_type!r}, expected the text format 0.0.4")
    statements = "".join(f"INSERT INTO public.items VALUES ({i}, {i});\n" for i in range(1, N + 1))
    pair.source.psql(statements)  # autocommit: N transactions
    wait_log_covers_source(pair.source)
    samples = wait_scrape(daemon, port, f"transactions_applied_total to reach {N}",
                          lambda s: value(s, "trellara_apply_transactions_applied_total") >= N)
    samples = wait_scrape(daemon, port, "the applier to report caught_up with no lag",
                          lambda s: state_of(s) == "caught_up" and value(s, "trellara_apply_lag_records") == 0)
    applied = value(samples, "trellara_apply_transactions_applied_total")
    if applied != N:
        raise CaptureFailure(f"transactions_applied_total is {applied}, expected exactly {N}")
    for name, expected in (("trellara_apply_up", 1), ("trellara_apply_lag_seconds", 0),
                           ("trellara_apply_quarantine_open", 0), ("trellara_apply_quarantined_total", 0),
                           ("trellara_apply_duplicates_skipped_total", 0)):
        if value(samples, name) != expected:
            raise CaptureFailure(f"{name} is {value(samples, name)}, expected {expected}")
    # One row statement per INSERT, or fewer when a grouped batch merged them into one multi-row
    # INSERT (docs/apply.md "Merged statements in a group"); never none, never more.
    statements = value(samples, "trellara_apply_statements_total")
    if not 1 <= statements <= N:
        raise CaptureFailure(f"statements_total {statements} is not between 1 and {N} for {N} one-row INSERTs")
    progress = lsn_to_int(pair.target.query("SELECT pg_replication_origin_progress('trellara_app', false)"))
    if int(value(samples, "trellara_apply_last_commit_lsn")) != progress:
        raise CaptureFailure(f"last_commit_lsn {value(samples, 'trellara_apply_last_commit_lsn')} is not the "
                             f"target's origin progress {progress}")
    # The consumer offset (the checkpoint) is written while applying every 512 transactions or every
    # second, and once the log has gone quiet (within two 200 ms bookkeeping intervals of the end,
    # docs/apply.md "The consumer offset at the log's end"): wait for it, do not assume it.
    samples = wait_scrape(daemon, port, "the consumer offset to be written once the log went quiet",
                          lambda s: value(s, "trellara_apply_last_checkpoint_timestamp_seconds") > 0)
    checkpoint = value(samples, "trellara_apply_last_checkpoint_timestamp_seconds")
    if not time.time() - 600 < checkpoint <= time.time() + 5:
        raise CaptureFailure(f"last_checkpoint_timestamp_seconds {checkpoint} is not a recent Unix time")
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=5)
        raise CaptureFailure("GET /other answered 200; only /metrics is served")
    except urllib.error.HTTPError as error:
        if error.code != 404:
            raise CaptureFailure(f"GET /other answered {error.code}, expected 404") from None
    relay_after = relay_metrics(pair.source)
    if relay_after["records_written"] < relay_before["records_written"] + N:
        raise CaptureFailure(f"relay records_written went {relay_before['records_written']} -> "
                             f"{relay_after['records_written']} over {N} transactions")
    if relay_after["payload_bytes_appended"] <= relay_before["payload_bytes_appended"]:
        raise CaptureFailure("relay payload_bytes_appended did not grow with the workload")
    if relay_after["fsyncs_completed"] <= relay_before["fsyncs_completed"]:
        raise CaptureFailure("relay fsyncs_completed did not grow with the workload")
    if relay_after.get("log_durable_lsn", 0) < progress:
        raise CaptureFailure(f"relay log_durable_lsn {relay_after.get('log_durable_lsn')} is behind the applied {progress}")
    print(f"metrics: applied {int(applied)} of {N}, caught up with lag 0; relay records "
          f"{relay_before['records_written']} -> {relay_after['records_written']}")


@scenario(invariants=("quarantine_open 1, quarantined_total 1, state blocked",
                      "after repair + replay-ready: applied, quarantine_open 0"))
def quarantine_shows_open_rows_and_blocked_state(pair, ctx):
    daemon, port = ctx["daemon"], ctx["port"]
    pair.target.query("DELETE FROM public.items WHERE id = 7")
    xid = int(pair.source.query("BEGIN; UPDATE public.items SET qty = 70 WHERE id = 7; SELECT txid_current(); "
                                "COMMIT").splitlines()[-1])
    wait_log_covers_source(pair.source)
    samples = wait_scrape(daemon, port, "the applier to report blocked with one open quarantine row",
                          lambda s: state_of(s) == "blocked" and value(s, "trellara_apply_quarantine_open") == 1)
    if value(samples, "trellara_apply_quarantined_total") != 1:
        raise CaptureFailure(f"quarantined_total {value(samples, 'trellara_apply_quarantined_total')}, expected 1")
    applied = value(samples, "trellara_apply_transactions_applied_total")
    commit_lsn = pair.target.query(f"SELECT commit_lsn FROM trellara.quarantine WHERE flow = 'app' AND xid = {xid}")
    pair.target.query("INSERT INTO public.items VALUES (7, 7)")
    pair.target.query(f"SELECT trellara.quarantine_replay_ready({xid}, '{commit_lsn}')")
    wait_scrape(daemon, port, "the repaired transaction to apply and quarantine_open to return to 0",
                lambda s: state_of(s) == "caught_up" and value(s, "trellara_apply_quarantine_open") == 0
                and value(s, "trellara_apply_transactions_applied_total") == applied + 1)
    if pair.target.query("SELECT qty FROM public.items WHERE id = 7") != "70":
        raise CaptureFailure("the replayed UPDATE is not on the target")
    print(f"metrics: quarantine of xid {xid} showed blocked and quarantine_open 1, then 0 after replay")


@scenario(invariants=("a lost target connection counts one retry", "the applier is caught_up again after it"))
def lost_connection_counts_a_retry(pair, ctx):
    daemon, port = ctx["daemon"], ctx["port"]
    _, samples = scrape(port)
    retries = value(samples, "trellara_apply_retries_total")
    killed = pair.target.query("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                               "WHERE application_name = 'trellara/app'")
    if killed != "1":
        raise CaptureFailure(f"terminated {killed} applier sessions on the target, expected 1")
    pair.source.psql("INSERT INTO public.items VALUES (1000, 1)")
    wait_scrape(daemon, port, "the retry to be counted and the applier to catch up again",
                lambda s: value(s, "trellara_apply_retries_total") >= retries + 1 and state_of(s) == "caught_up"
                and value(s, "trellara_apply_lag_records") == 0)
    print(f"metrics: retries_total {int(retries)} -> {int(retries) + 1}+ after the target session was terminated")


@scenario(invariants=("malformed metrics.listen: exit 2 naming the setting",
                      "address in use: exit 1 naming metrics.listen, nothing applied"))
def bad_listen_value_is_refused(pair, ctx):
    for bad in ("127.0.0.1", "127.0.0.1:99999", "metrics.example:9187"):
        config = write_config(pair, "bad.toml", bad)
        result = subprocess.run([TRELLARA_BIN, "apply", "--config", config, "--until-caught-up"],
                                capture_output=True, text=True, timeout=60)
        if result.returncode != 2 or "metrics.listen" not in result.stderr:
            raise CaptureFailure(f"listen = {bad!r}: exit {result.returncode}, stderr {result.stderr!r}; expected "
                                 "exit 2 naming metrics.listen")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        taken = held.getsockname()[1]
        config = write_config(pair, "taken.toml", f"127.0.0.1:{taken}")
        before = pair.target.query("SELECT count(*) FROM trellara.applied_transactions")
        result = subprocess.run([TRELLARA_BIN, "apply", "--config", config, "--until-caught-up"],
                                capture_output=True, text=True, timeout=60)
    if result.returncode != 1 or "metrics.listen" not in result.stderr:
        raise CaptureFailure(f"listen on a taken port: exit {result.returncode}, stderr {result.stderr!r}; expected "
                             "exit 1 naming metrics.listen")
    if pair.target.query("SELECT count(*) FROM trellara.applied_transactions") != before:
        raise CaptureFailure("an applier that could not serve its metrics applied transactions")
    print(f"metrics: bad listen values refused; taken port {taken}: {result.stderr.strip()[-200:]}")


def main():
    with FlowPair("metrics", DDL, ("public.items",)) as pair:
        port = free_port()
        daemon = Daemon(pair, write_config(pair, "metrics.toml", f"127.0.0.1:{port}"))
        ctx = {"daemon": daemon, "port": port}
        try:
            run_scenarios([metrics_endpoint_counts_applied_transactions, quarantine_shows_open_rows_and_blocked_state,
                           lost_connection_counts_a_retry, bad_listen_value_is_refused], pair, ctx)
        finally:
            code = daemon.stop()
        if code != 0:
            raise CaptureFailure(f"trellara apply exited {code} on SIGTERM: {daemon.stderr()[-2000:]}")
        pair.check_no_crashes()


if __name__ == "__main__":
    main()
