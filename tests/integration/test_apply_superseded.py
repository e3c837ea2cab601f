#!/usr/bin/env python3
"""Integration: superseded updates and merged statements in grouped batches (docs/apply.md
"Superseded updates in a group", "Merged statements in a group"), against real Postgres and real
`trellara apply` processes.

A grouped batch commits its source transactions in one target transaction, so the applier leaves
out an UPDATE that a later UPDATE of the same row in the group overwrites, and sends a table's
consecutive INSERTs (and UPDATEs by key of one shape) as one statement where the run ends. The
scenarios:

  - superseded_updates_are_left_out_and_the_target_matches_the_source: hot rows updated by most
    transactions, with deletes + re-inserts and key-changing UPDATEs of the same rows in between
    (where nothing may be left out or merged across them); the applier reports superseded_updates
    > 0 and merged_changes > 0, the target equals the source table by table, and every logged
    transaction has exactly one dedup row;
  - a_target_trigger_of_another_table_reads_rows_as_applied_in_order: an ENABLE ALWAYS trigger
    on the target's events table reads the hot row each event was inserted after; it must read
    exactly the value the source had (nothing left out across a write of a table with a trigger);
  - a_target_update_trigger_sees_every_replicated_update: the target has an AFTER UPDATE trigger
    enabled ALWAYS that records each UPDATE it sees; it must see exactly as many as the source made
    (the guard refuses the group, the applier sends every UPDATE of that table from then on);
  - a_trigger_on_one_target_partition_sees_every_replicated_update: public.zones is partitioned on
    the target only, with an ENABLE ALWAYS UPDATE trigger on one partition (none on the parent);
    the trigger must see every UPDATE the source made of that partition's rows (the guard looks at
    every partition through trellara.relation_tree; a parent-only check let the group leave them out);
  - negative_control_an_unguarded_group_is_caught: with defect.apply_superseded_unguarded (the
    guard is not sent) the trigger check above must fail;
  - merged_inserts_never_move_across_a_write_a_target_trigger_reads: the events trigger scenario
    with every UPDATE sent (superseded_updates = "send"), so only merged statements change the
    order: the events INSERTs merged into one statement would run after the counters UPDATEs of
    later transactions; the guard refuses the group and the trigger reads every value in order;
  - negative_control_an_unguarded_merge_is_caught: with defect.apply_merge_unguarded (the merged
    statements' relations are not guarded) that check must fail;
  - target_guard_refuses_tables_that_share_storage: the guard function itself, on the real target:
    trellara.require_no_replica_triggers refuses two guarded tables of which one is a partition of
    the other (TR011, their positions in DETAIL) and passes when none reaches another.

The workload is generated from a seed (printed; TRELLARA_SUPERSEDED_SEED=<seed> reruns it).
"""
import os
import random
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capture_support import CaptureFailure, checks_fail_under_defect, run_scenarios, scenario  # noqa: E402
from test_apply_robustness import (FlowPair, assert_each_transaction_applied_once, assert_same_data,  # noqa: E402
                                   run_apply, wait_log_covers_source)

