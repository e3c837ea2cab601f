#!/usr/bin/env python3
"""Integration: `trellara soak` drives large transactions through a live flow and reports memory,
lag and consistency (docs/soak.md).

Each scenario starts a source cluster (the trellara extension, a flow on `FOR ALL TABLES`, so the
soak table soak creates is captured and its CREATE TABLE carried to the target by DDL capture)
and an empty target cluster (no extension: the applier bootstraps its state). The source decodes
with logical_decoding_work_mem = 1MB so the 20000-row transactions are larger than it.

  soak_with_child_applier_passes_and_reports_memory_and_lag
      `trellara soak --duration 20s --rows-per-transaction 20000 --run-applier --format json`
      exits 0 with ok, committed, rolled-back and savepoint-rolled-back transactions, one lag
      sample per committed transaction, relay and applier peaks > 0, every check passing; the
      target's soak table has the source's row count (read here, not from soak's claim), and no
      `trellara apply` is left running.
  negative_control_target_row_deleted_behind_the_applier_fails_the_check
      after a passing soak, one row of the soak table is deleted on the target behind the
      applier's back; `trellara soak --duration 1s` again exits 1 with ok false and the
      table_digest check failing (the settled check still passes: the applier is not behind).
  soak_beside_a_running_applier_samples_it_and_enforces_the_memory_limit
      an applier started by the test, `--applier-pid PID --memory-limit-mib 1 --format text`: exit
      1 with the memory_limit check failing (a relay or applier above 1 MiB), settled and
      table_digest passing, the applier's PID in the summary, and the applier still running
      afterwards (soak never signals a process it did not start).
  soak_refuses_without_an_applier_or_an_unpublished_table
      on a flow whose publication is FOR TABLE public.other: neither --run-applier nor
      --applier-pid is exit 2 naming both; with --run-applier the soak table (new, so not
      published) is refused with exit 2 and the ALTER PUBLICATION hint, and soak leaves no table.

It must never signal a process it did not start (soak stops its own child applier; clusters are
stopped by the harness by PID) and never leave a cluster running.
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import CaptureFailure, TRELLARA_BIN, assert_no_backend_crashes, run_scenarios, scenario  # noqa: E402
import flow_pair  # noqa: E402

SOAK_TABLE = "public.trellara_soak"
SOAK_TIMEOUT_S = 420


class SoakPair(flow_pair.FlowPair):
    """A source with a FOR ALL TABLES flow and an empty target; stops both by PID. The work
    directory is readable by the postgres user (soak's workload reads the configuration)."""

    def __init__(self, name, publication_sql="CREATE PUBLICATION pub FOR ALL TABLES", source_sql=None):
        super().__init__(name, source_sql=source_sql or "", target_sql="", publication=publication_sql,
                         source_settings={"logical_decoding_work_mem": "'1MB'"}, shared_work_dir=True)


def soak(pair, *args):
    """`trellara soak --config F --format json *args`; returns (exit code, parsed JSON or None, stderr)."""
    command = [TRELLARA_BIN, "soak", "--config", pair.config, "--format", "json", "--settle-timeout", "3m", *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=SOAK_TIMEOUT_S)
    report = None
    try:
        report = json.loads(result.stdout) if result.stdout.strip() else None
    except json.JSONDecodeError:
        raise CaptureFailure(f"`{' '.join(command)}` printed something that is not one JSON object: {result.stdout[-1500:]}")
    print(f"soak {' '.join(args)}: exit {result.returncode}; "
          + (json.dumps({k: report[k] for k in ("transactions", "rows", "relay", "applier", "lag_ms", "ok")})
             if report else "no report")
          + (f"; stderr: {result.stderr.strip()[-800:]}" if result.returncode else ""))
    return result.returncode, report, result.stderr


def checks_by_name(report):
    return {check["name"]: check for check in report["checks"]}


def no_applier_left(pair):
    """No session of a `trellara apply` of flow app remains on the target."""
    left = pair.target.query("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'trellara/app'")
    if left != "0":
        raise CaptureFailure(f"{left} applier sessions of flow app remain on the target after soak ended")


def passing_soak(pair):
    code, report, stderr = soak(pair, "--duration", "20s", "--rows-per-transaction", "20000", "--run-applier")
    if code != 0 or not report or report.get("ok") is not True:
        raise CaptureFailure(f"soak exited {code} (ok={report and report.get('ok')}): "
                             f"{json.dumps(report)[:2500] if report else ''} {stderr[-1500:]}")
    tx = report["transactions"]
    if tx["committed"] <= 0 or tx["rolled_back"] <= 0 or tx["savepoint_rollbacks"] <= 0:
        raise CaptureFailure(f"soak did not exercise commits, top-level aborts and savepoint rollbacks: {tx}")
    lag = report["lag_ms"]
    if lag["samples"] != tx["committed"] or not (0 < lag["p50"] <= lag["p99"] <= lag["max"]):
        raise CaptureFailure(f"lag samples do not cover every committed transaction ({tx['committed']}): {lag}")
    for side in ("relay", "applier"):
        memory = report[side]
        if not memory["pid"] or not memory["peak_rss_kib"] or memory["peak_rss_kib"] <= 0 \
                or not memory["max_vmrss_kib"] or memory["max_vmrss_kib"] <= 0:
            raise CaptureFailure(f"no memory peaks for the {side}: {memory}")
        # This kernel (Debian 12, 6.x) splits VmRSS: the private heap must be reported, and the
        # split cannot exceed VmRSS's own maximum.
        split = [memory[k] for k in ("max_rss_anon_kib", "max_rss_file_kib", "max_rss_shmem_kib")]
        if any(v is None for v in split) or split[0] <= 0 or max(split) > memory["max_vmrss_kib"]:
            raise CaptureFailure(f"the {side}'s VmRSS split (RssAnon/RssFile/RssShmem) is missing or inconsistent: "
                                 f"{memory}")
    checks = checks_by_name(report)
    for name in ("settled", "table_digest", "relay_sampled", "applier_ran"):
        if name not in checks or not checks[name]["ok"]:
            raise CaptureFailure(f"check {name} did not pass: {checks.get(name)}")
    # Independent of soak's own claim: the target's rows, counted here.
    source_rows = pair.source.query(f"SELECT count(*) FROM {SOAK_TABLE}")
    target_rows = pair.target.query(f"SELECT count(*) FROM {SOAK_TABLE}")
    if source_rows != target_rows or source_rows == "0":
        raise CaptureFailure(f"{SOAK_TABLE}: source {source_rows} rows, target {target_rows} rows")
    no_applier_left(pair)
    return report


@scenario(invariants=["large committed, rolled-back and savepoint-rolled-back transactions reach the target exactly",
                      "relay and applier memory and per-transaction lag are measured"])
def soak_with_child_applier_passes_and_reports_memory_and_lag():
    with SoakPair("soak-pass") as pair:
        passing_soak(pair)
        assert_no_backend_crashes(pair.source, pair.target)


@scenario(invariants=["a target that differs from the source fails soak's table_digest check with exit 1"])
def negative_control_target_row_deleted_behind_the_applier_fails_the_check():
    with SoakPair("soak-neg") as pair:
        passing_soak(pair)
        deleted = pair.target.query(f"DELETE FROM {SOAK_TABLE} WHERE id = (SELECT min(id) FROM {SOAK_TABLE}) "
                                    "RETURNING id")
        print(f"deleted id {deleted} on the target behind the applier's back")
        code, report, stderr = soak(pair, "--duration", "1s", "--rows-per-transaction", "2000", "--run-applier")
        if code != 1 or not report or report.get("ok") is not False:
            raise CaptureFailure(f"soak over a tampered target exited {code} (ok={report and report.get('ok')}), "
                                 f"expected exit 1 and ok false: {stderr[-1500:]}")
        checks = checks_by_name(report)
        if checks["table_digest"]["ok"] or "differs" not in checks["table_digest"]["detail"]:
            raise CaptureFailure(f"the table_digest check did not catch the deleted row: {checks['table_digest']}")
        if not checks["settled"]["ok"]:
            raise CaptureFailure(f"the applier fell behind in the negative control (not what it tests): {checks['settled']}")
        if "table_digest" not in stderr:
            raise CaptureFailure(f"soak's error does not name the failed check: {stderr[-800:]}")
        no_applier_left(pair)


def soak_beside_a_running_applier_samples_it_and_enforces_the_memory_limit():
    with SoakPair("soak-pid") as pair:
        applier = subprocess.Popen([TRELLARA_BIN, "apply", "--config", pair.config], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True)
        try:
            result = subprocess.run([TRELLARA_BIN, "soak", "--config", pair.config, "--duration", "5s",
                                     "--rows-per-transaction", "5000", "--applier-pid", str(applier.pid),
                                     "--memory-limit-mib", "1", "--settle-timeout", "3m"],
                                    capture_output=True, text=True, timeout=SOAK_TIMEOUT_S)
            print(f"soak --applier-pid {applier.pid} --memory-limit-mib 1: exit {result.returncode}\n{result.stdout}"
                  f"{result.stderr.strip()}")
            lines = result.stdout.splitlines()
            if result.returncode != 1 or "memory_limit" not in result.stderr:
                raise CaptureFailure(f"expected exit 1 naming memory_limit, got {result.returncode}: {result.stderr}")
            for expected in ("FAILED  memory_limit", "ok      settled", "ok      table_digest", "ok      applier_ran",
                             f"pid {applier.pid}"):
                if not any(expected in line for line in lines):
                    raise CaptureFailure(f"the text summary has no line with {expected!r}: {result.stdout}")
            if applier.poll() is not None:
                raise CaptureFailure(f"the applier soak only sampled ended (exit {applier.returncode})")
        finally:
            if applier.poll() is None:
                applier.terminate()
            applier.communicate(timeout=60)


def soak_refuses_without_an_applier_or_an_unpublished_table():
    with SoakPair("soak-usage", "CREATE PUBLICATION pub FOR TABLE public.other",
                  "CREATE TABLE public.other (id int PRIMARY KEY)") as pair:
        result = subprocess.run([TRELLARA_BIN, "soak", "--config", pair.config, "--duration", "5s"],
                                capture_output=True, text=True, timeout=60)
        print(f"soak without an applier: exit {result.returncode}: {result.stderr.strip()}")
        if result.returncode != 2 or "--run-applier" not in result.stderr or "--applier-pid" not in result.stderr:
            raise CaptureFailure(f"expected exit 2 naming --run-applier and --applier-pid, got {result.returncode}: "
                                 f"{result.stderr}")
        exists = pair.source.query(f"SELECT to_regclass('{SOAK_TABLE}') IS NOT NULL")
        if exists != "f":
            raise CaptureFailure("soak created its table on the source although it refused to run")
        result = subprocess.run([TRELLARA_BIN, "soak", "--config", pair.config, "--duration", "5s", "--run-applier"],
                                capture_output=True, text=True, timeout=60)
        print(f"soak on an unpublished table: exit {result.returncode}: {result.stderr.strip()}")
        if result.returncode != 2 or "ALTER PUBLICATION pub ADD TABLE public.trellara_soak" not in result.stderr \
                or "FOR ALL TABLES" not in result.stderr:
            raise CaptureFailure(f"expected exit 2 with the ALTER PUBLICATION hint, got {result.returncode}: "
                                 f"{result.stderr}")
        if pair.source.query(f"SELECT to_regclass('{SOAK_TABLE}') IS NOT NULL") != "f":
            raise CaptureFailure("soak left its table on the source after refusing it as unpublished")
        no_applier_left(pair)


if __name__ == "__main__":
    run_scenarios([
        soak_refuses_without_an_applier_or_an_unpublished_table,
        soak_with_child_applier_passes_and_reports_memory_and_lag,
        negative_control_target_row_deleted_behind_the_applier_fails_the_check,
        soak_beside_a_running_applier_samples_it_and_enforces_the_memory_limit,
    ])
