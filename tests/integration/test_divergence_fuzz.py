#!/usr/bin/env python3
"""Integration: the seeded differential fuzzer for silent divergence (tests/integration/
divergence_fuzz.py; docs/apply.md "Divergence fuzzer").

  divergence_fuzzer_finds_no_silent_divergence
      for each seed of the budget: a generated schema on a fresh source, restored on a fresh target
      with `pg_dump --schema-only` (publications included), a flow FOR ALL TABLES, the generated
      workload with `trellara snapshot` of one to three tables running beside its second part (a
      snapshot that stops — a DDL during its copy — is run again, as its message says), applied
      by the seed's path (seed % 3: 0 one source transaction per target transaction, 1 a daemon
      applier running beside the second part and the snapshot, 2 grouped batches after the
      workload), then `trellara apply --until-caught-up`; then either every table equals the source's by
      its own rows (exit 0), or the flow halted at a quarantine naming its cause (exit 3). Exit 0
      with a difference is a silent divergence: the seed fails, named with its command.
  divergence_fuzzer_partitioned_finds_no_silent_divergence
      the same seeds with the flow partitioned (trellara.set_partitioning, 3 partitions) before the
      workload: each apply runs the partition appliers (`trellara apply --partition K
      --until-caught-up`), then the publisher; the same verdicts, and the partition appliers must
      have staged transaction parts (the flow really ran partitioned).

Budget: TRELLARA_FUZZ_SEEDS (default "1-5": CI's budget; seed 1 adds, uses and renames enum
labels, seeds 1 and 4 apply with a daemon beside the snapshot, seed 3 one transaction at a time,
seed 5 holds a partition tree and a type rename), TRELLARA_FUZZ_MINUTES (stop starting new
seeds after this many minutes; default unlimited), TRELLARA_FUZZ_ROUNDS (workload rounds, default
12). A long local run: TRELLARA_FUZZ_SEEDS=1-100000 TRELLARA_FUZZ_MINUTES=120 python3
tests/integration/test_divergence_fuzz.py. One seed again: TRELLARA_FUZZ_SEEDS=17.
"""
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import divergence_fuzz  # noqa: E402
from capture_support import CaptureFailure, TRELLARA_BIN, run_scenarios, scenario  # noqa: E402
from flow_pair import FlowPair  # noqa: E402
from harness import PG_BIN  # noqa: E402

EXIT_BLOCKED = 3


class FuzzPair(FlowPair):
    """A seed's pair: the generated schema on the source, restored on the target the way users
    restore it (`pg_dump --schema-only`, publications included, taken before the extension), and a
    flow `fz` FOR ALL TABLES. The work directory is readable by the postgres user."""

    def __init__(self, name, schema_sql, source_settings, apply_settings):
        super().__init__(name, source_sql=schema_sql, target_sql="", flow="fz", source_settings=source_settings,
                         apply_settings=apply_settings, shared_work_dir=True)

    def prepare(self):
        super().prepare()
        schema = subprocess.run([os.path.join(PG_BIN, "pg_dump"), "--schema-only", "--no-owner", "-h",
                                 self.source.socket_dir, "-p", str(self.source.port), "-U", "postgres", "postgres"],
                                capture_output=True, text=True, check=True).stdout
        self.target.psql(schema)


def seeds():
    spec = os.environ.get("TRELLARA_FUZZ_SEEDS", "1-5")
    out = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def own_rows(cluster, table):
    return cluster.query(f"SELECT count(*) || ' ' || coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '-') "
                         f"FROM ONLY {table} t")


def snapshot_beside_the_stream(config, tables, force=False):
    """Runs `trellara snapshot` of `tables` (chunks of 50 rows); None when every table ended
    handoff_ready, else what it said."""
    command = [TRELLARA_BIN, "snapshot", "--config", config, "--format", "json", "--chunk-rows", "50"]
    if force:
        command.append("--force")
    for table in tables:
        command += ["--table", table]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        return f"exit {done.returncode}: {done.stderr.strip()[-1200:]}"
    states = {t["table"]: t["state"] for t in json.loads(done.stdout)["tables"]}
    if any(state != "handoff_ready" for state in states.values()):
        return f"states {states}"
    return None