HOT_ROWS = 10
DDL = f"""
CREATE TABLE public.counters (id int PRIMARY KEY, n bigint NOT NULL, note text);
CREATE TABLE public.events (id bigint PRIMARY KEY, counter int NOT NULL, n bigint NOT NULL);
CREATE TABLE public.zones (id int PRIMARY KEY, n bigint NOT NULL);
INSERT INTO public.counters SELECT g, 0, 'start' FROM generate_series(1, {HOT_ROWS}) g;
INSERT INTO public.zones SELECT g, 0 FROM generate_series(1, {HOT_ROWS}) g;
"""
TABLES = ("public.counters", "public.events", "public.zones")
# public.zones on the target only: partitioned, with an ENABLE ALWAYS UPDATE trigger on the
# partition of the upper half of the hot rows and none on the parent or the other partition.
ZONE_SPLIT = HOT_ROWS // 2 + 1
PARTITIONED_ZONES_DDL = f"""
BEGIN;
CREATE TEMPORARY TABLE zones_rows AS SELECT * FROM public.zones;
DROP TABLE public.zones;
CREATE TABLE public.zones (id int PRIMARY KEY, n bigint NOT NULL) PARTITION BY RANGE (id);
CREATE TABLE public.zones_low PARTITION OF public.zones FOR VALUES FROM (MINVALUE) TO ({ZONE_SPLIT});
CREATE TABLE public.zones_high PARTITION OF public.zones FOR VALUES FROM ({ZONE_SPLIT}) TO (MAXVALUE);
INSERT INTO public.zones SELECT * FROM zones_rows;
CREATE TABLE public.zone_audit (zone int NOT NULL, n bigint NOT NULL);
CREATE FUNCTION public.audit_zone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.zone_audit VALUES (NEW.id, NEW.n);
  RETURN NULL;
END $$;
CREATE TRIGGER zones_high_audit AFTER UPDATE ON public.zones_high FOR EACH ROW EXECUTE FUNCTION public.audit_zone();
ALTER TABLE public.zones_high ENABLE ALWAYS TRIGGER zones_high_audit;
COMMIT;
"""
SEED = int(os.environ.get("TRELLARA_SUPERSEDED_SEED", random.SystemRandom().randrange(1, 2**31)))
PROGRESS_FIELD = re.compile(r"\bsuperseded_updates=(\d+)\b")
MERGED_FIELD = re.compile(r"\bmerged_changes=(\d+)\b")
# The target-only table and trigger that record every UPDATE of public.counters the target sees.
AUDIT_DDL = """
CREATE TABLE IF NOT EXISTS public.update_audit (counter int NOT NULL, n bigint NOT NULL);
CREATE OR REPLACE FUNCTION public.audit_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.update_audit VALUES (NEW.id, NEW.n);
  RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS counters_audit ON public.counters;
CREATE TRIGGER counters_audit AFTER UPDATE ON public.counters FOR EACH ROW EXECUTE FUNCTION public.audit_update();
ALTER TABLE public.counters ENABLE ALWAYS TRIGGER counters_audit;
TRUNCATE public.update_audit;
"""

# The target-only table and trigger that record, for every replicated INSERT into public.events,
# the value of its hot row in public.counters at that moment: a trigger of *another* table that
# reads a table whose UPDATEs a group could leave out. The source inserted each event with that
# very value (events.n), so in-order apply makes every recorded value equal its event's n.
EVENT_AUDIT_DDL = """
CREATE TABLE IF NOT EXISTS public.event_audit (event bigint NOT NULL, counter_n bigint);
CREATE OR REPLACE FUNCTION public.audit_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.event_audit SELECT NEW.id, (SELECT c.n FROM public.counters c WHERE c.id = NEW.counter);
  RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS events_audit ON public.events;
CREATE TRIGGER events_audit AFTER INSERT ON public.events FOR EACH ROW EXECUTE FUNCTION public.audit_event();
ALTER TABLE public.events ENABLE ALWAYS TRIGGER events_audit;
TRUNCATE public.event_audit;
"""


class Workload:
    """Source transactions over the hot rows, numbered across scenarios (events.id is unique)."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.next_event = 1

    def updates(self, transactions, barriers):
        """`transactions` source transactions, each updating one or two hot rows and inserting an
        event; with `barriers`, some delete + re-insert a hot row or move one through another key.
        Returns (SQL script, number of UPDATE statements that touch a row)."""
        statements, updates = [], 0
        for i in range(transactions):
            row = self.rng.randint(1, HOT_ROWS)
            parts = [f"UPDATE counters SET n = n + 1, note = 'tx {i}' WHERE id = {row}"]
            if self.rng.random() < 0.3:
                parts.append(f"UPDATE counters SET n = n + 10 WHERE id = {self.rng.randint(1, HOT_ROWS)}")
            parts.append(f"INSERT INTO events SELECT {self.next_event}, id, n FROM counters WHERE id = {row}")
            self.next_event += 1
            updates += len(parts) - 1
            if barriers and i % 25 == 7:
                gone = self.rng.randint(1, HOT_ROWS)
                parts.append(f"DELETE FROM counters WHERE id = {gone}")
                parts.append(f"INSERT INTO counters VALUES ({gone}, {i}, 're-inserted')")
            if barriers and i % 25 == 19:
                moved = self.rng.randint(1, HOT_ROWS)
                parts.append(f"UPDATE counters SET id = 1000 WHERE id = {moved}")
                parts.append(f"UPDATE counters SET id = {moved}, note = 'moved back' WHERE id = 1000")
                updates += 2
            statements.append("BEGIN;\n" + ";\n".join(parts) + ";\nCOMMIT;")
        return "\n".join(statements) + "\n", updates


def progress_count(result, field):
    lines = [line for line in result.stdout.splitlines() if line.startswith("apply flow=")]
    match = field.search(lines[-1]) if lines else None
    if not match:
        raise CaptureFailure(f"the applier's last progress line has no {field.pattern}: {result.stdout[-1000:]}")
    return int(match.group(1))


def superseded_count(result):
    return progress_count(result, PROGRESS_FIELD)


def merged_count(result):
    return progress_count(result, MERGED_FIELD)


def config_with(pair, name, settings):
    """A copy of the flow's config with an [apply] section holding `settings`."""
    path = f"{pair.config}.{name}.toml"
    with open(pair.config) as original, open(path, "w") as config:
        config.write(original.read() + f"\n[apply]\n{settings}\n")
    return path


