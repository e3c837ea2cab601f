#!/usr/bin/env python3
"""Continuity on the applier's side (DESIGN §2 "continuity").

Real clusters and the real `trellara apply --until-caught-up`, one source + target pair per scenario
(test_apply_robustness.py's FlowPair and its convergence checks, reused unchanged):

- target_restored_from_an_older_backup_rewinds_and_converges: the target's data directory is
  copied while it is stopped (a physical backup: data, dedup rows and replication-origin progress
  agree), more transactions are applied, then the old copy is put back. The target's origin
  progress is now behind what the consumer offset claims: the applier says so in one structured
  line (`event=rewind`, origin progress, consumer offset, where it rewinds to), re-reads the log from
  the first transaction past the origin progress and converges exactly (every transaction once).
  Negative side: the restore really lost those transactions (the ledger is short before the run).
- negative_control_continuity_unchecked_is_caught: the same with
  defect.apply_continuity_unchecked (the consumer offset trusted whatever the target holds) must
  fail those checks.
- target_behind_a_log_that_lost_its_early_segments_is_refused_with_the_gap: the same restore after
  the log rolled to a second segment and the first segment was deleted (the relay stopped; this
  branch has no retention yet, so the deletion simulates it): the applier exits 1 naming the origin
  progress, the consumer offset and the LSN it claims, the first offset and LSN the log still holds,
  and the remedy (reseed); nothing is applied, origin progress and consumer offset do not move.
- config_pointing_at_another_flows_log_is_refused: a configuration naming flow `app` with the log
  directory of flow `other` is refused before anything is applied, naming both flows; the target's
  dedup rows and origin progress do not move.
"""

import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import CaptureFailure, run_scenarios, scenario, wait_for  # noqa: E402
from harness import PG_BIN  # noqa: E402
from test_apply_robustness import (FlowPair, LEDGER_DDL, LEDGER_TABLES, assert_each_transaction_applied_once,  # noqa: E402
                                   assert_ledger_has_no_duplicate_effects, run_ledger_workload)
from test_apply_transient_retry import start_again, stop_keeping_data  # noqa: E402


EXIT_BLOCKED = 3


def consumer_offset(log_dir):
    with open(os.path.join(log_dir, "consumers", "applier")) as f:
        return int(f.read().split("next_offset=")[1].split()[0])


def backup_target(pair):
    """A physical copy of the stopped target's data directory (ownership kept)."""
    stop_keeping_data(pair.target)
    backup = os.path.join(pair.target.base_dir, "backup")
    subprocess.run(["cp", "-a", pair.target.data_dir, backup], check=True)
    start_again(pair.target)
    return backup


def restore_target(pair, backup):
    stop_keeping_data(pair.target)
    shutil.rmtree(pair.target.data_dir)
    subprocess.run(["cp", "-a", backup, pair.target.data_dir], check=True)
    start_again(pair.target)


def origin_progress(target):
    return target.query("SELECT pg_replication_origin_progress('trellara_app', false)")


def dedup_rows(target):
    return int(target.query("SELECT count(*) FROM trellara.applied_transactions"))


def restore_older_backup(pair):
    """Applies 1 000 transactions, copies the stopped target, applies 1 000 more, puts the copy
    back. Returns the consumer offset the log claims."""
    first = run_ledger_workload(pair, 1000)
    pair.apply()
    backup = backup_target(pair)
    second = run_ledger_workload(pair, 1000)
    pair.apply()
    offset = consumer_offset(pair.log_dir)
    restore_target(pair, backup)
    have = int(pair.target.query("SELECT count(*) FROM public.ledger"))
    print(f"restored target: ledger {have} rows of {first + second}, origin progress "
          f"{origin_progress(pair.target)}, consumer offset {offset}")
    if have != first:
        raise CaptureFailure(f"the restored target holds {have} ledger rows, expected the backup's {first}")
    return offset


def check_rewound_and_converged(pair, result, offset):
    # The data first: that is what a target left behind loses (the negative control must fail here).
    pair.assert_same_data(LEDGER_TABLES, "after the rewind")
    assert_each_transaction_applied_once(pair.target, pair.log_dir, "after the rewind")
    assert_ledger_has_no_duplicate_effects(pair.target, "after the rewind")
    rewind = [line for line in result.stderr.splitlines() if "event=rewind" in line]
    print(f"rewind line: {rewind[0] if rewind else None}")
    if not rewind or f"consumer_offset={offset}" not in rewind[0] or "rewind_to_offset=" not in rewind[0]:
        raise CaptureFailure(f"no structured rewind line naming the consumer offset: {result.stderr[-2000:]}")


