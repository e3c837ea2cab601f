#!/usr/bin/env python3
"""Integration: `trellara contract-test` and `trellara repair-plan` against real clusters
(docs/schema-changes.md "Operator commands in detail").

Each scenario starts its own source (with a flow) and target (without the extension) through
FlowPair (test_apply_robustness.py), with [source] conninfo added to the flow's configuration.

  contract_test_names_each_defect_and_exits_by_severity
      identical tables: exit 0, status ok, no finding. Then the source's `events` loses its primary
      key (REPLICA IDENTITY DEFAULT without a key, UPDATE/DELETE published), the target's `orders`
      loses column `amount` and gets a BEFORE ROW trigger ENABLE ALWAYS (fires for replicated rows)
      and an ordinary trigger (does not fire under session_replication_role = replica): exit 1, the
      JSON names missing_replica_identity on public.events, missing_column and replicated_trigger on
      public.orders, nothing for the ordinary trigger, each with problem, consequence and fix; the
      text form ends with the summary line. A target that cannot be reached: exit 2 naming the
      target, no verdict printed.
  repair_plan_scripts_recovery_from_a_quarantined_transaction
      nothing open: "nothing to repair", exit 0, no steps. A target row is deleted before the
      source updates it: apply exits 3 (zero_rows_matched). repair-plan lists, in order, inspect
      (with the quarantined transaction's real log offset), discover, contract-test, repair
      (re-snapshot of the table), replay-ready with the exact boundary from trellara.quarantine,
      resume and verify. The test then runs the plan's own trellara commands as printed — inspect,
      snapshot --force, replay-ready, apply, verify — and the flow resumes: the quarantine row is
      resolved, later source transactions arrive, verify exits 0, the tables are equal, repair-plan
      says nothing to repair. An unreachable target: repair-plan exits 2.
  source_schema_change_recovered_by_following_the_repair_plan  (seed source_schema_handoff_recovery)
      the source adds a column with a default while trellara's DDL event trigger is disabled and
      writes it; no DDL record explains it, so the target does not follow: apply exits 3
      (schema_drift). repair-plan's repair
      step is exactly the target ALTER (contract-test's fix) and `snapshot --force`; the test runs
      the plan as printed — psql \\d on both sides, the ALTER, contract-test (now exit 0), the fresh
      snapshot handoff, replay-ready, apply, verify — and the flow resumes: the existing rows carry
      the source's default, a later UPDATE arrives, the tables are equal.
  negative_control_repair_plan_omits_resnapshot_is_caught
      the same scenario with defect.repair_plan_omits_resnapshot (the repair step without the
      snapshot --force): following the plan as printed, a convergence check (verify, equal tables,
      the source's default on the existing rows) must fail, not only the check of the plan's shape.

Clusters are stopped by PID by the harness; the applier is our child, stopped by its Popen handle.
"""

import json
import os
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import (CaptureFailure, TRELLARA_BIN, log_records,  # noqa: E402
                             run_scenarios, scenario, wait_for, checks_fail_under_defect)
from test_apply_robustness import (EXIT_BLOCKED, FlowPair, assert_same_data, run_apply,  # noqa: E402
                                   wait_log_covers_source, with_test_defects)

TABLES = ("public.orders", "public.events")
DDL = """
CREATE TABLE public.orders (id int PRIMARY KEY, note text, amount numeric(12,2));
CREATE TABLE public.events (id int PRIMARY KEY, payload text);
"""


class ContractPair(FlowPair):
    """FlowPair whose configuration also names the source (contract-test and verify read it)."""

    def __enter__(self):
        super().__enter__()
        self.write_config(with_source=True)
        return self

    def unreachable_config(self):
        return self.write_config(os.path.join(self.work.name, "unreachable.toml"),
                                 target_conninfo=f"host={self.work.name} port=1 user=postgres dbname=postgres "
                                                 f"connect_timeout=5", with_source=True)