def bootstrap(pair):
    # Each table written once and applied, so the flow knows them: a relation's first sight takes
    # the one-at-a-time path, and the scenarios need grouped batches.
    pair.target.psql(PARTITIONED_ZONES_DDL)
    pair.source.psql("UPDATE counters SET note = 'known' WHERE id = 1; INSERT INTO events VALUES (0, 1, 0); "
                     "UPDATE zones SET n = 0 WHERE id = 1;")
    wait_log_covers_source(pair.source)
    run_apply(pair.config, 0)


@scenario(suite="grouped_apply",
          invariants=("superseded UPDATEs left out (superseded_updates > 0)",
                      "INSERTs and UPDATEs of several transactions merged (merged_changes > 0)",
                      "target equals source after deletes, re-inserts and key changes of the hot rows",
                      "one dedup row per logged transaction"))
def superseded_updates_are_left_out_and_the_target_matches_the_source(pair, workload):
    script, updates = workload.updates(600, barriers=True)
    pair.source.psql(script)
    wait_log_covers_source(pair.source)
    result = run_apply(pair.config, 0)
    left_out, merged = superseded_count(result), merged_count(result)
    print(f"seed {SEED}: {updates} UPDATEs on the source, {left_out} left out as superseded, {merged} changes sent "
          "in merged statements")
    if left_out == 0:
        raise CaptureFailure(f"no UPDATE was left out of 600 transactions over {HOT_ROWS} rows (seed {SEED}): the "
                             "grouped batches did not compact")
    if merged == 0:
        raise CaptureFailure(f"no change of 600 transactions was sent in a merged statement (seed {SEED})")
    assert_same_data(pair.source, pair.target, TABLES, "after superseded updates")
    assert_each_transaction_applied_once(pair.target, pair.log_dir, "after superseded updates")
    print("ok: superseded_updates_are_left_out_and_the_target_matches_the_source")


def check_trigger_sees_every_update(pair, workload, env=None, outputs=None):
    pair.target.psql(AUDIT_DDL)
    script, updates = workload.updates(400, barriers=False)
    pair.source.psql(script)
    wait_log_covers_source(pair.source)
    result = run_apply(pair.config, 0, env)
    if outputs is not None:
        outputs.append(result.stderr)
    seen = int(pair.target.query("SELECT count(*) FROM public.update_audit"))
    print(f"seed {SEED}: {updates} UPDATEs on the source, the target's trigger saw {seen}, "
          f"superseded_updates={superseded_count(result)}")
    if seen != updates:
        raise CaptureFailure(f"the target's ALWAYS trigger on public.counters saw {seen} UPDATEs, the source made "
                             f"{updates} (seed {SEED}): UPDATEs were left out although a trigger fires for them")
    if "sending every replicated UPDATE" not in result.stderr:
        raise CaptureFailure(f"the applier did not say it sends every UPDATE of public.counters: {result.stderr[-1500:]}")
    assert_same_data(pair.source, pair.target, TABLES, "with the target's UPDATE trigger")
    assert_each_transaction_applied_once(pair.target, pair.log_dir, "with the target's UPDATE trigger")


@scenario(suite="grouped_apply",
          invariants=("a target trigger ENABLE ALWAYS on another table reads every row as in-order apply leaves it",
                      "target equals source", "one dedup row per logged transaction"))
def a_target_trigger_of_another_table_reads_rows_as_applied_in_order(pair, workload):
    """Each source transaction updates a hot counter, then inserts an event carrying the counter's
    new value; a later transaction of the same group updates the same counter again. Leaving the
    first UPDATE out would make the events trigger read the older value."""
    check_events_trigger(pair, workload, pair.config)
    print("ok: a_target_trigger_of_another_table_reads_rows_as_applied_in_order")


