#!/usr/bin/env python3
"""Integration: log retention with a real source (real relay worker) and a real `trellara apply`.

Source with `trellara.log_segment_size = 1MB`, a table of ~1 KiB rows and a flow on it; target
without the extension. Every wait is a condition with a generous ceiling; nothing depends on how
fast the machine is, only on what the relay and applier do.

1. A following applier (daemon) registers consumer "applier" on its first start. A workload of
   about 10 segments, in steps of ~1 segment each followed by "the applier applied it": after each
   step the directory comes back to at most MAX_SEGMENTS_FOLLOWING segments, the log's first
   offset moves, and the applier's consumer offset never lies below the log's first offset.
2. A stopped consumer retains: consumer "audit" is registered (`trellara log register-consumer`)
   and never reads; 5 more segments of workload: nothing at or after audit's offset is deleted,
   status() says the log is retained by audit with its bytes, check() warns naming it
   (trellara.log_retention_warn_size = 2MB), consumers() lists both. Unregistering the running
   applier is refused.
3. Unregister releases: `SELECT trellara.unregister_consumer('app', 'audit')` -> the directory
   comes back to at most MAX_SEGMENTS_FOLLOWING segments. The relay then restarts (stop_flow,
   start_flow) on a log that no longer starts at offset 0, and capture and apply go on.
4. Ceiling: the applier is stopped, trellara.log_retention_max_size = 3MB, 6 segments of
   workload: the relay marks consumer "applier" lost, keeps the log within the ceiling,
   consumers()/check() report it (critical, with the remedy) and `trellara apply` refuses to
   continue, saying to reseed. Negative side: before the ceiling, the stopped applier alone kept
   everything (nothing below its offset was deleted).
It prints what it measured. It never leaves a cluster running (the harness stops it by PID).
"""

import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import CaptureFailure, TRELLARA_BIN, wait_for  # noqa: E402
from flow_pair import FlowPair  # noqa: E402

SEGMENT_BYTES = 1 << 20
# Per transaction: 200 rows of ~1 KiB of random hex -> ~220 KiB of envelope, 5 per segment.
ROWS_PER_TRANSACTION = 200
TRANSACTIONS_PER_SEGMENT = 5
MAX_SEGMENTS_FOLLOWING = 3   # active segment + the one the applier reads + one rolled meanwhile
WAIT_S = 90


def segments(log_dir):
    return sorted(int(name[len("segment-"):-len(".log")]) for name in os.listdir(log_dir)
                  if name.startswith("segment-") and name.endswith(".log"))


def log_bytes(log_dir):
    """Bytes of the segments listed. The relay deletes the oldest segments while this runs (retention
    passes every second): a listed segment gone when measured was reclaimed meanwhile and holds no
    bytes any more (as ListSegmentSizes does in core)."""
    total = 0
    for first in segments(log_dir):
        try:
            total += os.path.getsize(os.path.join(log_dir, f"segment-{first:020d}.log"))
        except FileNotFoundError:
            pass
    return total


