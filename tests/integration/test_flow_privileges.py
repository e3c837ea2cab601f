#!/usr/bin/env python3
"""Integration: what create_flow and drop_flow let an operator do to the source's file system and
slots (docs/relay.md "What an operator may and may not do", docs/decisions.md "Flow privileges").

1. log_directory_root_admits_non_superusers_only_below_it: with trellara.log_directory_root set in
   postgresql.conf, a non-superuser trellara_admin member may put a flow's log strictly under that
   root (and the relay writes there), but not outside it and $PGDATA/pg_trellara, not in a sibling
   sharing the root's name as a prefix, not through "..", and cannot read or change the setting.
   A superuser may use any absolute path.
2. drop_flow_removes_only_what_trellara_created: drop_flow(name, true) on a log directory that also
   holds an operator's file, a subdirectory, a look-alike name, a symlink to a directory holding a
   real-looking segment, and a symlink in consumers/: the flow's segments, indexes, LOCK and consumer
   files are gone, everything else (and every symlink target) is intact, the directory is kept, and
   the WARNING names what was kept.
3. rolled_back_create_flow_leaves_a_reported_slot: a create_flow whose transaction rolls back leaves
   its slot; check() reports it with the drop command, which works; create_flow in a transaction
   that already wrote is refused with the reason and the hint, and leaves no slot.
It must never leave a cluster running (the harness stops it by PID).
"""

import os
import pwd
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import CaptureFailure, wait_for  # noqa: E402
from flow_pair import FlowPair  # noqa: E402

OPERATOR_SETUP = """
CREATE EXTENSION IF NOT EXISTS trellara;
CREATE TABLE IF NOT EXISTS items (id int PRIMARY KEY, v text);
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_publication WHERE pubname = 'pub') THEN CREATE PUBLICATION pub FOR TABLE items; END IF;
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'flow_operator') THEN
    CREATE ROLE flow_operator LOGIN IN ROLE trellara_admin;
  END IF;
END $$;
GRANT USAGE ON SCHEMA trellara TO flow_operator;
"""


def postgres_owned_dir(prefix):
    path = tempfile.mkdtemp(prefix=prefix)
    pg = pwd.getpwnam("postgres")
    os.chown(path, pg.pw_uid, pg.pw_gid)
    os.chmod(path, 0o700)
    return path


def as_operator(cluster, sql):
    return cluster.psql(f"SET ROLE flow_operator; {sql}", check=False)


def expect_refused(result, sqlstate_text, needles, what):
    if result.returncode == 0:
        raise CaptureFailure(f"{what}: accepted, expected a refusal")
    for needle in [sqlstate_text] + needles:
        if needle not in result.stderr:
            raise CaptureFailure(f"{what}: the error does not say {needle!r}: {result.stderr.strip()}")


def log_directory_root_admits_non_superusers_only_below_it(root):
    with FlowPair("privileges-root", source_settings={"trellara.log_directory_root": f"'{root}/'"},
                  with_target=False, create_flow=False) as pair:
        cluster = pair.source
        cluster.psql(OPERATOR_SETUP)
        inside = f"{root}/app"
        ok = as_operator(cluster, f"SELECT name FROM trellara.create_flow('app', 'pub', '{inside}')")
        if ok.returncode != 0:
            raise CaptureFailure(f"a flow under trellara.log_directory_root was refused: {ok.stderr}")
        wait_for("the relay to write under the root", lambda: os.path.isdir(inside) and any(
            name.startswith("segment-") for name in os.listdir(inside)), 60)
        for name, path in (("outside", "/tmp/trellara_outside_root"),
                           ("sibling", f"{root}_sibling/app"),
                           ("the root itself", root)):
            expect_refused(as_operator(cluster, f"SELECT trellara.create_flow('x', 'pub', '{path}')"),
                           "only a superuser may choose it", ["trellara.log_directory_root", path],
                           f"non-superuser log directory {name}")
        expect_refused(as_operator(cluster, f"SELECT trellara.create_flow('x', 'pub', '{root}/../escape')"),
                       '".", ".." or empty path component', [], "a path through ..")
        expect_refused(as_operator(cluster, "SHOW trellara.log_directory_root"), "must be superuser",
                       ["trellara.log_directory_root"], "a non-superuser reading the root")
        expect_refused(as_operator(cluster, "SET trellara.log_directory_root = '/'"), "cannot be changed",
                       ["trellara.log_directory_root"], "a non-superuser changing the root")
        if cluster.query("SELECT count(*) FROM trellara.flows WHERE name = 'x'") != "0":
            raise CaptureFailure("a refused create_flow left a flow row")
        if cluster.query("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'trellara_x'") != "0":
            raise CaptureFailure("a refused create_flow left a slot")
        anywhere = postgres_owned_dir("trellara-superuser-dir-")
        try:
            cluster.query(f"SELECT name FROM trellara.create_flow('su', 'pub', '{anywhere}/su')")
            cluster.query("SELECT trellara.drop_flow('su', true)")
        finally:
            shutil.rmtree(anywhere, ignore_errors=True)
        cluster.query("SELECT trellara.drop_flow('app', true)")
        pair.check_no_crashes()
    print("ok: log_directory_root_admits_non_superusers_only_below_it")