@scenario(suite="continuity", invariants=("origin progress behind the consumer offset rewinds", "every transaction applied once after the rewind"))
def target_restored_from_an_older_backup_rewinds_and_converges():
    with FlowPair("cont-rewind", LEDGER_DDL, LEDGER_TABLES) as pair:
        offset = restore_older_backup(pair)
        check_rewound_and_converged(pair, pair.apply(), offset)
        again = pair.apply()
        if "event=rewind" in again.stderr:
            raise CaptureFailure("a second run rewound again: " + again.stderr[-1000:])
        pair.check_no_crashes()
    print("ok: target_restored_from_an_older_backup_rewinds_and_converges")


@scenario(suite="continuity", defect="apply_continuity_unchecked", pairs_with="target_restored_from_an_older_backup_rewinds_and_converges", invariants=("the rewind checks fail when the consumer offset is trusted",))
def negative_control_continuity_unchecked_is_caught():
    """With defect.apply_continuity_unchecked the applier trusts its consumer offset whatever the
    target holds: the restored-target scenario must fail (the target stays short)."""
    with FlowPair("cont-negctl", LEDGER_DDL, LEDGER_TABLES) as pair:
        offset = restore_older_backup(pair)
        env = dict(os.environ, TRELLARA_FAULTS="defect.apply_continuity_unchecked:1:defect")
        result = pair.apply(expect=None, env=env)
        if result.returncode == 2:  # refused before it ran: a harness failure, not a caught defect
            raise CaptureFailure(f"negative control: the applier did not run (exit 2): {result.stderr[-1000:]}")
        try:
            check_rewound_and_converged(pair, result, offset)
        except CaptureFailure as caught:
            print(f"negative control: exit {result.returncode}, caught: {str(caught).splitlines()[0][:300]}")
        else:
            raise CaptureFailure("negative control: without the continuity check the restored target converged "
                                 "anyway — the scenario cannot catch that defect")
    print("ok: negative_control_continuity_unchecked_is_caught")


BIG_DDL = LEDGER_DDL + "CREATE TABLE public.big (id int PRIMARY KEY, payload text NOT NULL);\n"
BIG_TABLES = LEDGER_TABLES + ("public.big",)


def segments(log_dir):
    return sorted(name for name in os.listdir(log_dir) if name.startswith("segment-"))


@scenario(suite="continuity", invariants=("refused naming the gap and the remedy", "nothing applied, origin and offset unmoved"))
def target_behind_a_log_that_lost_its_early_segments_is_refused_with_the_gap():
    with FlowPair("cont-refuse", BIG_DDL, BIG_TABLES) as pair:
        run_ledger_workload(pair, 300)
        pair.apply()
        backup = backup_target(pair)
        backup_progress = origin_progress(pair.target)
        backup_rows = dedup_rows(pair.target)
        # Past the 64 MiB segment size: 80 transactions of 10 rows of ~100 kB each.
        for batch in range(80):
            pair.source.psql(f"INSERT INTO public.big SELECT g, repeat(md5(g::text), 3200) "
                             f"FROM generate_series({batch * 10 + 1}, {batch * 10 + 10}) g")
        run_ledger_workload(pair, 300)
        pair.apply()
        wait_for("the log to roll to a second segment", lambda: len(segments(pair.log_dir)) >= 2, 60)
        pair.source.query("SELECT trellara.stop_flow('app')")
        first = segments(pair.log_dir)[0]
        index = first.replace("segment-", "index-").replace(".log", ".idx")
        for name in (first, index):
            if os.path.exists(os.path.join(pair.log_dir, name)):
                os.remove(os.path.join(pair.log_dir, name))
        left = segments(pair.log_dir)
        print(f"deleted {first} (and its index); the log now starts at {left[0]}")
        offset = consumer_offset(pair.log_dir)
        restore_target(pair, backup)
        result = pair.apply(expect=1)
        message = result.stderr.strip()
        print(f"refused: {message[:700]}")
        first_offset = int(left[0].split("-")[1].split(".")[0])
        for needed in (f"is at {backup_progress}", f"consumer offset {offset}", f"first offset it holds is {first_offset}",
                       "Reseed"):
            if needed not in message:
                raise CaptureFailure(f"the refusal does not name {needed!r}: {message}")
        if origin_progress(pair.target) != backup_progress or dedup_rows(pair.target) != backup_rows:
            raise CaptureFailure("the refused run applied something or moved the origin progress")
        if consumer_offset(pair.log_dir) != offset:
            raise CaptureFailure("the refused run moved the consumer offset")
        pair.check_no_crashes()
    print("ok: target_behind_a_log_that_lost_its_early_segments_is_refused_with_the_gap")