def check_events_trigger(pair, workload, config, env=None, outputs=None):
    pair.target.psql(EVENT_AUDIT_DDL)
    try:
        first_event = workload.next_event
        script, updates = workload.updates(400, barriers=False)
        pair.source.psql(script)
        wait_log_covers_source(pair.source)
        result = run_apply(config, 0, env)
        if outputs is not None:
            outputs.append(result.stderr)
        audited = int(pair.target.query("SELECT count(*) FROM public.event_audit"))
        wrong = pair.target.query(
            "SELECT count(*) || ' ' || coalesce(string_agg(e.id || ':' || e.n || '/' || coalesce(a.counter_n::text, 'null'), "
            "' ' ORDER BY e.id), '') FROM public.events e JOIN public.event_audit a ON a.event = e.id "
            "WHERE a.counter_n IS DISTINCT FROM e.n")
        print(f"seed {SEED}: {workload.next_event - first_event} events, {audited} audited by the target's trigger, "
              f"mismatching: {wrong.split(' ')[0]}; superseded_updates={superseded_count(result)} "
              f"merged_changes={merged_count(result)}")
        if audited != workload.next_event - first_event:
            raise CaptureFailure(f"the events trigger ran {audited} times for {workload.next_event - first_event} "
                                 f"replicated INSERTs (seed {SEED})")
        if wrong.split(" ")[0] != "0":
            raise CaptureFailure(f"the target's ALWAYS trigger on public.events read a counter value in-order apply "
                                 f"would not have shown it (event:expected/seen): {wrong[:600]} (seed {SEED})")
        if "sending every replicated UPDATE" not in result.stderr:
            raise CaptureFailure(f"the applier did not say it stops leaving UPDATEs out around public.events: "
                                 f"{result.stderr[-1500:]}")
        assert_same_data(pair.source, pair.target, TABLES, "with the target's events trigger")
        assert_each_transaction_applied_once(pair.target, pair.log_dir, "with the target's events trigger")
    finally:
        pair.target.psql("DROP TRIGGER IF EXISTS events_audit ON public.events")


@scenario(suite="grouped_apply",
          invariants=("a target trigger ENABLE ALWAYS sees every replicated UPDATE",
                      "target equals source", "one dedup row per logged transaction"))
def a_target_update_trigger_sees_every_replicated_update(pair, workload):
    check_trigger_sees_every_update(pair, workload)
    print("ok: a_target_update_trigger_sees_every_replicated_update")


@scenario(suite="grouped_apply",
          invariants=("an ENABLE ALWAYS trigger on one partition of a target-only partitioned table sees every "
                      "replicated UPDATE of its rows", "target equals source", "one dedup row per logged transaction"))
def a_trigger_on_one_target_partition_sees_every_replicated_update(pair, workload):
    """Hot rows of public.zones updated by most of 400 transactions, grouped: without the guard
    looking at the partitions, the group would leave out UPDATEs that the trigger of zones_high
    fires for."""
    rng = random.Random(workload.rng.random())
    statements, high = [], 0
    for i in range(400):
        rows = [rng.randint(1, HOT_ROWS) for _ in range(rng.choice((1, 1, 2)))]
        high += sum(1 for row in rows if row >= ZONE_SPLIT)
        statements.append("BEGIN;\n" + "".join(f"UPDATE zones SET n = n + 1 WHERE id = {row};\n" for row in rows)
                          + "COMMIT;")
    pair.source.psql("\n".join(statements) + "\n")
    wait_log_covers_source(pair.source)
    result = run_apply(pair.config, 0)
    seen = int(pair.target.query("SELECT count(*) FROM public.zone_audit"))
    print(f"seed {SEED}: {high} UPDATEs of zones_high's rows on the source, its trigger saw {seen}, "
          f"superseded_updates={superseded_count(result)}")
    if seen != high:
        raise CaptureFailure(f"the ALWAYS trigger on partition public.zones_high saw {seen} UPDATEs, the source made "
                             f"{high} of its rows (seed {SEED}): UPDATEs were left out although a trigger of a "
                             "partition fires for them")
    if "sending every replicated UPDATE" not in result.stderr:
        raise CaptureFailure(f"the applier did not say it sends every UPDATE of public.zones: {result.stderr[-1500:]}")
    assert_same_data(pair.source, pair.target, TABLES, "with a trigger on one target partition")
    assert_each_transaction_applied_once(pair.target, pair.log_dir, "with a trigger on one target partition")
    print("ok: a_trigger_on_one_target_partition_sees_every_replicated_update")


