#!/usr/bin/env python3
"""Integration: `trellara check --config F [--format text|json]`, the preflight of one flow,
against a real source and target cluster.

Source: four tables (orders, items, notes, ghosts) in publication pub, flow app. Target: the same
four tables. Scenarios (one cluster pair, in this order):
  - check_healthy_flow_exits_0: with the superuser as the target role, exit 0 before and after a
    first `trellara apply`; the JSON parses, the source findings are exactly the rows of
    trellara.check('app'), every target finding is ok and names every published table;
  - check_reports_an_unresolved_quarantine_as_critical: a transaction apply quarantined is a
    critical finding whose remedy is its recorded next step; once repaired and marked
    replay-ready it is a warning, and after the next apply nothing is reported;
  - check_reports_target_triggers_missing_tables_and_privileges_and_exits_2: as a non-superuser
    target role, with an ENABLE ALWAYS trigger on orders, an ordinary trigger on items, ghosts
    dropped, items without its primary key and its published column qty, and notes only readable:
    items lacking qty is critical (target_table_columns); the trigger on orders (not
    the one on items) and the keyless items are warnings,
    ghosts and notes are critical, so are the origin, session_replication_role and state-schema
    privileges, exit 2; with session_replication_role = "origin" the trigger on items is reported too;
  - check_source_unreachable_or_absent: a source conninfo naming a dead port gives a critical
    finding naming host and port, never the password, exit 2; a configuration without [source]
    says the source checks were not run (a warning, not silence) and the target is still checked;
  - check_reports_an_inactive_slot_and_its_wal_cleanup_posture (seed
    source_slot_abandoned_idle_timeout, PG15 form): with the flow stopped, the inactive slot is a
    warning naming the WAL it retains, and the WAL-cleanup posture is explicit — max_slot_wal_keep_size
    unlimited is a warning ("a stalled flow can fill the disk"), a configured limit is reported with
    its size; the paired defect (negative_control_check_passing_an_abandoned_slot_is_caught) installs a
    mutated trellara.check() that calls the inactive slot ok and the posture silent, and the same checks
    must fail;
  - check_reports_a_published_table_without_replica_identity_as_critical (seed
    missing_replica_identity): a keyless table added to the publication is a critical
    replica_identity finding naming it, exit 2; with REPLICA IDENTITY FULL it is no longer critical.
It must never leave a cluster running (the harness stops it by PID).
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import CaptureFailure, run_scenarios, scenario, wait_for  # noqa: E402
from flow_pair import FlowPair, run_trellara  # noqa: E402

EXIT_OK = 0
EXIT_CRITICAL = 2
TABLES = ("public.ghosts", "public.items", "public.notes", "public.orders")
SCHEMA = ("CREATE TABLE orders (id bigint PRIMARY KEY, note text); "
          "CREATE TABLE items (id bigint PRIMARY KEY, qty int); "
          "CREATE TABLE notes (id bigint PRIMARY KEY, body text); "
          "CREATE TABLE ghosts (id bigint PRIMARY KEY); ")


class CheckPair(FlowPair):
    """Source and target with the four tables, flow app over them, and its first rows in the log."""

    def __init__(self, name):
        super().__init__(name, source_sql=SCHEMA, tables=("orders", "items", "notes", "ghosts"))

    def ready(self):
        self.source.query("INSERT INTO orders VALUES (1, 'a'), (2, 'b'); INSERT INTO items VALUES (1, 3)")
        wait_for("the log to hold the first transactions",
                 lambda: self.source.query("SELECT log_durable_lsn IS NOT NULL FROM trellara.status() "
                                           "WHERE flow = 'app'") == "t", 60)


def check(config, *args, expect):
    return run_trellara(["check", "--config", config, *args], expect=expect, timeout_s=120,
                        what=f"trellara check --config {config} {' '.join(args)}")


def check_json(config, expect):
    out = check(config, "--format", "json", expect=expect).stdout
    try:
        return json.loads(out)
    except json.JSONDecodeError as error:
        raise CaptureFailure(f"check --format json printed no JSON ({error}): {out[-3000:]}")


def findings(report, side, check_name=None, severity=None):
    return [f for f in report[side]["findings"]
            if (check_name is None or f["check"] == check_name) and (severity is None or f["severity"] == severity)]


def check_healthy_flow_exits_0(pair):
    source, config = pair.source, pair.config
    for when in ("before the first apply", "after the first apply"):
        report = check_json(config, EXIT_OK)
        rows = source.query("SELECT severity || '|' || \"check\" || '|' || subject FROM trellara.check('app')")
        expected = rows.splitlines()
        got = [f"{f['severity']}|{f['check']}|{f['subject']}" for f in report["source"]["findings"]]
        if report["flow"] != "app" or not report["source"]["reachable"] or got != expected or not expected:
            raise CaptureFailure(f"{when}: source findings are not trellara.check('app') unchanged:\n{got}\n{expected}")
        if any(f["severity"] == "critical" for f in report["source"]["findings"]) or report["status"] == "critical":
            raise CaptureFailure(f"{when}: a healthy flow has a critical finding: {report}")
        bad = [f for f in report["target"]["findings"] if f["severity"] != "ok"]
        tables = sorted(f["subject"] for f in findings(report, "target", "target_table"))
        if not report["target"]["reachable"] or bad or tables != list(TABLES):
            raise CaptureFailure(f"{when}: target findings are not all ok for {TABLES}: {report['target']}")
        checks = {f["check"] for f in report["target"]["findings"]}
        for name in ("target_reachable", "replication_origin", "session_replication_role", "target_state_schema"):
            if name not in checks:
                raise CaptureFailure(f"{when}: target check {name} missing: {report['target']}")
        print(f"{when}: status {report['status']}, {len(got)} source rows, target checks {sorted(checks)}")
        if when.startswith("before"):
            origin = findings(report, "target", "replication_origin")[0]
            if "can create it" not in origin["detail"]:
                raise CaptureFailure(f"before any apply the origin must be reported as creatable: {origin}")
            pair.apply()
    origin = findings(report, "target", "replication_origin")[0]
    quarantine = findings(report, "target", "quarantine", "ok")
    if "exists" not in origin["detail"] or not quarantine:
        raise CaptureFailure(f"after apply: origin {origin}, quarantine {quarantine}")
    text = check(config, expect=EXIT_OK).stdout
    lines = text.splitlines()
    first_target = next(i for i, line in enumerate(lines) if line.startswith("target  "))
    if not lines[-1].startswith("check flow app: source checked, target checked;") \
            or any(line.startswith("source  ") for line in lines[first_target:]) \
            or "target  ok        target_table  public.orders: exists" not in text:
        raise CaptureFailure(f"text output is not grouped source, target, summary: {text}")
    print(text)


def check_reports_an_unresolved_quarantine_as_critical(pair):
    source, target, config = pair.source, pair.target, pair.config
    pair.apply()
    # The target lost a row a later source UPDATE needs: apply quarantines that transaction (exit 3).
    target.query("DELETE FROM items WHERE id = 1")
    source.query("UPDATE items SET qty = 4 WHERE id = 1")
    pair.wait_log_covers_source()
    pair.apply(expect=3)
    xid, commit_lsn, next_step = target.query(
        "SELECT xid, commit_lsn, next_step FROM trellara.quarantine WHERE flow = 'app'").split("|")
    report = check_json(config, EXIT_CRITICAL)
    found = findings(report, "target", "quarantine")
    if [(f["severity"], f["subject"], f["remedy"]) for f in found] != \
            [("critical", f"transaction {xid} (commit {commit_lsn})", next_step)]:
        raise CaptureFailure(f"the quarantined transaction must be critical with its next step {next_step!r}: {found}")
    print(f"quarantined: {found[0]['detail']}; next: {found[0]['remedy']}")
    # Repaired and released: a warning (the next apply replays it), then nothing once applied.
    target.query("INSERT INTO items VALUES (1, 3)")
    run_trellara(["quarantine", "replay-ready", "--config", config, "--xid", xid, "--commit-lsn", commit_lsn],
                 timeout_s=60)
    found = findings(check_json(config, EXIT_OK), "target", "quarantine")
    if [f["severity"] for f in found] != ["warning"] or "replay_ready" not in found[0]["detail"]:
        raise CaptureFailure(f"a replay-ready transaction is a warning: {found}")
    pair.apply()
    found = findings(check_json(config, EXIT_OK), "target", "quarantine")
    if [f["severity"] for f in found] != ["ok"]:
        raise CaptureFailure(f"after the replay nothing is quarantined: {found}")


def check_reports_target_triggers_missing_tables_and_privileges_and_exits_2(pair):
    target = pair.target
    target.query(
        "CREATE ROLE check_role LOGIN; "
        "GRANT SELECT, INSERT, UPDATE, DELETE ON orders, items TO check_role; GRANT SELECT ON notes TO check_role; "
        "DROP TABLE ghosts; ALTER TABLE items DROP CONSTRAINT items_pkey; ALTER TABLE items DROP COLUMN qty; "
        "CREATE FUNCTION count_row() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$; "
        "CREATE TRIGGER orders_audit AFTER INSERT OR UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION count_row(); "
        "ALTER TABLE orders ENABLE ALWAYS TRIGGER orders_audit; "
        "CREATE TRIGGER items_local AFTER DELETE ON items FOR EACH ROW EXECUTE FUNCTION count_row()")
    role_conninfo = f"host={target.socket_dir} port={target.port} user=check_role dbname=postgres"
    config = pair.write_config(path=os.path.join(pair.work.name, "problems.toml"), target_conninfo=role_conninfo)
    state_sql = ("SELECT (SELECT count(*) FROM pg_replication_origin) || '|' || "
                 "(SELECT count(*) FROM pg_namespace WHERE nspname = 'trellara') || '|' || "
                 "(SELECT count(*) FROM pg_class WHERE relname = 'ghosts')")
    before = target.query(state_sql)
    report = check_json(config, EXIT_CRITICAL)
    if report["status"] != "critical" or not report["target"]["reachable"]:
        raise CaptureFailure(f"status must be critical with a reachable target: {report}")

    fires = findings(report, "target", "target_trigger_fires")
    if [(f["severity"], f["subject"]) for f in fires] != [("warning", "public.orders trigger orders_audit")] \
            or "ENABLE ALWAYS" not in fires[0]["detail"] or "DISABLE TRIGGER \"orders_audit\"" not in fires[0]["remedy"]:
        raise CaptureFailure(f"under replica exactly the ENABLE ALWAYS trigger on orders must be a warning: {fires}")
    missing = findings(report, "target", "target_table", "critical")
    if [f["subject"] for f in missing] != ["public.ghosts"] or "does not exist" not in missing[0]["detail"]:
        raise CaptureFailure(f"the dropped table ghosts must be critical: {missing}")
    columns = findings(report, "target", "target_table_columns", "critical")
    if [f["subject"] for f in columns] != ["public.items"] or "qty" not in columns[0]["detail"]:
        raise CaptureFailure(f"items without its published column qty must be critical: {columns}")
    privileges = findings(report, "target", "target_table_privileges", "critical")
    if [f["subject"] for f in privileges] != ["public.notes"] \
            or "INSERT, UPDATE, DELETE" not in privileges[0]["detail"] or "check_role" not in privileges[0]["remedy"]:
        raise CaptureFailure(f"notes (SELECT only) must be critical, naming what is missing: {privileges}")
    writable = sorted(f["subject"] for f in findings(report, "target", "target_table", "ok"))
    if writable != ["public.items", "public.orders"]:
        raise CaptureFailure(f"orders and items are writable by check_role: {writable}")
    keyless = findings(report, "target", "target_table_key")
    if [(f["severity"], f["subject"]) for f in keyless] != [("warning", "public.items")]:
        raise CaptureFailure(f"items without a primary key on the target must be a warning: {keyless}")
    for name in ("replication_origin", "session_replication_role", "target_state_schema"):
        found = findings(report, "target", name, "critical")
        if not found or not found[0]["remedy"]:
            raise CaptureFailure(f"{name} must be critical with a remedy for a non-superuser: {report['target']}")
    if "GRANT SET ON PARAMETER session_replication_role TO check_role" not in \
            findings(report, "target", "session_replication_role")[0]["remedy"]:
        raise CaptureFailure(f"session_replication_role remedy: {findings(report, 'target', 'session_replication_role')}")
    # Read-only: nothing of the checks was created on the target.
    if target.query(state_sql) != before:
        raise CaptureFailure(f"check changed the target: origins|schema|ghosts {before} -> {target.query(state_sql)}")
    text = check(config, expect=EXIT_CRITICAL)
    if "target  critical  target_table  public.ghosts:" not in text.stdout \
            or "target  warning   target_trigger_fires  public.orders trigger orders_audit:" not in text.stdout \
            or "critical: critical" not in text.stdout.splitlines()[-1] or "critical" not in text.stderr:
        raise CaptureFailure(f"text form: {text.stdout}\n{text.stderr}")

    origin = pair.write_config(path=os.path.join(pair.work.name, "origin.toml"), target_conninfo=role_conninfo,
                               apply_settings={"session_replication_role": "origin"})
    fires = findings(check_json(origin, EXIT_CRITICAL), "target", "target_trigger_fires")
    if sorted(f["subject"] for f in fires) != ["public.items trigger items_local", "public.orders trigger orders_audit"]:
        raise CaptureFailure(f"under origin both enabled triggers fire: {fires}")
    print(f"problems reported: {[(f['severity'], f['check'], f['subject']) for f in report['target']['findings']]}")


def check_source_unreachable_or_absent(pair):
    dead_dir = os.path.join(pair.work.name, "no-server-here")
    os.makedirs(dead_dir, exist_ok=True)
    secret = "s3cret-never-printed"
    dead = f"host={dead_dir} port=1 user=postgres password={secret} dbname=postgres"
    config = pair.write_config(path=os.path.join(pair.work.name, "unreachable.toml"), with_source=False,
                               extra=f'[source]\nconninfo = "{dead}"')
    result = check(config, "--format", "json", expect=EXIT_CRITICAL)
    report = json.loads(result.stdout)
    found = findings(report, "source", "source_reachable", "critical")
    if report["source"]["reachable"] or len(found) != 1 or f"host={dead_dir}" not in found[0]["subject"] \
            or "port=1" not in found[0]["subject"] or report["status"] != "critical":
        raise CaptureFailure(f"an unreachable source must be one critical finding naming host and port: {report}")
    text = check(config, expect=EXIT_CRITICAL)
    if secret in result.stdout or secret in result.stderr or secret in text.stdout or secret in text.stderr:
        raise CaptureFailure("the source password appears in check's output")
    line = next((x for x in text.stdout.splitlines() if x.startswith("source  critical  source_reachable  host=")), "")
    if "port=1" not in line or "Is the server running" not in line:
        raise CaptureFailure(f"text form: the unreachable source is not one line naming the port: {text.stdout}")
    if not report["target"]["reachable"] or not findings(report, "target", "target_tables", "warning"):
        raise CaptureFailure(f"the target is checked and says its tables were not: {report['target']}")
    print(f"unreachable source: {found[0]['subject']}: {found[0]['detail']}")

    absent = pair.write_config(path=os.path.join(pair.work.name, "absent.toml"), with_source=False)
    report = check_json(absent, EXIT_OK)
    said = findings(report, "source", "source_configured", "warning")
    if not said or "not run" not in said[0]["detail"] or report["source"]["reachable"] or report["status"] != "warning":
        raise CaptureFailure(f"a configuration without [source] must say the source checks were not run: {report}")
    print(f"no [source]: {said[0]['detail']}")


def set_slot_wal_keep(source, value):
    source.query(f"ALTER SYSTEM SET max_slot_wal_keep_size = '{value}'")
    source.query("SELECT pg_reload_conf()")
    wait_for(f"max_slot_wal_keep_size to be {value}",
             lambda: source.query("SELECT current_setting('max_slot_wal_keep_size')") == value, 30)


def source_report(config):
    """`trellara check --format json` for its source side: the target of this cluster pair carries
    the earlier scenarios' critical leftovers, so the exit status (2) and overall status say nothing
    about the source here."""
    result = run_trellara(["check", "--config", config, "--format", "json"], expect=None, timeout_s=120)
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError as error:
        raise CaptureFailure(f"check --format json printed no JSON ({error}), exit {result.returncode}: "
                             f"{result.stdout[-3000:]} {result.stderr[-2000:]}")
    if not report["source"]["reachable"]:
        raise CaptureFailure(f"the source was not checked: {report['source']}")
    return report


def abandoned_slot_checks(source, config):
    """The checks of an abandoned slot (the flow stopped, its slot inactive): raise CaptureFailure
    when trellara check does not degrade the flow and state the WAL-cleanup posture."""
    slot = source.query("SELECT slot_name FROM trellara.flows WHERE name = 'app'")
    set_slot_wal_keep(source, "-1")
    report = source_report(config)
    inactive = [f for f in findings(report, "source", "slot", "warning") if f["subject"] == slot]
    if len(inactive) != 1 or "inactive" not in inactive[0]["detail"] or "retains WAL from" not in inactive[0]["detail"] \
            or "start_flow" not in (inactive[0]["remedy"] or ""):
        raise CaptureFailure(f"a stopped flow's inactive slot {slot} must be a warning naming the WAL it retains "
                             f"and the next step: {findings(report, 'source', 'slot')}")
    critical = findings(report, "source", severity="critical")
    if critical:
        raise CaptureFailure(f"a flow stopped on purpose is a warning, not critical: {critical}")
    unlimited = [f for f in findings(report, "source", "wal_retention", "warning") if f["subject"] == slot]
    if len(unlimited) != 1 or "unlimited" not in unlimited[0]["detail"]:
        raise CaptureFailure(f"with max_slot_wal_keep_size = -1 (no cleanup) the posture must be a warning "
                             f"saying so: {findings(report, 'source', 'wal_retention')}")
    print(f"stopped flow: {inactive[0]['detail']}; {unlimited[0]['detail']}")
    set_slot_wal_keep(source, "1GB")
    report = source_report(config)
    limited = [f for f in findings(report, "source", "wal_retention") if f["subject"] == slot]
    if len(limited) != 1 or "limit 1024 MB" not in limited[0]["detail"]:
        raise CaptureFailure(f"with max_slot_wal_keep_size = 1GB the posture must name the limit: {limited}")
    print(f"configured cleanup: {limited[0]['severity']}: {limited[0]['detail']}")


def with_flow_stopped(source, body):
    source.query("SELECT trellara.stop_flow('app')")
    try:
        wait_for("the flow's slot to be inactive",
                 lambda: source.query("SELECT NOT active FROM pg_replication_slots s JOIN trellara.flows f "
                                      "ON f.slot_name = s.slot_name WHERE f.name = 'app'") == "t", 60)
        return body()
    finally:
        source.query("ALTER SYSTEM RESET max_slot_wal_keep_size")
        source.query("SELECT pg_reload_conf()")
        source.query("SELECT trellara.start_flow('app')")
        wait_for("the flow's slot to be active again",
                 lambda: source.query("SELECT active FROM pg_replication_slots s JOIN trellara.flows f "
                                      "ON f.slot_name = s.slot_name WHERE f.name = 'app'") == "t", 60)


@scenario(seed_rows=("source_slot_abandoned_idle_timeout",), suite="check",
          invariants=("a stopped flow's inactive slot is a warning that names the WAL it retains and start_flow",
                      "no source finding is critical (the flow was stopped on purpose)",
                      "max_slot_wal_keep_size = -1 (no cleanup) is a warning; a configured limit is named"))
def check_reports_an_inactive_slot_and_its_wal_cleanup_posture(pair):
    source, config = pair.source, pair.config
    with_flow_stopped(source, lambda: abandoned_slot_checks(source, config))


# The defect: trellara.check() as a careless version would have it — an inactive slot of a stopped
# flow reported ok, and the WAL-cleanup posture reported ok whatever max_slot_wal_keep_size says.
# The verdict is PL/pgSQL, which no TRELLARA_FAULTS seam reaches: the scenario installs the mutated
# function (CREATE OR REPLACE keeps it a member of the extension), runs the clean checks, and puts
# the original definition back whatever happens.
CHECK_MUTATIONS = (
    ("RETURN QUERY SELECT 'warning', 'slot', f.slot_name::text,\n        format('flow is stopped;",
     "RETURN QUERY SELECT 'ok', 'slot', f.slot_name::text,\n        format('flow is stopped;"),
    ("RETURN QUERY SELECT 'warning', 'wal_retention', f.slot_name::text,\n        format('max_slot_wal_keep_size is unlimited;",
     "RETURN QUERY SELECT 'ok', 'wal_retention', f.slot_name::text,\n        format('slot retains WAL; keep size"),
)


@scenario(seed_rows=(), suite="check", defect="check_passes_abandoned_slot",
          pairs_with="check_reports_an_inactive_slot_and_its_wal_cleanup_posture",
          invariants=("with trellara.check() mutated to call an inactive slot and unlimited WAL retention ok, "
                      "the abandoned-slot checks fail"))
def negative_control_check_passing_an_abandoned_slot_is_caught(pair):
    source, config = pair.source, pair.config
    original = source.query("SELECT pg_get_functiondef('trellara.check(text)'::regprocedure)")
    mutated = original
    for before, after in CHECK_MUTATIONS:
        if mutated.count(before) != 1:
            raise CaptureFailure(f"harness failure, not a caught defect: trellara.check() no longer contains "
                                 f"{before!r} once; update CHECK_MUTATIONS")
        mutated = mutated.replace(before, after)
    source.query(mutated)
    try:
        caught = None
        try:
            with_flow_stopped(source, lambda: abandoned_slot_checks(source, config))
        except CaptureFailure as failure:
            caught = failure
    finally:
        source.query(original)
    if caught is None:
        raise CaptureFailure("with trellara.check() calling an abandoned slot ok, the abandoned-slot checks still "
                             "passed: they cannot catch that defect")
    print(f"defect caught: {caught}")


@scenario(seed_rows=("missing_replica_identity",), suite="check",
          invariants=("a published table whose UPDATE/DELETE carry no key is a critical source finding naming it",
                      "check exits 2 (critical) while it has none; with REPLICA IDENTITY FULL the finding is not critical"))
def check_reports_a_published_table_without_replica_identity_as_critical(pair):
    source, config = pair.source, pair.config
    # Runs last: the CREATE TABLE is captured as DDL into the log, which no later scenario applies.
    source.query("CREATE TABLE nokey (a int, b text); ALTER PUBLICATION pub ADD TABLE nokey")
    try:
        report = check_json(config, EXIT_CRITICAL)
        found = [f for f in findings(report, "source", "replica_identity", "critical") if f["subject"] == "public.nokey"]
        if len(found) != 1 or "carry no key" not in found[0]["detail"] or report["status"] != "critical":
            raise CaptureFailure(f"a keyless published table must be one critical replica_identity finding: {report}")
        text = check(config, expect=EXIT_CRITICAL).stdout
        if not any(line.startswith("source  critical  replica_identity  public.nokey") for line in text.splitlines()):
            raise CaptureFailure(f"text form does not name the keyless table: {text}")
        print(f"keyless table: {found[0]['subject']}: {found[0]['detail']}")
        source.query("ALTER TABLE nokey REPLICA IDENTITY FULL")
        # The exit status now reflects the other scenarios' leftovers on the target; this finding must
        # no longer be critical.
        rerun = run_trellara(["check", "--config", config, "--format", "json"], expect=None, timeout_s=120)
        report = json.loads(rerun.stdout)
        fixed = [f for f in findings(report, "source", "replica_identity") if f["subject"] == "public.nokey"]
        if len(fixed) != 1 or fixed[0]["severity"] == "critical":
            raise CaptureFailure(f"with REPLICA IDENTITY FULL the table must no longer be critical: {fixed}")
        print(f"after REPLICA IDENTITY FULL: {fixed[0]['severity']}: {fixed[0]['detail']}")
    finally:
        source.query("ALTER PUBLICATION pub DROP TABLE nokey; DROP TABLE nokey")


if __name__ == "__main__":
    with CheckPair("check") as flow_pair:
        run_scenarios([check_healthy_flow_exits_0,
                       check_reports_an_unresolved_quarantine_as_critical,
                       check_reports_target_triggers_missing_tables_and_privileges_and_exits_2,
                       check_source_unreachable_or_absent,
                       check_reports_an_inactive_slot_and_its_wal_cleanup_posture,
                       negative_control_check_passing_an_abandoned_slot_is_caught,
                       check_reports_a_published_table_without_replica_identity_as_critical], flow_pair)
