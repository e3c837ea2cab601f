#!/usr/bin/env python3
"""Fleet fan-in with real processes (docs/lake.md): four store databases, each a PostgreSQL cluster
with its own Trellara flow (FOR ALL TABLES), fanned in by `trellara lake fanin run` into one
Iceberg lake — Parquet data files, Avro manifests, metadata files, and the catalog in a fifth
cluster laid out as Iceberg's JDBC catalog. Epochs are 10-second windows of source commit time so
the scenarios run in real time.

Every published table is read back by independent readers, never by Trellara's code: the metadata
file parsed here, the manifest list and manifests by npm avsc (tests/lake/read_avro.mjs), the data
files by npm hyparquet (tests/lake/read_parquet.mjs); the change log read back is replayed per store
and must equal each store's table, row for row.

Scenarios:
  - fanin_publishes_complete_epochs_read_back_exactly: all four stores write (inserts, updates,
    deletes, a TRUNCATE-free mix); every epoch is published `complete` (4/4), `lake fanin verify`
    agrees, and the lake's change log replayed per store equals each store's table.
  - offline_store_publishes_with_gaps_then_late_store_completes: store-04's relay stopped while all
    four write: at the gap deadline the epochs are published `complete_with_gaps` naming store-04
    (3/4 complete, 1 missing; the snapshot summary names it too); store-04's relay started again, the
    same epochs become `complete` with counts recomputed (no double counting), verify agrees.
  - replayed_store_is_skipped_and_a_conflicting_duplicate_quarantines: store-01's log delivered
    again from its start (the fan-in's position reset): identical replays skipped, counts unchanged;
    then a transaction held in the catalog with another checksum than its store delivers: the epoch
    is quarantined naming the store, the LSN and both checksums, the run exits 3, and nothing more of
    that epoch is published.
  - catalog_commit_outcomes_are_settled_by_reading_the_catalog: the catalog commit's reply lost
    (lake.catalog_reply_lost): the epoch is pending_catalog_commit until the catalog, read, holds the
    receipt; the fan-in dies after recording a pending receipt (lake.after_pending_before_commit):
    the next run finds the pending receipt, finds the data files already written and commits them;
    the fan-in dies before an intake commit (lake.before_intake_commit): nothing lost or doubled.
  - negative control defect.lake_delete_files_on_unknown_commit: deleting the files of a commit
    whose reply was lost leaves the catalog naming missing files, which verify catches.
"""
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capture_support import (SOURCE_DIR, TRELLARA_BIN, CaptureFailure, checks_fail_under_defect,  # noqa: E402
                             record_faults_from_output, run_scenarios, scenario)
from flow_pair import FlowPair  # noqa: E402
from harness.cluster import Cluster, _free_port  # noqa: E402
from lake_readers import ensure_readers  # noqa: E402

READERS_DIR = os.path.join(SOURCE_DIR, "tests", "lake")
EPOCH_S = 10
STORES = 4
SCHEMA = """
CREATE TABLE items (id int PRIMARY KEY, note text, amount numeric(10,2));
"""


def num(value):
    """An integer as the readers print it: a number, digits, or {"bigint": digits}."""
    return int(value["bigint"]) if isinstance(value, dict) else int(value)