def apply_flow(pair, partitions):
    """`trellara apply --until-caught-up`; a partitioned flow's partition appliers first, each until
    it has staged what the log holds (exit 0, or 3 when it refused a transaction: the publisher
    then quarantines it)."""
    for k in range(partitions):
        staged = pair.apply("--partition", str(k), "--until-caught-up", expect=None, timeout_s=900)
        if staged.returncode not in (0, EXIT_BLOCKED):
            raise CaptureFailure(f"partition applier {k} exited {staged.returncode}: {staged.stderr[-1500:]}")
    return pair.apply(expect=None, timeout_s=900)


def run_seed(seed, rounds, partitions=0):
    gen = divergence_fuzz.Generator(seed, rounds)
    # Chunked transactions at a few hundred changes: the chunked paths (COPY runs, batched UPDATEs,
    # early apply) without tables so large that a table matched on every column (REPLICA IDENTITY
    # FULL, one scan per change) makes the seed slow.
    settings = {"trellara.chunk_changes": str(divergence_fuzz.CHUNK_CHANGES)}
    # The apply path of the seed: one source transaction per target transaction; a daemon
    # applier running beside the second part of the workload and the snapshot (early apply of
    # chunked transactions, groups as they come), then --until-caught-up; or grouped batches
    # (merged statements, superseded updates) after the workload.
    mode = ("one_at_a_time", "daemon", "grouped")[seed % 3] if not partitions else f"partitioned into {partitions}"
    with FuzzPair(f"fz{seed}{'p' if partitions else ''}", gen.schema_sql(), settings,
                  {"group_transactions": "off"} if mode == "one_at_a_time" else None) as pair:
        source, target, config, work = pair.source, pair.target, pair.config, pair.work.name
        if partitions:
            # The documented re-partitioning step (docs/partitioned.md), before the workload.
            source.query(f"SELECT trellara.set_partitioning('{pair.flow}', 'partitioned', {partitions})")
            source.query(f"SELECT trellara.stop_flow('{pair.flow}')")
            source.query(f"SELECT trellara.start_flow('{pair.flow}')")
        transactions = gen.workload()
        split, snapshot_tables = gen.snapshot_plan(len(transactions))
        psql = [os.path.join(PG_BIN, "psql"), "-X", "-q", "-h", source.socket_dir, "-p", str(source.port),
                "-U", "postgres", "-f"]
        for part, txs in (("1", transactions[:split]), ("2", transactions[split:])):
            with open(os.path.join(work, f"workload{part}.sql"), "w") as f:
                f.write("".join("BEGIN;\n" + ";\n".join(tx) + ";\nCOMMIT;\n" for tx in txs))
        ran = subprocess.run(psql + [os.path.join(work, "workload1.sql")], capture_output=True, text=True, timeout=600)
        source_errors = [line for line in ran.stderr.splitlines() if "ERROR" in line]
        # The rest of the workload runs while `trellara snapshot` copies some tables beside the stream.
        daemon = None
        if mode == "daemon":
            daemon_log = open(os.path.join(work, "daemon.log"), "w")
            daemon = subprocess.Popen([TRELLARA_BIN, "apply", "--config", config], stdout=daemon_log,
                                      stderr=subprocess.STDOUT, text=True)
        rest = subprocess.Popen(psql + [os.path.join(work, "workload2.sql")], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        snapshot_note = snapshot_beside_the_stream(config, snapshot_tables)
        _, rest_err = rest.communicate(timeout=600)
        source_errors += [line for line in rest_err.splitlines() if "ERROR" in line]
        if daemon is not None:
            if daemon.poll() is None:
                daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=120)
            daemon_log.close()
            with open(os.path.join(work, "daemon.log")) as f:
                progress = [line for line in f.read().splitlines() if line.startswith("apply flow=")]
            print(f"seed {seed}: daemon applier exited {daemon.returncode}: {progress[-1] if progress else '-'}")
        if snapshot_note is not None:
            # The snapshot refused or stopped while the workload ran: a DDL during its copy, or rows
            # the target's table cannot hold yet (a column the source widened, the DDL not applied
            # on the target yet). What a DBA does: let the applier bring the target's schema up to
            # date, then run the snapshot again.
            print(f"seed {seed}: snapshot of {snapshot_tables} beside the workload: {snapshot_note[:600]}; "
                  f"apply, then run it again")
            pair.wait_log_covers_source(timeout_s=300, fail_on_error=True)
            first = apply_flow(pair, partitions)
            if first.returncode == 0:
                again = snapshot_beside_the_stream(config, snapshot_tables)
                if again is not None and "--force" in again:
                    # Withheld from its handoff by a DDL during the copy: the message says to copy
                    # it again under the new schema with --force.
                    print(f"seed {seed}: {again[:400]}")
                    again = snapshot_beside_the_stream(config, snapshot_tables, force=True)
                if again is not None:
                    raise CaptureFailure(f"seed {seed}: trellara snapshot of {snapshot_tables} failed again after "
                                         f"the workload and an apply: {again}")
        pair.wait_log_covers_source(timeout_s=300, fail_on_error=True)
        applied = apply_flow(pair, partitions)
        pair.check_no_crashes()
        tables = gen.all_tables()
        if applied.returncode == EXIT_BLOCKED:
            reasons = target.query("SELECT string_agg(reason || ': ' || left(message, 1500), ' / ') FROM trellara.quarantine")
            if not reasons:
                raise CaptureFailure(f"seed {seed}: apply exited blocked without a quarantine row: {applied.stderr[-1500:]}")
            unexpected = not any(r in reasons for r in gen.expected_halts)
            print(f"seed {seed}: halted ({'unexpected: ' if unexpected else ''}{reasons[:1500]})")
            return "halted", reasons if unexpected else None
        if applied.returncode != 0:
            raise CaptureFailure(f"seed {seed}: trellara apply exited {applied.returncode}: {applied.stdout[-800:]} "
                                 f"{applied.stderr[-1500:]}")
        if partitions:
            staged = target.query("SELECT coalesce(sum(transactions), 0) || ' ' || count(*) FROM trellara.partition_checkpoints")
            transactions_staged, partition_rows = (int(v) for v in staged.split())
            if transactions_staged == 0 or partition_rows != partitions:
                raise CaptureFailure(f"seed {seed}: the flow was not applied in partitioned mode: {partition_rows} "
                                     f"partition checkpoint(s), {transactions_staged} transaction part(s) staged")
            print(f"seed {seed}: {transactions_staged} transaction parts staged by {partition_rows} partition appliers")
        differ = [t for t in tables if own_rows(source, t) != own_rows(target, t)]
        if differ:
            details = "; ".join(f"{t}: source {own_rows(source, t)}, target {own_rows(target, t)}" for t in differ)
            raise CaptureFailure(f"seed {seed} ({mode}): SILENT DIVERGENCE — apply exited 0 (caught up) but {len(differ)} "
                                 f"table(s) differ: {details}. Reproduce: TRELLARA_FUZZ_SEEDS={seed} "
                                 f"TRELLARA_FUZZ_ROUNDS={rounds} python3 tests/integration/test_divergence_fuzz.py")
        if gen.expected_halts:
            raise CaptureFailure(f"seed {seed}: the workload holds a statement that must halt the flow "
                                 f"({gen.expected_halts}) but apply exited 0 and called it caught up")
        print(f"seed {seed}: converged, {len(tables)} tables equal ({len(source_errors)} source statements failed "
              f"and rolled back; snapshot of {', '.join(snapshot_tables)} beside the stream; apply {mode})")
        return "converged", None


