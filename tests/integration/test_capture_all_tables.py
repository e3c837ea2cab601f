#!/usr/bin/env python3
"""Integration: a flow on a publication FOR ALL TABLES, end to end through `trellara apply`, never
captures Trellara's own relations (schema trellara).

A relay that captured them would capture the first transaction of such a flow (create_flow's own
INSERT into trellara.flows), and the applier would quarantine it: "table trellara.flows does not
exist on the target".
Source: the extension, user tables in two schemas, `CREATE PUBLICATION pub FOR ALL TABLES`, a flow.
The workload mixes user writes with writes to Trellara's own relations as an operator makes them:
a second flow created and dropped (trellara.flows rows), stop_flow/start_flow (trellara.flows
updates), one transaction writing a user table and trellara.flows together, and a table in schema
trellara standing in for the applier's state on a server that is also a target. Then:
  - no record of the log names a relation of schema trellara, and the user transactions are all
    there (the mixed transaction included);
  - `trellara apply --until-caught-up` on a target without the extension exits 0, quarantines
    nothing, and every user table matches the source (count + order-independent md5);
  - `trellara verify` passes and does not list a relation of schema trellara.
It must never leave a cluster running (the harness stops them by PID).
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import TRELLARA_BIN, CaptureFailure, log_records, verify_with_applier, wait_for  # noqa: E402
from flow_pair import FlowPair  # noqa: E402

USER_DDL = """
CREATE SCHEMA shop;
CREATE TABLE shop.items (id int PRIMARY KEY, name text NOT NULL, qty int NOT NULL);
CREATE TABLE public.notes (id bigint PRIMARY KEY, body text);
"""
USER_TABLES = ("shop.items", "public.notes")
# The source alone: the extension first, then (after the user tables) a table in schema trellara
# standing in for the applier's state on a server that is also a target.
SOURCE_SQL = ("CREATE EXTENSION trellara;\n" + USER_DDL +
              "CREATE TABLE trellara.applied_transactions (flow text, commit_lsn pg_lsn, PRIMARY KEY (flow, commit_lsn));\n")


def names_own_relation(node):
    """Whether a rendered record names a relation of schema trellara anywhere (relation metadata,
    a change's relation, a TRUNCATE's relations, per-table counts)."""
    if isinstance(node, dict):
        if node.get("schema") == "trellara":
            return True
        for key, value in node.items():
            if key in ("relation", "relations") and isinstance(value, str) and value.startswith("trellara."):
                return True
            if key == "relations" and isinstance(value, list) and any(
                    isinstance(v, str) and v.startswith("trellara.") for v in value):
                return True
            if names_own_relation(value):
                return True
    elif isinstance(node, list):
        return any(names_own_relation(v) for v in node)
    return False


def render(log_dir, offset):
    """One log record in full (relations, changes), as `trellara inspect-transaction` renders it."""
    result = subprocess.run([TRELLARA_BIN, "inspect-transaction", "--dir", log_dir, "--offset", str(offset),
                             "--format", "json"], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise CaptureFailure(f"inspect-transaction of offset {offset} failed: {result.stderr.strip()}")
    return json.loads(result.stdout)


def wait_running(source, flow="app"):
    wait_for(f"flow {flow} to run", lambda: source.query(
        f"SELECT state FROM trellara.status() WHERE flow = '{flow}'") == "running", 60)


def all_tables_flow_never_captures_trellara_relations():
    # FOR ALL TABLES (no tables named); the target gets the user tables only, without the extension.
    with FlowPair("all-tables", source_sql=SOURCE_SQL, target_sql=USER_DDL, shared_work_dir=True) as pair:
        source, target, log_dir = pair.source, pair.target, pair.log_dir
        wait_running(source)

        source.psql("INSERT INTO shop.items SELECT g, 'item ' || g, g FROM generate_series(1, 50) g")
        source.query("SELECT trellara.create_flow('other', 'pub')")
        source.psql("INSERT INTO public.notes SELECT g, 'note ' || g FROM generate_series(1, 20) g")
        source.psql("BEGIN; UPDATE shop.items SET qty = qty + 1 WHERE id <= 10; "
                    "UPDATE trellara.flows SET enabled = true WHERE name = 'app'; "
                    "INSERT INTO trellara.applied_transactions VALUES ('x', '0/1'); COMMIT")
        source.query("SELECT trellara.drop_flow('other', true)")
        source.query("SELECT trellara.stop_flow('app')")
        source.psql("DELETE FROM shop.items WHERE id > 45")
        source.query("SELECT trellara.start_flow('app')")
        wait_running(source)
        source.psql("UPDATE public.notes SET body = body || ' (edited)' WHERE id % 2 = 0")
        pair.wait_log_covers_source(timeout_s=60)

        records = [render(log_dir, r["offset"]) for r in log_records(log_dir)
                   if r["type"] in ("envelope", "chunk", "manifest")]
        own = [r for r in records if names_own_relation(r)]
        if own:
            raise CaptureFailure(f"the log holds {len(own)} records naming a relation of schema trellara: "
                                 f"{json.dumps(own[:2])[:1500]}")
        touched = sorted({c.get("relation") for r in records for c in r.get("changes", []) if c.get("relation")})
        print(f"log: {len(records)} records; relations changed: {touched}")
        if touched != ["public.notes", "shop.items"]:
            raise CaptureFailure(f"the log's changes touch {touched}, expected exactly public.notes and shop.items")

        pair.apply(timeout_s=180)   # exit 0 on a FOR ALL TABLES flow
        quarantined = target.query("SELECT count(*) FROM trellara.quarantine")
        applied = int(target.query("SELECT count(*) FROM trellara.applied_transactions"))
        if quarantined != "0":
            raise CaptureFailure(f"{quarantined} transactions quarantined: "
                                 f"{target.query('SELECT reason FROM trellara.quarantine')}")
        if applied < 5:
            raise CaptureFailure(f"only {applied} transactions applied; the user workload has at least 5")
        pair.assert_same_data(USER_TABLES, "after apply")
        if target.query("SELECT count(*) FROM pg_tables WHERE schemaname = 'trellara' AND tablename = 'flows'") != "0":
            raise CaptureFailure("the target has a trellara.flows table: the source catalog was replicated")

        verify = verify_with_applier(pair.config, timeout_s=120)
        print(f"verify: exit {verify.returncode}: {verify.stdout.strip()[-600:]}")
        if verify.returncode != 0 or "trellara." in verify.stdout:
            raise CaptureFailure(f"verify exited {verify.returncode} or listed a trellara relation: "
                                 f"{verify.stdout[-1500:]}\n{verify.stderr[-1500:]}")
        pair.check_no_crashes()
    print("ok: all_tables_flow_never_captures_trellara_relations")


def main():
    all_tables_flow_never_captures_trellara_relations()


if __name__ == "__main__":
    main()