def trellara(*args, expect=None, timeout=300, env=None):
    """`trellara args`; `env` naming a defect in TRELLARA_FAULTS adds the test-only switch."""
    result = subprocess.run(with_test_defects([TRELLARA_BIN, *args], env), capture_output=True, text=True,
                            timeout=timeout, env=env)
    if expect is not None and result.returncode != expect:
        raise CaptureFailure(f"trellara {' '.join(args)} exited {result.returncode}, expected {expect}\n"
                             f"stdout: {result.stdout[-3000:]}\nstderr: {result.stderr[-3000:]}")
    return result


def run_plan_command(command, expect=0, env=None):
    """Runs one `trellara ...` line of a repair plan exactly as printed (our binary for `trellara`)."""
    argv = shlex.split(command)
    if argv[0] != "trellara":
        raise CaptureFailure(f"not a trellara command: {command}")
    print(f"$ {command}")
    result = trellara(*argv[1:], expect=expect, env=env)
    return result


@scenario(suite="operator_commands", invariants=(
    "identical tables: exit 0 and no finding",
    "missing column, missing replica identity, replicated trigger: exit 1 naming each code on its relation",
    "a trigger that does not fire for replicated rows is not reported",
    "unreachable target: exit 2, no verdict"))
def contract_test_names_each_defect_and_exits_by_severity():
    with ContractPair("contract-test", DDL, TABLES) as pair:
        clean = trellara("contract-test", "--config", pair.config, "--format", "json", expect=0)
        report = json.loads(clean.stdout)
        print(f"clean pair: {report}")
        if report["status"] != "ok" or report["findings"] or report["relations"] != 2 or report["flow"] != "app":
            raise CaptureFailure(f"a clean pair is not ok without findings: {report}")

        pair.source.psql("ALTER TABLE public.events DROP CONSTRAINT events_pkey")
        pair.target.psql("""
            ALTER TABLE public.orders DROP COLUMN amount;
            CREATE FUNCTION public.stamp() RETURNS trigger LANGUAGE plpgsql AS
              $$BEGIN NEW.note := 'stamped'; RETURN NEW; END$$;
            CREATE TRIGGER stamp BEFORE INSERT OR UPDATE ON public.orders FOR EACH ROW EXECUTE FUNCTION public.stamp();
            ALTER TABLE public.orders ENABLE ALWAYS TRIGGER stamp;
            CREATE TRIGGER origin_only BEFORE INSERT ON public.orders FOR EACH ROW EXECUTE FUNCTION public.stamp();
        """)
        failed = trellara("contract-test", "--config", pair.config, "--format", "json", expect=1)
        report = json.loads(failed.stdout)
        for f in report["findings"]:
            print(f"finding: {f['severity']} {f['code']} {f['relation']}: {f['problem']} | {f['fix']}")
        found = {(f["relation"], f["code"]) for f in report["findings"]}
        wanted = {("public.events", "missing_replica_identity"), ("public.orders", "missing_column"),
                  ("public.orders", "replicated_trigger")}
        if report["status"] != "fail" or not wanted <= found:
            raise CaptureFailure(f"contract-test did not name {wanted - found}: {report}")
        if found - wanted:
            raise CaptureFailure(f"contract-test reported more than the defects made: {found - wanted}")
        for f in report["findings"]:
            if f["severity"] != "error" or not all(f[k] for k in ("problem", "consequence", "fix")):
                raise CaptureFailure(f"finding without severity error or an empty field: {f}")
            if f["code"] == "replicated_trigger" and "stamp" not in f["problem"]:
                raise CaptureFailure(f"the replicated trigger finding does not name it: {f}")
            if "origin_only" in f["problem"]:
                raise CaptureFailure(f"a trigger that does not fire for replicated rows was reported: {f}")
        if not any(f["fix"] == 'ALTER TABLE "public"."orders" ADD COLUMN "amount" numeric(12,2); -- on the target'
                   for f in report["findings"]):
            raise CaptureFailure("the missing_column fix is not the ADD COLUMN statement")

        text = trellara("contract-test", "--config", pair.config, expect=1)
        last = text.stdout.strip().splitlines()[-1]
        print(f"text summary: {last}")
        if not last.startswith("contract-test flow app: 2 relations") or "3 errors" not in last:
            raise CaptureFailure(f"the text summary line is wrong: {last}")

        unreachable = trellara("contract-test", "--config", pair.unreachable_config(), expect=2)
        print(f"unreachable target: exit 2: {unreachable.stderr.strip()}")
        if "target" not in unreachable.stderr or unreachable.stdout.strip():
            raise CaptureFailure(f"an unreachable target is not named, or a verdict was printed: {unreachable}")
        pair.check_no_crashes()
    print("ok: contract_test_names_each_defect_and_exits_by_severity")