def fuzz(seed_list, partitions=0):
    minutes = float(os.environ.get("TRELLARA_FUZZ_MINUTES", "0") or 0)
    rounds = int(os.environ.get("TRELLARA_FUZZ_ROUNDS", "12"))
    began = time.monotonic()
    outcomes = {"converged": 0, "halted": 0}
    unexpected = []
    for seed in seed_list:
        if minutes and time.monotonic() - began > minutes * 60:
            break
        outcome, note = run_seed(seed, rounds, partitions)
        outcomes[outcome] += 1
        if note:
            unexpected.append((seed, note))
    print(f"fuzzer: {sum(outcomes.values())} seeds in {time.monotonic() - began:.0f}s: {outcomes}; halts not "
          f"expected by the generator: {len(unexpected)}")
    for seed, note in unexpected:
        print(f"  seed {seed}: {note[:300]}")


@scenario(suite="apply", invariants=("no seed ends caught up with a table that differs from the source",
                                     "a halted seed names its cause in a quarantine"))
def divergence_fuzzer_finds_no_silent_divergence():
    fuzz(seeds())


@scenario(suite="apply", invariants=("partitioned mode (3 partitions, partition appliers then the publisher) on the "
                                     "same generated schemas and workloads: no seed ends caught up with a table "
                                     "that differs from the source",
                                     "a halted seed names its cause in a quarantine"))
def divergence_fuzzer_partitioned_finds_no_silent_divergence():
    fuzz(seeds(), partitions=3)


if __name__ == "__main__":
    run_scenarios([divergence_fuzzer_finds_no_silent_divergence, divergence_fuzzer_partitioned_finds_no_silent_divergence])
