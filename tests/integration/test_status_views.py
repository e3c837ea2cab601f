#!/usr/bin/env python3
"""Integration: `trellara status --config F --view dashboard|diagnostics|alerts|report --format
text|json` (docs/status.md) against a real source and target cluster.

Source: orders and items in publication pub, flow app. Target: the same two tables. Every scenario
runs all four views in both formats (alerts exit 0 none firing, 3 a critical alert fires, 4 only
warnings fire; the other views exit 0). Scenarios (one cluster pair, in this order):
  - views_on_a_healthy_caught_up_flow: with a daemon `trellara apply` caught up: the dashboard is
    the default view (same JSON fields); diagnostics names the log's segments and consumers, the
    applier lock holder (pid and application_name of the applier's session, as pg_stat_activity
    says), the origin progress, the dedup row count (= the rows of trellara.applied_transactions),
    the relay's trellara.status() row and metrics; no alert fires (exit 0), and a 1-byte
    --alert-log-retention-bytes makes exactly log_retention_bytes fire (warning, exit 4); the report
    lists the publication's tables and names verify;
  - views_with_the_applier_stopped_and_records_pending: exactly applier_not_running fires
    (critical, exit 3) with `trellara apply` as its next action; no lock holder; a source that
    cannot be reached is reported as a fact (relay_error not firing, value unknown), not a failure;
  - views_with_a_quarantined_transaction: quarantine_present fires (critical, exit 3) with the
    quarantine's xid and the replay-ready command; diagnostics lists the quarantined row; the
    report counts it; after the repair, replay-ready and apply nothing fires again.
It must never leave a cluster running (the harness stops it by PID).
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import CaptureFailure, TRELLARA_BIN, run_scenarios, wait_for  # noqa: E402
from flow_pair import FlowPair, run_trellara  # noqa: E402

EXIT_NONE, EXIT_CRITICAL, EXIT_WARNING = 0, 3, 4
ALERTS = ["quarantine_present", "applier_not_running", "target_unreachable", "relay_error", "log_consumer_lost",
          "lag_records", "lag_bytes", "log_retention_bytes"]
SCHEMA = "CREATE TABLE orders (id bigint PRIMARY KEY, note text); CREATE TABLE items (id bigint PRIMARY KEY, qty int); "


class StatusPair(FlowPair):
    """Source and target with orders and items, flow app over both, and rows the log holds."""

    def __init__(self, name):
        super().__init__(name, source_sql=SCHEMA, tables=("orders", "items"))

    def ready(self):
        self.source.query("INSERT INTO orders VALUES (1, 'a'), (2, 'b'); INSERT INTO items VALUES (1, 3)")
        self.wait_log_covers_source()


def status(config, *args, expect=0):
    return run_trellara(["status", "--config", config, *args], expect=expect, timeout_s=120,
                        what=f"trellara status --config {config} {' '.join(args)}")


def status_json(config, *args, expect=0):
    out = status(config, *args, "--format", "json", expect=expect).stdout
    try:
        return json.loads(out)
    except json.JSONDecodeError as error:
        raise CaptureFailure(f"status {args} --format json printed no JSON ({error}): {out[-3000:]}")


def all_views(config, alerts_exit, alert_args=()):
    """Every view in JSON and text; alerts must exit `alerts_exit`, the others 0."""
    views = {}
    for view in ("dashboard", "diagnostics", "report"):
        views[view] = status_json(config, "--view", view)
        views[view + "_text"] = status(config, "--view", view).stdout
    views["alerts"] = status_json(config, "--view", "alerts", *alert_args, expect=alerts_exit)
    text = status(config, "--view", "alerts", *alert_args, expect=alerts_exit)
    views["alerts_text"] = text.stdout
    if alerts_exit != EXIT_NONE and "alert(s) firing" not in text.stderr:
        raise CaptureFailure(f"alerts exited {alerts_exit} without naming the firing alerts on stderr: {text.stderr}")
    names = [a["name"] for a in views["alerts"]["alerts"]]
    if names != ALERTS or views["alerts"]["exit_code"] != alerts_exit:
        raise CaptureFailure(f"alerts must list {ALERTS} and exit_code {alerts_exit}: {views['alerts']}")
    for a in views["alerts"]["alerts"]:
        if a["severity"] not in ("critical", "warning") or not a["why"] or not a["next_action"]:
            raise CaptureFailure(f"alert without severity/why/next_action: {a}")
    for view in ("dashboard", "diagnostics", "report"):
        if not views[view]["next_action"] or "next action:" not in views[view + "_text"]:
            raise CaptureFailure(f"the {view} view must name the next action: {views[view]}")
    return views


def lsn(text):
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def firing(views):
    return [(a["name"], a["severity"]) for a in views["alerts"]["alerts"] if a["firing"]]


def alert(views, name):
    return next(a for a in views["alerts"]["alerts"] if a["name"] == name)


def views_on_a_healthy_caught_up_flow(pair):
    target, config = pair.target, pair.config
    pair.apply()
    applier = subprocess.Popen([TRELLARA_BIN, "apply", "--config", config], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    try:
        def caught_up():
            if applier.poll() is not None:
                raise CaptureFailure(f"the applier exited {applier.returncode}: {applier.stderr.read()[-1500:]}")
            s = status_json(config)
            return s["applier_running"] and s["state"] == "caught_up"
        wait_for("the daemon applier to run caught up", caught_up, 60)
        views = all_views(config, EXIT_NONE)
        default = status_json(config)
        dash = views["dashboard"]
        if list(default.keys()) != list(dash.keys()) or dash["state"] not in ("caught_up", "running") \
                or not dash["applier_running"]:
            raise CaptureFailure(f"--view dashboard must be the default status:\n{default}\n{dash}")
        if status(config).stdout.splitlines()[0] != views["dashboard_text"].splitlines()[0]:
            raise CaptureFailure("the default text view is not the dashboard")

        diag = views["diagnostics"]
        backend = target.query("SELECT pid || '|' || application_name FROM pg_stat_activity "
                               "WHERE application_name = 'trellara/app' ORDER BY pid")
        holders = [f"{h['pid']}|{h['application_name']}" for h in diag["target"]["lock_holders"]]
        if len(holders) != 1 or holders[0] not in backend.splitlines():
            raise CaptureFailure(f"the lock holder must be the applier's session {backend!r}: {holders}")
        dedup = int(target.query("SELECT count(*) FROM trellara.applied_transactions WHERE flow = 'app'"))
        if diag["target"]["dedup_rows"] != dedup or dedup < 1:
            raise CaptureFailure(f"dedup_rows {diag['target']['dedup_rows']} != {dedup} rows on the target")
        # Read after the applied commit LSN (an idle applier may still move it past a progress marker).
        if not diag["target"]["origin"]["remote_lsn"] or not diag["target"]["applied_commit_lsn"] \
                or lsn(diag["target"]["origin"]["remote_lsn"]) < lsn(diag["target"]["applied_commit_lsn"]):
            raise CaptureFailure(f"origin progress must be the applied commit LSN: {diag['target']}")
        log = diag["log"]
        consumers = {c["name"]: c for c in log["consumers"]}
        if log["segments"] < 1 or log["bytes"] <= 0 or log["first_offset"] is None or "applier" not in consumers \
                or consumers["applier"]["next_offset"] < 1 or consumers["applier"]["lost"]:
            raise CaptureFailure(f"log diagnostics: {log}")
        src = diag["source"]
        if not src["reachable"] or src["relay"]["state"] not in ("streaming", "running") \
                or src["relay"]["publication"] != "pub" or not src["relay_metrics"]:
            raise CaptureFailure(f"the relay must be read from the source: {src}")
        for part in ("lock holder:         pid", "application_name trellara/app", "dedup rows:          " + str(dedup), "last applier session: ",
                     "consumer:            applier at offset", "relay:               "):
            if part not in views["diagnostics_text"]:
                raise CaptureFailure(f"diagnostics text lacks {part!r}:\n{views['diagnostics_text']}")

        if firing(views) or views["alerts"]["status"] != "ok" or "alerts of flow app: ok" not in views["alerts_text"]:
            raise CaptureFailure(f"a healthy flow fires no alert: {firing(views)}\n{views['alerts_text']}")
        if alert(views, "relay_error")["value"] not in ("streaming", "running"):
            raise CaptureFailure(f"relay_error must carry the relay's state: {alert(views, 'relay_error')}")
        pressure = status_json(config, "--view", "alerts", "--alert-log-retention-bytes", "1", expect=EXIT_WARNING)
        got = [(a["name"], a["severity"], a["threshold"]) for a in pressure["alerts"] if a["firing"]]
        if got != [("log_retention_bytes", "warning", 1)] or pressure["status"] != "warning":
            raise CaptureFailure(f"a 1-byte retention threshold fires exactly log_retention_bytes: {pressure}")

        report = views["report"]
        if report["publication_tables"] != ["public.items", "public.orders"] or report["source"]["publication"] != "pub" \
                or report["quarantined"] != 0 or report["applied_transactions"] != dedup \
                or report["verify_hint"] != f"trellara verify --config {config}":
            raise CaptureFailure(f"report: {report}")
        if "published table:     public.items" not in views["report_text"]:
            raise CaptureFailure(f"report text:\n{views['report_text']}")
        print(views["diagnostics_text"])
        print(views["report_text"])
    finally:
        if applier.poll() is None:
            applier.terminate()
        applier.communicate(timeout=60)


def views_with_the_applier_stopped_and_records_pending(pair):
    source, config = pair.source, pair.config
    source.query("INSERT INTO orders VALUES (10, 'pending'), (11, 'pending')")
    pair.wait_log_covers_source()
    views = all_views(config, EXIT_CRITICAL)
    if firing(views) != [("applier_not_running", "critical")] or views["alerts"]["status"] != "critical":
        raise CaptureFailure(f"exactly applier_not_running must fire: {views['alerts']}")
    a = alert(views, "applier_not_running")
    if a["value"] < 1 \
            or a["next_action"] != f"run trellara apply --config {config} (or start its service)":
        raise CaptureFailure(f"applier_not_running: {a}")
    if "FIRING  critical  applier_not_running" not in views["alerts_text"]:
        raise CaptureFailure(f"alerts text:\n{views['alerts_text']}")
    if views["dashboard"]["state"] != "stopped" or views["diagnostics"]["target"]["lock_holders"] \
            or views["diagnostics"]["target"]["applier_running"] or views["report"]["lag_records"] < 1:
        raise CaptureFailure(f"stopped: {views['dashboard']}\n{views['diagnostics']['target']}")

    # The source unreachable is a fact of the report, not a failure of the command.
    dead = pair.write_config(path=os.path.join(pair.work.name, "dead-source.toml"), with_source=False,
                             extra=f'[source]\nconninfo = "host={source.socket_dir} port=1 dbname=postgres"')
    views = all_views(dead, EXIT_CRITICAL)
    src = views["diagnostics"]["source"]
    relay = alert(views, "relay_error")
    if src["reachable"] or "port=1" not in (src["error"] or "") or relay["firing"] or relay["value"] != "unknown" \
            or "port=1" not in relay["why"] or "not read:" not in views["diagnostics_text"]:
        raise CaptureFailure(f"an unreachable source must be reported as a fact: {src}\n{relay}")
    if views["report"]["publication_tables"] is not None or not views["report"]["publication_tables_error"]:
        raise CaptureFailure(f"report without the source: {views['report']}")
    pair.apply()
    views = all_views(dead, EXIT_NONE)
    print(views["alerts_text"])


def views_with_a_quarantined_transaction(pair):
    source, target, config = pair.source, pair.target, pair.config
    pair.apply()
    # The target lost a row a later source UPDATE needs: apply quarantines that transaction (exit 3).
    target.query("DELETE FROM items WHERE id = 1")
    source.query("UPDATE items SET qty = 4 WHERE id = 1")
    pair.wait_log_covers_source()
    pair.apply(expect=3)
    xid, commit_lsn = target.query("SELECT xid, commit_lsn FROM trellara.quarantine WHERE flow = 'app'").split("|")
    views = all_views(config, EXIT_CRITICAL)
    names = [name for name, _ in firing(views)]
    q = alert(views, "quarantine_present")
    if "quarantine_present" not in names or q["severity"] != "critical" or q["value"] != 1 \
            or f"xid {xid}" not in q["why"] or f"--xid {xid} --commit-lsn {commit_lsn}" not in q["next_action"]:
        raise CaptureFailure(f"quarantine_present must fire with the replay-ready command: {views['alerts']}")
    if views["dashboard"]["state"] != "blocked" or views["report"]["quarantined"] != 1:
        raise CaptureFailure(f"blocked: {views['dashboard']}\n{views['report']}")
    rows = views["diagnostics"]["target"]["quarantine"]
    if [(r["xid"], r["commit_lsn"], r["state"], r["reason"]) for r in rows] != \
            [(xid, commit_lsn, "quarantined", "zero_rows_matched")]:
        raise CaptureFailure(f"diagnostics must list the quarantined transaction: {rows}")
    if f"quarantine:          xid {xid}" not in views["diagnostics_text"]:
        raise CaptureFailure(f"diagnostics text:\n{views['diagnostics_text']}")
    print(views["alerts_text"])
    # Repaired, released and applied: nothing fires any more; the report counts it resolved.
    target.query("INSERT INTO items VALUES (1, 3)")
    run_trellara(["quarantine", "replay-ready", "--config", config, "--xid", xid, "--commit-lsn", commit_lsn],
                 timeout_s=60)
    pair.apply()
    views = all_views(config, EXIT_NONE)
    if views["report"]["quarantined"] != 0 or views["report"]["resolved"] != 1:
        raise CaptureFailure(f"after the replay: {views['report']}")


if __name__ == "__main__":
    with StatusPair("status") as flow_pair:
        run_scenarios([views_on_a_healthy_caught_up_flow,
                       views_with_the_applier_stopped_and_records_pending,
                       views_with_a_quarantined_transaction], flow_pair)