@scenario(suite="grouped_apply", defect="apply_superseded_unguarded",
          pairs_with="a_target_update_trigger_sees_every_replicated_update",
          fault_points=("defect.apply_superseded_unguarded",),
          invariants=("with the defect the trigger check fails",))
def negative_control_an_unguarded_group_is_caught(pair, workload):
    point = "defect.apply_superseded_unguarded"
    caught = checks_fail_under_defect(point, "UPDATE trigger", lambda env, outputs: check_trigger_sees_every_update(
        pair, workload, env, outputs))
    print(f"{point} caught: {str(caught)[:400]}")


@scenario(suite="grouped_apply",
          invariants=("with every UPDATE sent, merged INSERTs never run after a write a target trigger ENABLE ALWAYS "
                      "of their table reads", "target equals source", "one dedup row per logged transaction"))
def merged_inserts_never_move_across_a_write_a_target_trigger_reads(pair, workload):
    """The events trigger reads the counter each event was inserted after. With superseded UPDATEs
    sent, only a merged statement can change what it reads: the group's events INSERTs sent as one
    statement after the counters UPDATEs of later transactions."""
    check_events_trigger(pair, workload, config_with(pair, "send", 'superseded_updates = "send"'))
    print("ok: merged_inserts_never_move_across_a_write_a_target_trigger_reads")


@scenario(suite="grouped_apply", defect="apply_merge_unguarded",
          pairs_with="merged_inserts_never_move_across_a_write_a_target_trigger_reads",
          fault_points=("defect.apply_merge_unguarded",),
          invariants=("with the defect the events trigger check fails",))
def negative_control_an_unguarded_merge_is_caught(pair, workload):
    point = "defect.apply_merge_unguarded"
    config = config_with(pair, "send", 'superseded_updates = "send"')
    caught = checks_fail_under_defect(point, "events trigger", lambda env, outputs: check_events_trigger(
        pair, workload, config, env, outputs))
    print(f"{point} caught: {str(caught)[:400]}")


@scenario(suite="grouped_apply",
          invariants=("the guard refuses two guarded tables that share a table on the target",))
def target_guard_refuses_tables_that_share_storage(pair, workload):
    pair.target.psql("CREATE TABLE public.shared_parent (id int PRIMARY KEY) PARTITION BY RANGE (id); "
                     "CREATE TABLE public.shared_child PARTITION OF public.shared_parent FOR VALUES FROM (0) TO (100);")
    try:
        guard = "SELECT trellara.require_no_replica_triggers(ARRAY[{}])"
        refused = pair.target.psql(guard.format("'\"public\".\"events\"', '\"public\".\"shared_parent\"', "
                                                "'\"public\".\"shared_child\"'"), check=False)
        print(f"guard over events, shared_parent, shared_child: exit {refused.returncode}: {refused.stderr.strip()}")
        if (refused.returncode == 0 or "shares a table with" not in refused.stderr
                or "DETAIL:  2,3" not in refused.stderr):
            raise CaptureFailure("trellara.require_no_replica_triggers did not refuse a table and its partition "
                                 f"(positions 2,3): {refused.stderr.strip()}")
        passed = pair.target.psql(guard.format("'\"public\".\"events\"', '\"public\".\"shared_child\"'"),
                                  check=False)
        if passed.returncode != 0:
            raise CaptureFailure(f"the guard refused tables that share nothing: {passed.stderr.strip()}")
    finally:
        pair.target.psql("DROP TABLE IF EXISTS public.shared_parent")
    print("ok: target_guard_refuses_tables_that_share_storage")


SCENARIOS = (superseded_updates_are_left_out_and_the_target_matches_the_source,
             a_target_trigger_of_another_table_reads_rows_as_applied_in_order,
             a_target_update_trigger_sees_every_replicated_update,
             a_trigger_on_one_target_partition_sees_every_replicated_update,
             negative_control_an_unguarded_group_is_caught,
             merged_inserts_never_move_across_a_write_a_target_trigger_reads,
             negative_control_an_unguarded_merge_is_caught,
             target_guard_refuses_tables_that_share_storage)

if __name__ == "__main__":
    print(f"workload seed {SEED} (TRELLARA_SUPERSEDED_SEED={SEED} reruns it)")
    with FlowPair("apply-superseded", DDL, TABLES) as flow_pair:
        bootstrap(flow_pair)
        run_scenarios(SCENARIOS, flow_pair, Workload(SEED))
        flow_pair.check_no_crashes()