def step(plan, title):
    for s in plan["steps"]:
        if s["title"] == title:
            return s
    raise CaptureFailure(f"repair-plan has no step {title!r}: {json.dumps(plan, indent=2)}")


def commands(s):
    return [c for c in s["commands"] if not c.startswith("#")]


@scenario(suite="operator_commands", invariants=(
    "nothing open: nothing to repair, exit 0",
    "the plan names the quarantined boundary exactly and the transaction's log offset",
    "running the plan's own commands (snapshot --force, replay-ready, apply, verify) resumes the flow",
    "unreachable target: exit 2"))
def repair_plan_scripts_recovery_from_a_quarantined_transaction():
    with ContractPair("repair-plan", DDL, TABLES) as pair:
        source, target = pair.source, pair.target
        source.psql("INSERT INTO public.orders SELECT g, 'order ' || g, g FROM generate_series(1, 50) g; "
                    "INSERT INTO public.events VALUES (1, 'one')")
        wait_log_covers_source(source)
        run_apply(pair.config, 0)
        nothing = trellara("repair-plan", "--config", pair.config, expect=0)
        print(f"before: {nothing.stdout.strip()}")
        if "nothing to repair" not in nothing.stdout:
            raise CaptureFailure(f"repair-plan of a healthy flow: {nothing.stdout}")
        if json.loads(trellara("repair-plan", "--config", pair.config, "--format", "json", expect=0).stdout)["steps"]:
            raise CaptureFailure("repair-plan of a healthy flow has steps")

        # The target loses row 7; the source then updates it: zero_rows_matched.
        target.query("DELETE FROM public.orders WHERE id = 7")
        xid = source.query("BEGIN; UPDATE public.orders SET note = 'changed' WHERE id = 7; "
                           "SELECT txid_current(); COMMIT").splitlines()[0]
        source.psql("INSERT INTO public.orders VALUES (51, 'after', 1); UPDATE public.events SET payload = 'uno'")
        wait_log_covers_source(source)
        run_apply(pair.config, EXIT_BLOCKED)
        row = target.query("SELECT xid, commit_lsn, reason FROM trellara.quarantine WHERE flow = 'app' "
                           "AND state = 'quarantined'")
        print(f"quarantined: {row}")
        q_xid, q_lsn, reason = row.split("|")
        if q_xid != xid or reason != "zero_rows_matched":
            raise CaptureFailure(f"expected transaction {xid} quarantined as zero_rows_matched, got {row}")
        offsets = [r["offset"] for r in log_records(pair.log_dir) if r.get("xid") == int(xid)]

        plan = json.loads(trellara("repair-plan", "--config", pair.config, "--format", "json", expect=0).stdout)
        text = trellara("repair-plan", "--config", pair.config, expect=0).stdout
        print(text)
        titles = [s["title"] for s in plan["steps"]]
        want_titles = ["inspect", "discover the schema on both sides", "contract test", "repair",
                       "mark the exact boundary replay-ready", "resume", "verify"]
        if titles != want_titles or [s["n"] for s in plan["steps"]] != list(range(1, 8)):
            raise CaptureFailure(f"repair-plan steps are {titles}")
        config = f"'{pair.config}'"  # the plan single-quotes every path and table name
        ready = f"trellara quarantine replay-ready --config {config} --xid {q_xid} --commit-lsn {q_lsn}"
        if commands(step(plan, "mark the exact boundary replay-ready")) != [ready]:
            raise CaptureFailure(f"replay-ready step is not {ready!r}: {step(plan, 'mark the exact boundary replay-ready')}")
        inspect = [c for c in commands(step(plan, "inspect")) if "inspect-transaction" in c]
        want_inspect = [f"trellara inspect-transaction --dir '{pair.log_dir}' --offset {o}" for o in offsets]
        if not offsets or inspect != want_inspect:
            raise CaptureFailure(f"inspect step {inspect} does not name the transaction's log offsets {offsets}")
        if f"trellara contract-test --config {config}" not in commands(step(plan, "contract test")):
            raise CaptureFailure("the contract test step does not run contract-test")
        if not any('\\d "public"."orders"' in c for c in commands(step(plan, "discover the schema on both sides"))):
            raise CaptureFailure("the discover step does not describe public.orders")

        # Follow the plan: inspect, re-snapshot (the data cannot be repaired in place here: the row
        # is gone), replay-ready, resume, verify.
        for c in inspect:
            shown = run_plan_command(c).stdout
            if xid not in shown:
                raise CaptureFailure(f"inspect-transaction does not show transaction {xid}: {shown[:500]}")
        snapshot = [c for c in commands(step(plan, "repair")) if c.startswith("trellara snapshot")]
        if snapshot != [f"trellara snapshot --config {config} --table 'public.orders' --force"]:
            raise CaptureFailure(f"the repair step does not re-snapshot public.orders: {step(plan, 'repair')}")
        run_plan_command(snapshot[0])
        run_plan_command(ready)
        resume = commands(step(plan, "resume"))
        if resume != [f"trellara apply --config {config}"]:
            raise CaptureFailure(f"resume step: {resume}")
        applier = subprocess.Popen([TRELLARA_BIN] + shlex.split(resume[0])[1:], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True)
        try:
            wait_for("the quarantined transaction to be resolved", lambda: target.query(
                f"SELECT state FROM trellara.quarantine WHERE flow = 'app' AND commit_lsn = '{q_lsn}'") == "resolved",
                90)
            source.psql("INSERT INTO public.orders VALUES (52, 'after the repair', 2)")
            wait_log_covers_source(source)
            wait_for("the transaction after the repair to be applied", lambda: target.query(
                "SELECT count(*) FROM public.orders WHERE id = 52") == "1", 90)
            verify = commands(step(plan, "verify"))
            if verify != [f"trellara verify --config {config} --table 'public.orders'"]:
                raise CaptureFailure(f"verify step: {verify}")
            print(run_plan_command(verify[0]).stdout.strip()[-500:])
        finally:
            if applier.poll() is None:
                applier.terminate()  # our own child, by its Popen handle
            _, err = applier.communicate(timeout=60)
            print(f"applier stopped: {err.strip()[-300:]}")
        assert_same_data(source, target, TABLES, "after following the repair plan")
        after = trellara("repair-plan", "--config", pair.config, expect=0).stdout
        if "nothing to repair" not in after:
            raise CaptureFailure(f"repair-plan after the repair: {after}")
        unreachable = trellara("repair-plan", "--config", pair.unreachable_config(), expect=2)
        print(f"unreachable target: exit 2: {unreachable.stderr.strip()}")
        pair.check_no_crashes()
    print("ok: repair_plan_scripts_recovery_from_a_quarantined_transaction")