@scenario(suite="continuity", invariants=("another flow's log is refused before anything is applied",))
def config_pointing_at_another_flows_log_is_refused():
    with FlowPair("cont-otherflow", LEDGER_DDL + "CREATE TABLE public.other_t (id int PRIMARY KEY);\n",
                        LEDGER_TABLES) as pair:
        run_ledger_workload(pair, 200)
        pair.apply()
        pair.source.query("CREATE PUBLICATION pub2 FOR TABLE public.other_t")
        pair.source.query("SELECT trellara.create_flow('other', 'pub2')")
        other_log = pair.source.query("SELECT log_directory FROM trellara.flows WHERE name = 'other'")
        pair.source.psql("INSERT INTO public.other_t VALUES (1)")
        pair.wait_log_covers_source()
        wait_for("the log of flow other to hold a record",
                 lambda: any(n.startswith("segment-") and os.path.getsize(os.path.join(other_log, n)) > 0
                             for n in os.listdir(other_log)), 60)
        progress, rows = origin_progress(pair.target), dedup_rows(pair.target)
        status_row = pair.target.query("SELECT state, updated_at FROM trellara.apply_status WHERE flow = 'app'")
        wrong = pair.write_config(os.path.join(pair.work.name, "wrong.toml"), log_dir=other_log)
        result = pair.apply(expect=1, config=wrong)
        message = result.stderr.strip()
        print(f"refused: {message[:500]}")
        if "belongs to flow other, not to flow app" not in message or other_log not in message:
            raise CaptureFailure(f"the refusal does not name both flows and the directory: {message}")
        if origin_progress(pair.target) != progress or dedup_rows(pair.target) != rows:
            raise CaptureFailure("another flow's log was applied to the target")
        if pair.target.query("SELECT state, updated_at FROM trellara.apply_status WHERE flow = 'app'") != status_row:
            raise CaptureFailure("the refused run wrote the flow's apply status on the target")
        pair.check_no_crashes()
    print("ok: config_pointing_at_another_flows_log_is_refused")


@scenario(suite="continuity", invariants=("a database restored from a dump beside the server's origin is not "
                                          "taken as caught up", "the missing transactions are quarantined as "
                                          "missing_dedup_evidence, nothing applied over the gap"))
def database_restored_from_a_dump_on_the_same_server_fails_closed():
    # Replication origins belong to the server: a dump restored into a new database of the same
    # server keeps the origin's progress (past what the dump holds). An applier that trusts that
    # progress alone prints state=caught_up applied=0 and applies later transactions on top of the gap.
    with FlowPair("cont-dump", LEDGER_DDL, LEDGER_TABLES) as pair:
        first = run_ledger_workload(pair, 8)
        pair.wait_log_covers_source()
        pair.apply()
        dump = subprocess.run([os.path.join(PG_BIN, "pg_dump"), "-h", pair.target.socket_dir, "-p",
                               str(pair.target.port), "-U", "postgres", "postgres"], capture_output=True, text=True,
                              check=True).stdout
        run_ledger_workload(pair, 12)
        pair.wait_log_covers_source()
        pair.apply()
        pair.target.query("CREATE DATABASE restored")
        pair.target.psql(dump, dbname="restored")
        restored = pair.write_config(pair.config + ".restored.toml", target_conninfo=pair.target.conninfo("restored"))
        pair.source.query("INSERT INTO ledger VALUES (1, 100000, 1)")
        pair.wait_log_covers_source()
        result = pair.apply(expect=EXIT_BLOCKED, config=restored)
        if "state=caught_up" in result.stdout:
            raise CaptureFailure(f"the applier called the restored database caught up: {result.stdout[-800:]}")
        reasons = pair.target.query("SELECT string_agg(DISTINCT reason, ',') FROM trellara.quarantine", dbname="restored")
        if reasons != "missing_dedup_evidence":
            raise CaptureFailure(f"quarantine reasons on the restored database: {reasons!r}: {result.stderr[-1500:]}")
        have = int(pair.target.query("SELECT count(*) FROM public.ledger", dbname="restored"))
        if have != first:
            raise CaptureFailure(f"the restored database holds {have} ledger rows, its dump held {first}: something "
                                 f"was applied over the gap")
        print(f"restored database: blocked at missing_dedup_evidence, ledger {have} rows (the dump's)")
        pair.check_no_crashes()
    print("ok: database_restored_from_a_dump_on_the_same_server_fails_closed")


SCENARIOS = (config_pointing_at_another_flows_log_is_refused,
             target_restored_from_an_older_backup_rewinds_and_converges,
             negative_control_continuity_unchecked_is_caught,
             target_behind_a_log_that_lost_its_early_segments_is_refused_with_the_gap,
             database_restored_from_a_dump_on_the_same_server_fails_closed)

if __name__ == "__main__":
    run_scenarios(SCENARIOS)