def drop_flow_removes_only_what_trellara_created(cluster, elsewhere):
    cluster.psql(OPERATOR_SETUP)
    cluster.query("SELECT name FROM trellara.create_flow('dropme', 'pub')")
    log_dir = cluster.query("SELECT log_directory FROM trellara.flows WHERE name = 'dropme'")
    cluster.query("INSERT INTO items SELECT g, 'v' FROM generate_series(1, 100) g")
    wait_for("the flow's log to hold a record", lambda: cluster.query(
        "SELECT log_durable_offset IS NOT NULL FROM trellara.status() WHERE flow = 'dropme'") == "t", 60)
    os.makedirs(os.path.join(log_dir, "consumers"), exist_ok=True)
    with open(os.path.join(log_dir, "consumers", "applier"), "w") as f:
        f.write("offset file stand-in\n")
    # What an operator or another program left there.
    decoy = os.path.join(elsewhere, "segment-00000000000000000000.log")
    with open(decoy, "w") as f:
        f.write("not ours\n")
    with open(os.path.join(log_dir, "NOTES.txt"), "w") as f:
        f.write("operator notes\n")
    os.makedirs(os.path.join(log_dir, "backup"))
    with open(os.path.join(log_dir, "backup", "segment-00000000000000000000.log"), "w") as f:
        f.write("an operator's copy\n")
    with open(os.path.join(log_dir, "segment-final.log"), "w") as f:
        f.write("look-alike name\n")
    os.symlink(elsewhere, os.path.join(log_dir, "linked"))
    os.symlink(decoy, os.path.join(log_dir, "consumers", "evil"))
    ours_before = sorted(n for n in os.listdir(log_dir) if n.startswith(("segment-0", "index-")) or n == "LOCK")
    result = cluster.psql("SELECT trellara.drop_flow('dropme', true)", check=False)
    print(f"drop_flow: exit {result.returncode}; {result.stderr.strip()[:600]}")
    if result.returncode != 0:
        raise CaptureFailure(f"drop_flow failed: {result.stderr}")
    left = sorted(os.listdir(log_dir))
    print(f"trellara files before: {ours_before}; left in {log_dir}: {left}")
    if not ours_before:
        raise CaptureFailure("the flow wrote no segment: the test proves nothing")
    if left != ["NOTES.txt", "backup", "consumers", "linked", "segment-final.log"]:
        raise CaptureFailure(f"drop_flow left {left}")
    if os.listdir(os.path.join(log_dir, "consumers")) != ["evil"]:
        raise CaptureFailure(f"consumers/ holds {os.listdir(os.path.join(log_dir, 'consumers'))}")
    if not os.path.exists(decoy) or not os.path.exists(os.path.join(log_dir, "backup",
                                                                     "segment-00000000000000000000.log")):
        raise CaptureFailure("drop_flow removed a file outside what trellara created")
    for needle in ("WARNING", "NOTES.txt", "backup", "linked", "segment-final.log", "consumers/evil",
                   "not created by trellara"):
        if needle not in result.stderr:
            raise CaptureFailure(f"the WARNING does not name {needle!r}: {result.stderr}")
    if cluster.query("SELECT count(*) FROM trellara.flows WHERE name = 'dropme'") != "0" or cluster.query(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'trellara_dropme'") != "0":
        raise CaptureFailure("the flow or its slot survived drop_flow")
    print("ok: drop_flow_removes_only_what_trellara_created")


def rolled_back_create_flow_leaves_a_reported_slot(cluster):
    cluster.psql(OPERATOR_SETUP)
    cluster.query("SELECT name FROM trellara.create_flow('keep', 'pub')")
    cluster.psql("BEGIN; SELECT trellara.create_flow('ghost', 'pub'); ROLLBACK;")
    if cluster.query("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'trellara_ghost'") != "1":
        raise CaptureFailure("expected the rolled-back create_flow's slot to remain (slot creation is not "
                             "transactional); if Postgres now drops it, update docs/relay.md")
    row = cluster.query("SELECT severity, remedy FROM trellara.check('keep') WHERE \"check\" = 'orphan_slot'")
    print(f"check(): orphan_slot {row}")
    if not row.startswith("warning|") or "pg_drop_replication_slot('trellara_ghost')" not in row:
        raise CaptureFailure(f"check() does not report the orphan slot with its drop command: {row!r}")
    remedy = row.split("SELECT ", 1)[1]
    cluster.query("SELECT " + remedy)
    if cluster.query("SELECT count(*) FROM trellara.check('keep') WHERE \"check\" = 'orphan_slot'") != "0":
        raise CaptureFailure("the orphan slot is still reported after its remedy ran")
    late = cluster.psql("BEGIN; INSERT INTO items VALUES (100000, 'w'); SELECT trellara.create_flow('late', 'pub'); "
                        "COMMIT;", check=False)
    expect_refused(late, "cannot run in a transaction that has already written",
                   ["HINT", "in its own transaction"], "create_flow after a write")
    if cluster.query("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'trellara_late'") != "0":
        raise CaptureFailure("the refused create_flow left a slot")
    cluster.query("SELECT trellara.drop_flow('keep', true)")
    print("ok: rolled_back_create_flow_leaves_a_reported_slot")


def main():
    root = postgres_owned_dir("trellara-log-root-")
    elsewhere = postgres_owned_dir("trellara-elsewhere-")
    try:
        log_directory_root_admits_non_superusers_only_below_it(root)
        # Both scenarios make and drop their own flows: a source without a flow of the pair's.
        with FlowPair("privileges", with_target=False, create_flow=False) as pair:
            drop_flow_removes_only_what_trellara_created(pair.source, elsewhere)
            rolled_back_create_flow_leaves_a_reported_slot(pair.source)
            pair.check_no_crashes()
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(elsewhere, ignore_errors=True)


if __name__ == "__main__":
    main()