def run_shell_line(command, psql_bin):
    """Runs one psql line of a repair plan exactly as printed (PG_BIN's psql for `psql`)."""
    argv = shlex.split(command)
    if argv[0] != "psql":
        raise CaptureFailure(f"not a psql command: {command}")
    print(f"$ {command}")
    result = subprocess.run([psql_bin, "-X"] + argv[1:], capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise CaptureFailure(f"{command} exited {result.returncode}: {result.stderr}")
    return result


class PlanShapeFailure(CaptureFailure):
    """The repair plan does not have the expected commands (checked after following it)."""


def check_schema_handoff_recovery(pair, env=None, outputs=None):
    """The schema handoff scenario's checks; `env` (TRELLARA_FAULTS naming a defect) goes to every
    trellara command, whose stderr (it reports the fault points that fired) is appended to
    `outputs`. The plan is followed as printed — its repair step's psql lines, contract-test, its
    trellara lines — before its shape is checked, so a plan that leaves a step out is caught by
    the convergence checks (verify, equal tables, the source's default), then by its shape."""
    from harness import PG_BIN
    psql_bin = os.path.join(PG_BIN, "psql")
    outputs = [] if outputs is None else outputs

    def run(*args, expect=None):
        result = trellara(*args, expect=expect, env=env)
        outputs.append(result.stderr)
        return result

    def follow(command, expect=0):
        result = run_plan_command(command, expect=expect, env=env)
        outputs.append(result.stderr)
        return result

    source, target = pair.source, pair.target
    source.psql("INSERT INTO public.orders SELECT g, 'order ' || g, g FROM generate_series(1, 40) g")
    wait_log_covers_source(source)
    run_apply(pair.config, 0, env)
    # The source adds a column with a default (existing rows get 'new' there, never on the target)
    # while Trellara's DDL event trigger is disabled (a DBA's maintenance script did it), and
    # writes it: no DDL record explains the new definition, so the target does not follow.
    source.psql("ALTER EVENT TRIGGER trellara_ddl_command_end DISABLE")
    source.psql("ALTER TABLE public.orders ADD COLUMN status text DEFAULT 'new'")
    source.psql("ALTER EVENT TRIGGER trellara_ddl_command_end ENABLE")
    source.psql("UPDATE public.orders SET status = 'paid' WHERE id = 3; INSERT INTO public.orders VALUES "
                "(41, 'with status', 1, 'open')")
    wait_log_covers_source(source)
    run_apply(pair.config, EXIT_BLOCKED, env)
    row = target.query("SELECT xid, commit_lsn, reason FROM trellara.quarantine WHERE flow = 'app' "
                       "AND state = 'quarantined'")
    print(f"quarantined: {row}")
    q_xid, q_lsn, reason = row.split("|")
    if reason != "schema_drift":
        raise CaptureFailure(f"the schema change was quarantined as {reason}")
    run("contract-test", "--config", pair.config, expect=1)

    plan = json.loads(run("repair-plan", "--config", pair.config, "--format", "json", expect=0).stdout)
    print(run("repair-plan", "--config", pair.config, expect=0).stdout)
    config = f"'{pair.config}'"
    repair = commands(step(plan, "repair"))
    want_alter = ('psql \'' + target.conninfo() + '\' -v ON_ERROR_STOP=1 -c '
                  '\'ALTER TABLE "public"."orders" ADD COLUMN "status" text\'')
    want_snapshot = f"trellara snapshot --config {config} --table 'public.orders' --force"
    shape = None
    if repair != [want_alter, want_snapshot]:
        shape = f"repair step is {repair}, expected {[want_alter, want_snapshot]}"
    discover = commands(step(plan, "discover the schema on both sides"))
    if len(discover) != 2 or any(not c.startswith("psql ") for c in discover):
        raise CaptureFailure(f"discover step: {discover}")
    if any(not c.startswith(("psql ", "trellara ")) for c in repair):
        raise CaptureFailure(f"the repair step has a command that is neither psql nor trellara: {repair}")

    # Follow the plan as printed: discover, the repair step's target statements, contract-test (now
    # clean), the repair step's trellara commands (the fresh snapshot handoff), replay-ready,
    # resume, verify.
    for c in discover:
        shown = run_shell_line(c, psql_bin).stdout
        if "status" not in shown and c == discover[0]:
            raise CaptureFailure(f"the source's \\d does not show the new column: {shown}")
    for c in repair:
        if c.startswith("psql "):
            run_shell_line(c, psql_bin)
    follow(commands(step(plan, "contract test"))[0], expect=0)
    for c in repair:
        if c.startswith("trellara "):
            follow(c)
    follow(commands(step(plan, "mark the exact boundary replay-ready"))[0])
    if commands(step(plan, "mark the exact boundary replay-ready")) != [
            f"trellara quarantine replay-ready --config {config} --xid {q_xid} --commit-lsn {q_lsn}"]:
        raise CaptureFailure("the replay-ready step does not name the exact boundary")
    resume = commands(step(plan, "resume"))
    applier = subprocess.Popen(with_test_defects([TRELLARA_BIN] + shlex.split(resume[0])[1:], env),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_for("the quarantined schema change to be resolved", lambda: target.query(
            f"SELECT state FROM trellara.quarantine WHERE flow = 'app' AND commit_lsn = '{q_lsn}'") == "resolved",
            90)
        source.psql("UPDATE public.orders SET status = 'shipped' WHERE id = 41")
        wait_log_covers_source(source)
        wait_for("the transaction after the repair to be applied", lambda: target.query(
            "SELECT status FROM public.orders WHERE id = 41") == "shipped", 90)
        print(follow(commands(step(plan, "verify"))[0]).stdout.strip()[-400:])
    finally:
        if applier.poll() is None:
            applier.terminate()  # our own child, by its Popen handle
        _, err = applier.communicate(timeout=60)
        outputs.append(err)
        print(f"applier stopped: {err.strip()[-300:]}")
    assert_same_data(source, target, TABLES, "after the schema handoff")
    if target.query("SELECT count(*) FROM public.orders WHERE status = 'new'") != "39":
        raise CaptureFailure("the existing rows did not get the source's default through the fresh handoff")
    if shape:
        raise PlanShapeFailure(shape)
    pair.check_no_crashes()


@scenario(seed_rows=("source_schema_handoff_recovery",), suite="operator_commands", invariants=(
    "a source schema change the target does not follow halts the flow at that transaction",
    "repair-plan scripts discover, contract-test, the target ALTER, a fresh snapshot handoff, replay-ready, "
    "resume and verify",
    "following it exactly: contract-test exits 0, the flow resumes, verify exits 0, tables equal"))
def source_schema_change_recovered_by_following_the_repair_plan():
    with ContractPair("schema-handoff", DDL, TABLES) as pair:
        check_schema_handoff_recovery(pair)
    print("ok: source_schema_change_recovered_by_following_the_repair_plan")


@scenario(suite="operator_commands", defect="repair_plan_omits_resnapshot",
          pairs_with="source_schema_change_recovered_by_following_the_repair_plan",
          fault_points=("defect.repair_plan_omits_resnapshot",),
          invariants=("following the plan with the defect leaves the target diverged: the convergence checks fail",))
def negative_control_repair_plan_omits_resnapshot_is_caught():
    # The paired defect of source_schema_handoff_recovery (core/src/report/repair_plan.cpp): the plan's
    # repair step leaves the re-snapshot out. Following it must fail the clean scenario's
    # convergence checks, not only its check of the plan's shape.
    point = "defect.repair_plan_omits_resnapshot"
    with ContractPair("schema-handoff-no-resnapshot", DDL, TABLES) as pair:
        caught = checks_fail_under_defect(point, "schema handoff", lambda env, outputs: check_schema_handoff_recovery(
            pair, env, outputs))
        if isinstance(caught, PlanShapeFailure):
            raise CaptureFailure(f"with {point} only the plan's shape check failed; following the plan did not "
                                 f"diverge: {caught}")
        print(f"{point} caught by a convergence check: {str(caught)[:400]}")


SCENARIOS = (contract_test_names_each_defect_and_exits_by_severity,
             repair_plan_scripts_recovery_from_a_quarantined_transaction,
             source_schema_change_recovered_by_following_the_repair_plan,
             negative_control_repair_plan_omits_resnapshot_is_caught)

if __name__ == "__main__":
    run_scenarios(SCENARIOS)