def consumers(log_dir):
    result = subprocess.run([TRELLARA_BIN, "log", "consumers", "--dir", log_dir, "--format", "json"],
                            capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise CaptureFailure(f"trellara log consumers failed: {result.stderr}")
    return json.loads(result.stdout)


def consumer(log_dir, name):
    return next((c for c in consumers(log_dir)["consumers"] if c["name"] == name), None)


def write_segments(source, count):
    for _ in range(count * TRANSACTIONS_PER_SEGMENT):
        source.query(f"INSERT INTO public.blob (payload) SELECT repeat(md5(random()::text), 32) "
                     f"FROM generate_series(1, {ROWS_PER_TRANSACTION})")


def wait_applied(pair, applier):
    """The applier applied everything in the log: same row count, consumer offset at the log's end."""
    source, target, log_dir = pair.source, pair.target, pair.log_dir
    pair.wait_log_covers_source(WAIT_S)
    want = source.query("SELECT count(*) FROM public.blob")
    wait_for(f"the applier to apply {want} rows",
             while_running(applier, lambda: target.query("SELECT count(*) FROM public.blob") == want), WAIT_S)
    end = consumers(log_dir)["end_offset"]
    wait_for("the applier's consumer offset to reach the log's end",
             while_running(applier, lambda: (consumer(log_dir, "applier") or {}).get("next_offset", -1) >= end), WAIT_S)


def start_applier(config_path, work):
    """The daemon applier, its output in a file (a pipe nobody reads would stall it once full)."""
    output = open(os.path.join(work, "apply.out"), "w+")
    applier = subprocess.Popen([TRELLARA_BIN, "apply", "--config", config_path], stdout=output,
                               stderr=subprocess.STDOUT, text=True)
    applier.output = output
    return applier


def applier_output(applier):
    applier.output.flush()
    applier.output.seek(0)
    return applier.output.read()


def while_running(applier, predicate):
    """`predicate` for wait_for that fails at once, with the applier's output, if the applier exited."""
    def check():
        if applier.poll() is not None:
            raise CaptureFailure(f"the daemon applier exited ({applier.returncode}) while the test waited on it: "
                                 f"{applier_output(applier)[-2000:]}")
        return predicate()
    return check


def stop_applier(applier):
    applier.send_signal(signal.SIGTERM)   # our own child, by its Popen handle
    try:
        applier.wait(timeout=60)
    finally:
        if applier.poll() is None:
            applier.kill()
            applier.wait()
    if applier.returncode != 0:
        raise CaptureFailure(f"the applier did not stop cleanly (exit {applier.returncode}): "
                             f"{applier_output(applier)[-1000:]}")


def check_rows(source, flow="app"):
    return source.query(f"SELECT severity || '|' || \"check\" || '|' || subject || '|' || detail || '|' || "
                        f"coalesce(remedy, '') FROM trellara.check('{flow}') WHERE \"check\" LIKE 'log_%'")


def log_retention_follows_consumers():
    settings = {"trellara.log_segment_size": "'1MB'", "trellara.log_retention_warn_size": "'2MB'"}
    with FlowPair("retention", "CREATE TABLE public.blob (id bigserial PRIMARY KEY, payload text NOT NULL)",
                  tables=("public.blob",), source_settings=settings) as pair:
        source, log_dir, config_path, work = pair.source, pair.log_dir, pair.config, pair.work.name
        # Zero consumers: nothing is deleted (the log waits for its first consumer).
        write_segments(source, 3)
        pair.wait_log_covers_source(WAIT_S)
        before = segments(log_dir)
        if len(before) < 3 or before[0] != 0:
            raise CaptureFailure(f"without a consumer the log should hold every segment from offset 0: {before}")
        print(f"no consumer registered: {len(before)} segments kept, first offset {before[0]}")

        # 1. A following applier keeps the directory within a few segments.
        applier = start_applier(config_path, work)
        try:
            wait_for("the applier to register consumer 'applier'",
                     while_running(applier, lambda: consumer(log_dir, "applier")), WAIT_S)
            steps = 10
            for step in range(steps):
                write_segments(source, 1)
                wait_applied(pair, applier)
                wait_for(f"step {step}: the log to shrink to {MAX_SEGMENTS_FOLLOWING} segments",
                         lambda: len(segments(log_dir)) <= MAX_SEGMENTS_FOLLOWING, WAIT_S)
                state = consumers(log_dir)
                applier_offset = consumer(log_dir, "applier")["next_offset"]
                if applier_offset < state["first_offset"]:
                    raise CaptureFailure(f"the log starts at {state['first_offset']}, past the applier's offset "
                                         f"{applier_offset}")
            state = consumers(log_dir)
            written = SEGMENT_BYTES * (steps + 3)
            print(f"following applier: ~{written >> 20} MiB written, directory now {len(segments(log_dir))} "
                  f"segments / {log_bytes(log_dir)} bytes, log starts at offset {state['first_offset']} of "
                  f"{state['end_offset']}")
            if state["first_offset"] == 0 or log_bytes(log_dir) > MAX_SEGMENTS_FOLLOWING * SEGMENT_BYTES:
                raise CaptureFailure(f"retention did not delete segments behind the applier: {state}")

            # 2. A stopped consumer retains.
            registered = subprocess.run([TRELLARA_BIN, "log", "register-consumer", "audit", "--dir", log_dir],
                                        capture_output=True, text=True, timeout=60)
            if registered.returncode != 0:
                raise CaptureFailure(f"register-consumer failed: {registered.stderr}")
            audit_offset = consumer(log_dir, "audit")["next_offset"]
            first_segment_for_audit = max(s for s in segments(log_dir) if s <= audit_offset)
            write_segments(source, 5)
            wait_applied(pair, applier)
            kept = segments(log_dir)
            if kept[0] > first_segment_for_audit or len(kept) < 5:
                raise CaptureFailure(f"the stopped consumer audit (offset {audit_offset}) did not retain the log: "
                                     f"segments {kept}")
            retained = source.query("SELECT log_retained_by || '|' || log_retained_bytes FROM trellara.status() "
                                    "WHERE flow = 'app'")
            by, held = retained.split("|")
            if by != "audit" or int(held) < 4 * SEGMENT_BYTES:
                raise CaptureFailure(f"status() does not show the log retained by audit: {retained}")
            rows = check_rows(source)
            if "warning|log_retention|audit|consumer audit retains" not in rows or \
                    "trellara.unregister_consumer('app', 'audit')" not in rows:
                raise CaptureFailure(f"check() does not warn about audit holding the log: {rows}")
            listed = source.query("SELECT consumer || ':' || running || ':' || lost FROM trellara.consumers('app')")
            if listed.splitlines() != ["applier:true:false", "audit:false:false"]:
                raise CaptureFailure(f"trellara.consumers('app') is {listed!r}")
            busy = source.psql("SELECT trellara.unregister_consumer('app', 'applier')", check=False)
            if busy.returncode == 0 or "stop that applier first" not in busy.stderr:
                raise CaptureFailure(f"unregistering the running applier was not refused: {busy.stderr}")
            print(f"stopped consumer audit retains {len(kept)} segments; status(): {retained}; check(): "
                  f"{rows.splitlines()[0]}")

            # 3. Unregistering it releases the log.
            if source.query("SELECT trellara.unregister_consumer('app', 'audit')") != "t":
                raise CaptureFailure("unregister_consumer did not return true")
            wait_for("the log to shrink after unregistering audit",
                     lambda: len(segments(log_dir)) <= MAX_SEGMENTS_FOLLOWING, WAIT_S)
            print(f"unregistered audit: directory back to {len(segments(log_dir))} segments")
            # The relay restarts on a log that no longer starts at offset 0 and goes on.
            first_before_restart = consumers(log_dir)["first_offset"]
            source.query("SELECT trellara.stop_flow('app')")
            source.query("SELECT trellara.start_flow('app')")
            wait_for("the relay to run again", lambda: source.query(
                "SELECT state FROM trellara.status() WHERE flow = 'app'") == "running", WAIT_S)
            write_segments(source, 1)
            wait_applied(pair, applier)
            print(f"relay restarted on a log starting at offset {first_before_restart}; the applier followed")
            missing = source.psql("SELECT trellara.unregister_consumer('app', 'audit')", check=False)
            if missing.returncode == 0 or "has no consumer named audit" not in missing.stderr:
                raise CaptureFailure(f"unregistering an unknown consumer did not fail clearly: {missing.stderr}")
        finally:
            if applier.poll() is None:
                stop_applier(applier)

        # 4. The ceiling marks the stopped applier lost and its applier refuses.
        stopped_offset = consumer(log_dir, "applier")["next_offset"]
        write_segments(source, 4)
        pair.wait_log_covers_source(WAIT_S)
        if segments(log_dir)[0] > stopped_offset:
            raise CaptureFailure("without a ceiling the stopped applier's segments were deleted")
        source.query("ALTER SYSTEM SET trellara.log_retention_max_size = '3MB'")
        source.query("SELECT pg_reload_conf()")
        write_segments(source, 2)
        pair.wait_log_covers_source(WAIT_S)
        wait_for("the ceiling to mark the applier lost", lambda: consumer(log_dir, "applier")["lost"], WAIT_S)
        wait_for("the log to fit under the ceiling", lambda: log_bytes(log_dir) <= 3 * SEGMENT_BYTES, WAIT_S)
        if segments(log_dir)[0] <= stopped_offset:
            raise CaptureFailure("the applier was marked lost but the segment it needs is still there")
        rows = check_rows(source)
        if "critical|log_consumer_lost|applier|" not in rows or "reseed" not in rows:
            raise CaptureFailure(f"check() does not report the lost consumer: {rows}")
        refused = pair.apply(expect=None, timeout_s=120)
        if refused.returncode == 0 or "marked lost" not in refused.stderr or "reseed" not in refused.stderr:
            raise CaptureFailure(f"the lost applier did not refuse (exit {refused.returncode}): {refused.stderr}")
        print(f"ceiling 3MB: applier marked lost, log {log_bytes(log_dir)} bytes in {len(segments(log_dir))} "
              f"segments; apply refused: {refused.stderr.strip()[:300]}")
        relay = source.query("SELECT state, consecutive_failures FROM trellara.status() WHERE flow = 'app'")
        if not relay.startswith("running|0"):
            raise CaptureFailure(f"the source flow is not running cleanly: {relay}")
        pair.check_no_crashes()
        print("ok: log_retention_follows_consumers")


if __name__ == "__main__":
    log_retention_follows_consumers()