def node(script, path):
    done = subprocess.run(["node", os.path.join(READERS_DIR, script), path], capture_output=True, text=True)
    if done.returncode != 0:
        raise CaptureFailure(f"{script} could not read {path}: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


def table_name_of(metadata_location):
    return metadata_location.split("/metadata/")[0].rsplit("/", 1)[-1]


class Fleet:
    """Four store clusters with a flow each, a catalog cluster, a warehouse directory and lake.toml."""

    def __init__(self, name, gap_deadline="1h", warehouse=None, lake_settings=""):
        """warehouse: the [lake] warehouse (default: a directory in the fleet's temp directory);
        lake_settings: more [lake] lines (an S3 warehouse's s3_* settings, tests/integration/test_lake_s3.py)."""
        self.name, self.gap_deadline = name, gap_deadline
        self.warehouse_setting, self.lake_settings = warehouse, lake_settings
        self.stack = contextlib.ExitStack()

    def __enter__(self):
        ensure_readers()
        try:
            self.stores = []
            for k in range(STORES):
                pair = FlowPair(f"{self.name}-s{k + 1}", source_sql=SCHEMA, with_target=False,
                                source_settings={"trellara.progress_interval": "300"})
                self.stores.append(self.stack.enter_context(pair))
            self.catalog = self.stack.enter_context(Cluster(f"{self.name}-catalog", preload=False))
            self.work = tempfile.mkdtemp(prefix=f"trellara-{self.name}-")
            self.stack.callback(shutil.rmtree, self.work, True)
            self.warehouse = self.warehouse_setting or os.path.join(self.work, "warehouse")
            self.config = os.path.join(self.work, "lake.toml")
            with open(self.config, "w") as f:
                f.write(f'[lake]\nname = "fleet"\nwarehouse = "{self.warehouse}"\ncatalog = "{self.catalog.conninfo()}"\n'
                        f'epoch = "{EPOCH_S}s"\ngap_policy = "publish_with_gaps"\ngap_deadline = "{self.gap_deadline}"\n'
                        'commit_skew = "1s"\n' + self.lake_settings)
                for k, pair in enumerate(self.stores):
                    f.write(f'\n[[store]]\nname = "store-0{k + 1}"\nlog_directory = "{pair.log_dir}"\n')
        except BaseException:
            self.stack.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, *exc):
        return self.stack.__exit__(*exc)

    def write(self, k, first, count):
        """Store k: `count` transactions inserting ids first.., each also updating an earlier row;
        every fifth deletes one."""
        lines = []
        for i in range(first, first + count):
            sql = f"BEGIN; INSERT INTO items VALUES ({i}, 'store {k + 1} row {i}', {i}.{k + 1:02d});"
            if i > first:
                sql += f" UPDATE items SET amount = amount + 1, note = note || '+' WHERE id = {i - 1};"
            if i % 5 == 4:
                sql += f" DELETE FROM items WHERE id = {i - 3};"
            lines.append(sql + " COMMIT;")
        self.stores[k].source.psql("\n".join(lines))

    def tick(self, stores=None):
        """A commit on each store (no change captured): WAL moves on, so its relay writes a progress
        marker carrying the store's clock."""
        for k in (range(STORES) if stores is None else stores):
            self.stores[k].source.query("SELECT txid_current()")

    def run(self, *extra, expect=(0,), env=None, defects=False, outputs=None):
        """outputs: a list the run's stderr is appended to (before its exit code is checked)."""
        argv = [TRELLARA_BIN] + (["--enable-test-defects"] if defects else []) + \
               ["lake", "fanin", "run", "--config", self.config, "--until-caught-up", *extra]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
        if outputs is not None:
            outputs.append(done.stderr)
        if expect is not None and done.returncode not in expect:
            raise CaptureFailure(f"lake fanin run exited {done.returncode}: {done.stdout[-1000:]} {done.stderr[-3000:]}")
        return done

    def plan(self):
        done = subprocess.run([TRELLARA_BIN, "lake", "plan", "--config", self.config, "--format", "json"],
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise CaptureFailure(f"lake plan exited {done.returncode}: {done.stderr[-2000:]}")
        return json.loads(done.stdout)

    def verify(self):
        return subprocess.run([TRELLARA_BIN, "lake", "fanin", "verify", "--config", self.config, "--format", "json"],
                              capture_output=True, text=True, timeout=300)

    def set_gap_deadline(self, value):
        """The operator changes [lake] gap_deadline (read by every run of the fan-in)."""
        with open(self.config) as f:
            text = f.read()
        with open(self.config, "w") as f:
            f.write(text.replace(f'gap_deadline = "{self.gap_deadline}"', f'gap_deadline = "{value}"'))
        self.gap_deadline = value

    def wait_stores_complete(self, stores, timeout_s=300):
        """Ticks `stores` and runs the fan-in until, in every epoch holding transactions, exactly
        those stores are complete (the others missing) — on the fan-in's own evidence, not the clock."""
        names = {f"store-0{k + 1}" for k in stores}
        deadline = time.monotonic() + timeout_s
        while True:
            self.tick(stores)
            self.run(expect=(0,))
            epochs = [e for e in self.plan()["epochs"] if any(s["transactions"] for s in e["stores"])]
            if epochs and all({s["store"] for s in e["stores"] if s["state"] == "complete"} == names for e in epochs):
                return
            if time.monotonic() > deadline:
                raise CaptureFailure(f"timed out waiting for {sorted(names)} to be complete: "
                                     f"{[(e['epoch'], e['completeness']) for e in epochs]}")
            time.sleep(0.3)

    def settle(self, states, stores=None, timeout_s=300, env=None, defects=False, outputs=None):
        """Ticks the stores and runs the fan-in until every epoch holding transactions is in one of
        `states`; returns the plan."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.tick(stores)
            done = self.run(env=env, defects=defects, expect=None)
            if outputs is not None:
                outputs.append(done.stderr)
            if done.returncode not in (0, 3):
                raise CaptureFailure(f"lake fanin run exited {done.returncode}: {done.stderr[-3000:]}")
            plan = self.plan()
            epochs = [e for e in plan["epochs"] if any(s["transactions"] for s in e["stores"])]
            if epochs and all(e["state"] in states for e in epochs):
                return plan
            if time.monotonic() > deadline:
                raise CaptureFailure(f"timed out waiting for every epoch to be {states}: "
                                     f"{[(e['epoch'], e['state'], e['waits_for']) for e in epochs]}")
            time.sleep(0.5)

    def lake_rows(self, table="public__items"):
        """The table's current snapshot read back by the independent readers: (summary, rows)."""
        location = self.catalog.query("SELECT metadata_location FROM iceberg_tables WHERE catalog_name = 'fleet' "
                                      f"AND table_namespace = 'fleet' AND table_name = '{table}'")
        if not location:
            raise CaptureFailure(f"the catalog has no table {table}")
        with open(location) as f:
            metadata = json.load(f)
        current = next(s for s in metadata["snapshots"] if s["snapshot-id"] == metadata["current-snapshot-id"])
        rows = []
        for manifest in node("read_avro.mjs", current["manifest-list"])["records"]:
            for entry in node("read_avro.mjs", manifest["manifest_path"])["records"]:
                data = node("read_parquet.mjs", entry["data_file"]["file_path"])
                if num(data["footer"]["num_rows"]) != num(entry["data_file"]["record_count"]):
                    raise CaptureFailure(f"{entry['data_file']['file_path']}: {data['footer']['num_rows']} rows, its "
                                         f"manifest says {entry['data_file']['record_count']}")
                rows.extend(data["rows"])
        # The whole table again through read_iceberg.mjs, which reads it with a second reader, npm
        # icebird (its own Avro decoder and walk of the snapshot), and compares the two.
        table = node("read_iceberg.mjs", location)
        if len(table["rows"]) != len(rows) or table.get("icebird_agrees") is not True:
            raise CaptureFailure(f"{table_name_of(location)}: read_iceberg.mjs read {len(table['rows'])} rows (avsc + "
                                 f"hyparquet: {len(rows)}), icebird "
                                 f"{table.get('icebird_error') or ('agrees' if table.get('icebird_agrees') else 'disagrees')}")
        return current["summary"], rows

    def view_rows(self, kind, table="public__items"):
        """View table <table>__<kind> (current or history) read by read_iceberg.mjs (avsc + hyparquet,
        and icebird, which must agree): (summary of its current snapshot, rows), or None when the
        catalog has no such table."""
        location = self.catalog.query("SELECT metadata_location FROM iceberg_tables WHERE catalog_name = 'fleet' "
                                      f"AND table_namespace = 'fleet' AND table_name = '{table}__{kind}'")
        if not location:
            return None
        read = node("read_iceberg.mjs", location)
        if read.get("icebird_agrees") is not True:
            raise CaptureFailure(f"{table}__{kind}: icebird {read.get('icebird_error') or 'disagrees'} with avsc + hyparquet")
        current = next(s for s in read["snapshots"] if s["snapshot_id"] == read["current_snapshot_id"])
        return current["summary"], read["rows"]

    def assert_lake_equals_stores(self, label, stores=range(STORES)):
        """Replays the lake's change log per store: it must equal each store's items, row for row."""
        summary, rows = self.lake_rows()
        for k in stores:
            source = self.stores[k].source.query(
                "SELECT coalesce(string_agg(id || '|' || note || '|' || amount, ',' ORDER BY id), '') FROM items")
            state = {}
            mine = [r for r in rows if r["_source"] == f"store-0{k + 1}"]
            lsn = lambda text: tuple(int(x, 16) for x in text.split("/"))  # noqa: E731
            for r in sorted(mine, key=lambda r: (lsn(r["_commit_lsn"]), num(r["_xid"]), num(r["_position"]))):
                if r["_op"] in ("insert", "update"):
                    state[int(r["id"])] = f"{r['id']}|{r['note']}|{r['amount']}"
                elif r["_op"] == "delete":
                    state.pop(int(r["id"]), None)
            replayed = ",".join(state[i] for i in sorted(state))
            if replayed != source:
                raise CaptureFailure(f"{label}: store-0{k + 1}'s change log in the lake replays to {replayed[:300]!r}, the "
                                     f"store holds {source[:300]!r}")
        print(f"{label}: the lake's change log ({len(rows)} rows) replays to every store's table; current snapshot "
              f"{summary.get('trellara.epoch')} {summary.get('trellara.epoch-state')}")
        return summary, rows


def epoch_index(name):
    """"epoch-00000000a1b2c3d4" -> its index."""
    return int(name.split("-", 1)[1], 16)


def assert_views_stop_before_incomplete_epochs(fleet, plan, label):
    """No view reaches an epoch that is not `complete`, nor any epoch after one: not the horizon the
    plan shows, not the horizon each view table records, not the view tables as an independent
    reader reads them from the catalog (their snapshot summary, and no row's commit time in or after
    the first epoch that is not complete)."""
    incomplete = [e["index"] for e in plan["epochs"] if e["state"] != "complete"]
    if not incomplete:
        raise CaptureFailure(f"{label}: expected an epoch that is not complete: {[e['state'] for e in plan['epochs']]}")
    first = min(incomplete)
    states = {e["epoch"]: e["state"] for e in plan["epochs"]}
    views = plan["views"]
    if views["through_epoch"] is not None and epoch_index(views["through_epoch"]) >= first:
        raise CaptureFailure(f"{label}: lake plan's views reach {views['through_epoch']}, past {plan['epochs'][0]['epoch']}"
                             f"..: {states}")
    for t in views["tables"]:
        if t["through_epoch"] is not None and epoch_index(t["through_epoch"]) >= first:
            raise CaptureFailure(f"{label}: view table {t['table']} is built through {t['through_epoch']} "
                                 f"({states.get(t['through_epoch'])}); epochs: {states}")
    for kind, time_column in (("current", "_commit_time"), ("history", "_valid_from_time")):
        got = fleet.view_rows(kind)
        if got is None:
            continue
        summary, rows = got
        through = summary.get("trellara.views-through-epoch", "none")
        if through != "none" and epoch_index(through) >= first:
            raise CaptureFailure(f"{label}: public__items__{kind}'s current snapshot is built through {through} "
                                 f"({states.get(through)})")
        late = [r for r in rows if num(r[time_column]) // (EPOCH_S * 1000000) >= first]
        if late:
            raise CaptureFailure(f"{label}: public__items__{kind} holds {len(late)} row(s) of epochs from "
                                 f"{first:#x} on, which is not complete: {late[:2]}")
    print(f"{label}: the views stop before the first epoch that is not complete ({states}); horizon "
          f"{views['through_epoch']}")


def assert_views_equal_stores(fleet, label):
    """Every epoch complete: the views reach the last one; public__items__current, read by an
    independent reader, equals each store's items (rows per source), and the history's current
    versions are exactly those rows."""
    plan = fleet.plan()
    last = max(e["index"] for e in plan["epochs"] if any(s["transactions"] for s in e["stores"]))
    views = plan["views"]
    if views["through_epoch"] is None or epoch_index(views["through_epoch"]) < last:
        raise CaptureFailure(f"{label}: every epoch complete, but the views reach {views['through_epoch']} "
                             f"(last epoch {last:#x}): {views}")
    current = fleet.view_rows("current")
    history = fleet.view_rows("history")
    if current is None or history is None:
        raise CaptureFailure(f"{label}: the catalog has no public__items__current / __history: {views}")
    (summary, rows), (_hsummary, versions) = current, history
    if summary.get("trellara.views-through-epoch") != views["through_epoch"]:
        raise CaptureFailure(f"{label}: public__items__current is built through "
                             f"{summary.get('trellara.views-through-epoch')}, the horizon is {views['through_epoch']}")
    line = lambda r: f"{r['id']}|{r['note']}|{r['amount']}"  # noqa: E731
    for k in range(STORES):
        store = f"store-0{k + 1}"
        source = fleet.stores[k].source.query(
            "SELECT coalesce(string_agg(id || '|' || note || '|' || amount, ',' ORDER BY id), '') FROM items")
        mine = sorted((r for r in rows if r["_source"] == store), key=lambda r: int(r["id"]))
        got = ",".join(line(r) for r in mine)
        if got != source:
            raise CaptureFailure(f"{label}: public__items__current for {store} holds {got[:300]!r}, the store holds "
                                 f"{source[:300]!r}")
    now = sorted((r["_source"], int(r["id"]), line(r)) for r in versions if r["_is_current"])
    if now != sorted((r["_source"], int(r["id"]), line(r)) for r in rows):
        raise CaptureFailure(f"{label}: public__items__history's current versions are not public__items__current")
    ended = [r for r in versions if not r["_is_current"]]
    if not ended or any(r["_valid_to_lsn"] is None for r in ended) or any(r["_valid_to_lsn"] is not None
                                                                          for r in versions if r["_is_current"]):
        raise CaptureFailure(f"{label}: public__items__history's ended versions: {ended[:3]}")
    print(f"{label}: public__items__current ({len(rows)} rows) equals every store's items at the horizon "
          f"{views['through_epoch']}; __history holds {len(versions)} versions ({len(ended)} ended)")


def served_metrics(fleet, want_ready):
    """A fan-in daemon with --metrics-listen: (GET /readyz status and body, GET /metrics body) once
    /readyz says `want_ready` (a status code); the daemon is stopped (SIGTERM) before returning."""
    port = _free_port()
    daemon = subprocess.Popen([TRELLARA_BIN, "lake", "fanin", "run", "--config", fleet.config, "--metrics-listen",
                               f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
                    ready = (r.status, r.read().decode())
            except urllib.error.HTTPError as e:
                ready = (e.code, e.read().decode())
            except OSError:
                ready = (None, "")
            if ready[0] == want_ready:
                break
            if time.monotonic() > deadline or daemon.poll() is not None:
                raise CaptureFailure(f"/readyz of the fan-in never answered {want_ready} (last {ready}); "
                                     f"{daemon.stderr.read()[-1500:] if daemon.poll() is not None else ''}")
            time.sleep(0.3)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            body = r.read().decode()
        return ready, body
    finally:
        if daemon.poll() is None:
            daemon.terminate()  # our own child, by its Popen handle
        daemon.communicate(timeout=120)


def wait_epoch_start():
    """Until an epoch has just begun (this host's clock, as the stores' are): writes made right
    after fall into one epoch."""
    while time.time() % EPOCH_S > 0.3:
        time.sleep(0.05)


def wait_epoch_passed(fleet, k=0):
    """Until the epoch of store k's last commit has ended (plus the allowed commit skew)."""
    last = float(fleet.stores[k].source.query("SELECT extract(epoch FROM now())"))
    end = (int(last) // EPOCH_S + 1) * EPOCH_S + 1.5
    while time.time() < end:
        time.sleep(0.2)


def require_verify(fleet, label):
    v = fleet.verify()
    if v.returncode != 0:
        raise CaptureFailure(f"{label}: lake fanin verify exited {v.returncode}: {v.stdout[-2000:]} {v.stderr[-1000:]}")
    report = json.loads(v.stdout)
    print(f"{label}: verify agrees ({len(report['epochs'])} epochs, {report['data_files_checked']} data files)")
    return report


@scenario(suite="lake",
          invariants=("every epoch is published complete (4/4) once every store's progress passed its end",
                      "a fan-in daemon serves GET /metrics (epochs by state, every store) and GET /readyz 200",
                      "lake fanin verify: counts against the dedup set and the stores' logs, every file present",
                      "the lake's change log, read by npm avsc and hyparquet and replayed per store, equals each "
                      "store's table"))
def fanin_publishes_complete_epochs_read_back_exactly():
    with Fleet("lake-complete") as fleet:
        for k in range(STORES):
            fleet.write(k, 1, 12)
        wait_epoch_passed(fleet)
        plan = fleet.settle({"complete"})
        for e in plan["epochs"]:
            if e["completeness"] != "4/4 complete, 0 missing, 0 quarantined":
                raise CaptureFailure(f"{e['epoch']}: {e['completeness']}")
        require_verify(fleet, "complete")
        ready, body = served_metrics(fleet, 200)
        if 'trellara_lake_epochs{lake="fleet",state="complete"} ' not in body or \
                'trellara_lake_epochs{lake="fleet",state="complete"} 0' in body or "store=\"store-04\"" not in body:
            raise CaptureFailure(f"GET /metrics of the fan-in: {body[:1500]}")
        print(f"GET /readyz: {ready}; /metrics names every store and {len(plan['epochs'])} complete epoch(s)")
        summary, _rows = fleet.assert_lake_equals_stores("complete")
        if summary.get("trellara.epoch-state") != "complete":
            raise CaptureFailure(f"the current snapshot's summary says {summary}")
        print("ok: fanin_publishes_complete_epochs_read_back_exactly")


def gaps_run(fleet, env=None, defects=False, outputs=None):
    """Store-04's relay stopped while all four write; the epochs published complete_with_gaps; the
    views must not reach them. Returns the plan."""
    fleet.stores[3].source.query("SELECT trellara.stop_flow('app')")
    wait_epoch_start()
    for k in range(STORES):
        fleet.write(k, 1, 8)
    wait_epoch_passed(fleet)
    # Stores 1-3 through the epoch on the fan-in's evidence (the deadline an hour away), then the
    # operator shortens the deadline: the next run publishes without exactly store-04.
    fleet.wait_stores_complete(range(3))
    fleet.set_gap_deadline("1s")
    plan = fleet.settle({"complete_with_gaps"}, stores=range(3), env=env, defects=defects, outputs=outputs)
    for e in plan["epochs"]:
        if e["missing"] != ["store-04"] or e["completeness"] != "3/4 complete, 1 missing, 0 quarantined":
            raise CaptureFailure(f"{e['epoch']} with store-04 stopped: {e['completeness']}, missing {e['missing']}")
    assert_views_stop_before_incomplete_epochs(fleet, plan, "with gaps")
    return plan


def late_store_run(fleet, env=None, defects=False, outputs=None):
    """Store-04's relay started again after gaps_run: the same epochs become complete, their counts
    the dedup set's; verify agrees."""
    fleet.stores[3].source.query("SELECT trellara.start_flow('app')")
    plan = fleet.settle({"complete"}, env=env, defects=defects, outputs=outputs)
    for e in plan["epochs"]:
        own = sum(s["transactions"] for s in e["stores"])
        if e["published_transactions"] != own or e["completeness"] != "4/4 complete, 0 missing, 0 quarantined":
            raise CaptureFailure(f"{e['epoch']} after the late store: {e['completeness']}, published "
                                 f"{e['published_transactions']} transactions, its dedup set holds {own}")
    print(f"after the late store: complete {({e['epoch']: e['published_transactions'] for e in plan['epochs']})}")
    require_verify(fleet, "after the late store")
    return plan


@scenario(seed_rows=("fleet_fanin_offline_stores_publish_with_gaps", "fleet_fanin_late_store_recovery"), suite="lake",
          invariants=("an epoch whose store is unreachable past the gap deadline is published complete_with_gaps "
                      "naming it (plan and snapshot summary)",
                      "the late store's transactions are appended to the same epochs, which become complete; the "
                      "counts are the dedup set's (no double counting)",
                      "verify agrees and the lake replays to every store's table"))
def offline_store_publishes_with_gaps_then_late_store_completes():
    with Fleet("lake-gaps") as fleet:
        plan = gaps_run(fleet)
        summary, _ = fleet.assert_lake_equals_stores("with gaps", stores=range(3))
        if summary.get("trellara.missing-stores") != '{"store-04"}' or summary.get("trellara.epoch-state") != "complete_with_gaps":
            raise CaptureFailure(f"the snapshot summary of an epoch published with gaps: {summary}")
        gap_counts = {e["epoch"]: e["published_transactions"] for e in plan["epochs"]}
        late_store_run(fleet)
        print(f"published with gaps {gap_counts}")
        fleet.assert_lake_equals_stores("after the late store")
        assert_views_equal_stores(fleet, "after the late store")
        print("ok: offline_store_publishes_with_gaps_then_late_store_completes")


@scenario(suite="lake", defect="defect.lake_views_past_incomplete_epoch",
          pairs_with="offline_store_publishes_with_gaps_then_late_store_completes",
          invariants=("a fan-in whose views take an epoch published complete_with_gaps as complete builds them past "
                      "the horizon: the views' horizon and rows, read from the catalog, catch it",))
def negative_control_views_past_an_incomplete_epoch_are_caught():
    with Fleet("lake-views-defect") as fleet:
        def run_checks(env, outputs):
            gaps_run(fleet, env=env, defects=True, outputs=outputs)
        caught = checks_fail_under_defect("defect.lake_views_past_incomplete_epoch", "views", run_checks)
        print(f"caught: {str(caught)[:300]}")
        print("ok: negative_control_views_past_an_incomplete_epoch_are_caught")


def replay_run(fleet, env=None, defects=False, outputs=None):
    """Four stores published complete; store-01's log delivered again: replays skipped, counts
    unchanged, verify agrees, the views equal the stores."""
    for k in range(STORES):
        fleet.write(k, 1, 6)
    wait_epoch_passed(fleet)
    plan = fleet.settle({"complete"}, env=env, defects=defects, outputs=outputs)
    before = {e["epoch"]: (e["published_transactions"], e["published_changes"]) for e in plan["epochs"]}
    fleet.catalog.query("UPDATE trellara_lake.stores SET next_offset = 0 WHERE store = 'store-01'")
    replay = fleet.run(env=env, defects=defects, outputs=outputs)
    if "replays_skipped=" not in replay.stderr or " replays_skipped=0 " in replay.stderr.replace("\n", " "):
        raise CaptureFailure(f"the replayed log of store-01 was not counted as skipped replays: {replay.stderr[-2000:]}")
    after = {e["epoch"]: (e["published_transactions"], e["published_changes"]) for e in fleet.plan()["epochs"]}
    if after != before:
        raise CaptureFailure(f"counts changed by a replay: {before} -> {after}")
    require_verify(fleet, "after the replay")
    assert_views_equal_stores(fleet, "after the replay")


def conflict_run(fleet, env=None, defects=False, outputs=None):
    """After replay_run: a transaction the catalog holds with another checksum than store-02 delivers
    quarantines its epoch (exit 3), naming the store, the LSN and both checksums; the views are
    withdrawn from it. Returns (the victim's LSN, xid, epoch)."""
    victim = fleet.catalog.query("SELECT commit_lsn || ' ' || xid || ' ' || epoch FROM trellara_lake.transactions "
                                 "WHERE store = 'store-02' ORDER BY commit_lsn LIMIT 1").split()
    fleet.catalog.query(f"UPDATE trellara_lake.transactions SET checksum = repeat('ab', 32) WHERE store = 'store-02' "
                        f"AND commit_lsn = '{victim[0]}'")
    fleet.catalog.query("UPDATE trellara_lake.stores SET next_offset = 0 WHERE store = 'store-02'")
    blocked = fleet.run(expect=(3,), env=env, defects=defects, outputs=outputs)
    quarantined = [e for e in fleet.plan()["epochs"] if e["state"] == "quarantined"]
    if len(quarantined) != 1 or "store-02" not in quarantined[0]["quarantine"] or victim[0] not in \
            quarantined[0]["quarantine"] or "abababab" not in quarantined[0]["quarantine"]:
        raise CaptureFailure(f"the conflicting duplicate did not quarantine its epoch naming store, LSN and both "
                             f"checksums: {quarantined} {blocked.stderr[-1500:]}")
    print(f"quarantined: {quarantined[0]['epoch']} {quarantined[0]['completeness']}: {quarantined[0]['quarantine'][:300]}")
    # The views were built through the epoch before its quarantine; they are withdrawn from it at once.
    assert_views_stop_before_incomplete_epochs(fleet, fleet.plan(), "quarantined")
    return victim


@scenario(seed_rows=("fleet_fanin_duplicate_store_replay", "fleet_fanin_conflicting_duplicate_quarantine"),
          suite="lake",
          invariants=("a store's log delivered again is skipped transaction by transaction: counts unchanged",
                      "the same transaction with another checksum quarantines its epoch, naming the store, the LSN "
                      "and both checksums; fanin run exits 3 and nothing more of that epoch is published",
                      "GET /readyz of a fan-in with a quarantined epoch: 503 lake_epoch_quarantined"))
def replayed_store_is_skipped_and_a_conflicting_duplicate_quarantines():
    with Fleet("lake-replay") as fleet:
        replay_run(fleet)
        victim = conflict_run(fleet)
        ready, body = served_metrics(fleet, 503)
        if "lake_epoch_quarantined" not in ready[1] or 'trellara_lake_epochs{lake="fleet",state="quarantined"} 1' not in body:
            raise CaptureFailure(f"with a quarantined epoch: GET /readyz {ready}, /metrics {body[:1000]}")
        print(f"GET /readyz with the epoch quarantined: {ready}")
        published_at = fleet.catalog.query(f"SELECT published_at FROM trellara_lake.epochs WHERE epoch = {victim[2]}")
        fleet.write(1, 100, 2)  # more for store-02: a later epoch, never the quarantined one
        wait_epoch_passed(fleet, 1)
        fleet.tick()
        fleet.run(expect=(3,))
        if fleet.catalog.query(f"SELECT published_at FROM trellara_lake.epochs WHERE epoch = {victim[2]}") != published_at:
            raise CaptureFailure("the quarantined epoch was published again")
        print("ok: replayed_store_is_skipped_and_a_conflicting_duplicate_quarantines")


def catalog_outcomes_run(fleet, env=None, defects=False, outputs=None):
    def faulted(spec):
        return dict(env or os.environ, TRELLARA_FAULTS=",".join(x for x in (spec, (env or {}).get("TRELLARA_FAULTS", "")) if x))
    for k in range(STORES):
        fleet.write(k, 1, 5)
    wait_epoch_passed(fleet)
    fleet.tick()
    # Each fault below is run until it has fired (a run with nothing to do for it never reaches it):
    # every run's stderr is kept and its fault lines recorded.
    def until_fired(spec, event, expect):
        deadline = time.monotonic() + 300
        while True:
            fleet.tick()
            done = fleet.run(env=faulted(spec), defects=defects, expect=None)
            record_faults_from_output(done.stderr)
            if outputs is not None:
                outputs.append(done.stderr)
            if done.returncode not in expect:
                raise CaptureFailure(f"lake fanin run with {spec} exited {done.returncode}: {done.stderr[-2000:]}")
            if event in done.stderr:
                return done
            if time.monotonic() > deadline:
                raise CaptureFailure(f"{spec} never fired in 300 s: {done.stderr[-1500:]}")
            time.sleep(0.3)
    # Dies before an intake commit: nothing of that batch was admitted.
    until_fired("lake.before_intake_commit:1:error", "fault point lake.before_intake_commit", (0, 1))
    # A catalog commit's reply is lost: the run settles it by reading the catalog.
    lost = until_fired("lake.catalog_reply_lost:1:error", "event=catalog_reply_lost", (0,))
    plan = fleet.settle({"complete"}, env=env, defects=defects, outputs=outputs)
    text = "".join(outputs or []) + lost.stderr
    if "event=catalog_reply_lost" in text and "catalog_holds_receipt=true" not in text:
        raise CaptureFailure(f"a commit whose reply was lost was not settled by reading the catalog: {text[-2000:]}")
    # More rows, and the fan-in dies after recording the pending receipt of their epoch.
    for k in range(STORES):
        fleet.write(k, 50, 3)
    wait_epoch_passed(fleet)
    fleet.tick()
    pending = until_fired("lake.after_pending_before_commit:1:error", "lake.after_pending_before_commit", (0, 1))
    held = fleet.catalog.query("SELECT count(*) FROM trellara_lake.epochs WHERE pending_receipt IS NOT NULL")
    if held != "1":
        raise CaptureFailure(f"after dying between the pending receipt and the commit, {held} epochs hold a pending "
                             f"receipt: {pending.stderr[-1500:]}")
    plan = fleet.settle({"complete"}, env=env, defects=defects, outputs=outputs)
    return plan


@scenario(seed_rows=("qualification_object_store_success_catalog_timeout",), suite="lake",
          fault_points=("lake.catalog_reply_lost", "lake.after_pending_before_commit", "lake.before_intake_commit"),
          invariants=("a catalog commit whose reply is lost is pending_catalog_commit until the catalog, read, holds "
                      "its receipt",
                      "a fan-in that died after recording a pending receipt commits the same files on its next run "
                      "(found at their addresses); no file deleted",
                      "a fan-in that died before an intake commit loses and doubles nothing",
                      "verify agrees and the lake replays to every store's table"))
def catalog_commit_outcomes_are_settled_by_reading_the_catalog():
    with Fleet("lake-catalog") as fleet:
        outputs = []
        catalog_outcomes_run(fleet, outputs=outputs)
        text = "".join(outputs)
        if "catalog_holds_receipt=true" not in text:
            raise CaptureFailure(f"the lost reply was never settled by reading the catalog: {text[-2500:]}")
        if "catalog_holds_receipt=false" not in text or "event=data_file_found" not in text:
            raise CaptureFailure(f"the pending receipt was not committed again with the files already written: {text[-2500:]}")
        require_verify(fleet, "after the catalog faults")
        fleet.assert_lake_equals_stores("after the catalog faults")
        print("ok: catalog_commit_outcomes_are_settled_by_reading_the_catalog")


@scenario(suite="lake", defect="defect.lake_delete_files_on_unknown_commit",
          pairs_with="catalog_commit_outcomes_are_settled_by_reading_the_catalog",
          invariants=("a fan-in that deletes the files of a commit whose reply was lost leaves the catalog naming "
                      "missing files: verify catches it",))
def negative_control_deleting_files_of_an_unknown_commit_is_caught():
    with Fleet("lake-delete-defect") as fleet:
        def run_checks(env, outputs):
            catalog_outcomes_run(fleet, env=env, defects=True, outputs=outputs)
            require_verify(fleet, "with the files of an unknown commit deleted")
        caught = checks_fail_under_defect("defect.lake_delete_files_on_unknown_commit", "lake verify", run_checks)
        print(f"caught: {str(caught)[:300]}")
        print("ok: negative_control_deleting_files_of_an_unknown_commit_is_caught")


@scenario(suite="lake", defect="defect.lake_count_by_increment",
          pairs_with="offline_store_publishes_with_gaps_then_late_store_completes",
          invariants=("a fan-in that adds a late store's counts to an epoch's published counts (incremented, not "
                      "recomputed from the dedup set) double counts the stores published before: the plan's counts "
                      "against the dedup set and verify catch it",))
def negative_control_late_store_counts_incremented_are_caught():
    with Fleet("lake-late-count-defect") as fleet:
        gaps_run(fleet)
        def run_checks(env, outputs):
            late_store_run(fleet, env=env, defects=True, outputs=outputs)
        caught = checks_fail_under_defect("defect.lake_count_by_increment", "late store counts", run_checks)
        print(f"caught: {str(caught)[:300]}")
        print("ok: negative_control_late_store_counts_incremented_are_caught")


@scenario(suite="lake", defect="defect.lake_count_by_increment",
          pairs_with="replayed_store_is_skipped_and_a_conflicting_duplicate_quarantines",
          invariants=("a fan-in that counts a replayed transaction again in its published epoch changes the epoch's "
                      "counts: the replay checks (counts unchanged, verify) catch it",))
def negative_control_replay_counted_again_is_caught():
    with Fleet("lake-replay-count-defect") as fleet:
        def run_checks(env, outputs):
            replay_run(fleet, env=env, defects=True, outputs=outputs)
        caught = checks_fail_under_defect("defect.lake_count_by_increment", "replay counts", run_checks)
        print(f"caught: {str(caught)[:300]}")
        print("ok: negative_control_replay_counted_again_is_caught")


@scenario(suite="lake", defect="defect.lake_publish_on_conflict",
          pairs_with="replayed_store_is_skipped_and_a_conflicting_duplicate_quarantines",
          invariants=("a fan-in that publishes an epoch a conflicting duplicate quarantined: the quarantine checks "
                      "(exit 3, the epoch quarantined naming store, LSN and checksums, views withdrawn) catch it",))
def negative_control_publishing_a_quarantined_epoch_is_caught():
    with Fleet("lake-conflict-defect") as fleet:
        replay_run(fleet)
        def run_checks(env, outputs):
            conflict_run(fleet, env=env, defects=True, outputs=outputs)
        caught = checks_fail_under_defect("defect.lake_publish_on_conflict", "quarantine", run_checks)
        print(f"caught: {str(caught)[:300]}")
        print("ok: negative_control_publishing_a_quarantined_epoch_is_caught")


if __name__ == "__main__":
    run_scenarios([fanin_publishes_complete_epochs_read_back_exactly,
                   offline_store_publishes_with_gaps_then_late_store_completes,
                   replayed_store_is_skipped_and_a_conflicting_duplicate_quarantines,
                   catalog_commit_outcomes_are_settled_by_reading_the_catalog,
                   negative_control_deleting_files_of_an_unknown_commit_is_caught,
                   negative_control_views_past_an_incomplete_epoch_are_caught,
                   negative_control_late_store_counts_incremented_are_caught,
                   negative_control_replay_counted_again_is_caught,
                   negative_control_publishing_a_quarantined_epoch_is_caught])
