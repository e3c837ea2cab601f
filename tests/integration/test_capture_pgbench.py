#!/usr/bin/env python3
"""Integration: a flow captures every committed transaction of a pgbench run, exactly once, in order.

A publication of the four pgbench tables, a trellara flow on it, and a test_decoding "truth" slot
created at the same moment. After `pgbench -c 4 -t N` the flow's log (read from disk with
`trellara log records`) must hold exactly the source's committed transactions on published tables
(from the truth slot): same xids, same order, same commit LSNs, strictly increasing, none missing,
none twice. It prints what it measured. It must never leave a cluster running (the harness stops
it by PID).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import (CaptureFailure, compare, log_records, log_transactions, run_pgbench,  # noqa: E402
                             truth_transactions, wait_caught_up)
from flow_pair import FlowPair  # noqa: E402

TRANSACTIONS_PER_CLIENT = int(os.environ.get("TRELLARA_PGBENCH_TRANSACTIONS", "500"))
CLIENTS = 4
PGBENCH_TABLES = ("pgbench_accounts", "pgbench_branches", "pgbench_tellers", "pgbench_history")


class PgbenchCapture(FlowPair):
    """A source (no target) with pgbench's tables, a flow on them and a test_decoding truth slot
    created with it (no write to a published table between the two slots)."""

    def __init__(self, name):
        super().__init__(name, tables=PGBENCH_TABLES, with_target=False, truth=True)

    def prepare(self):
        run_pgbench(self.source, ["-i", "-s", "1", "-q"])


def flow_captures_every_committed_pgbench_transaction_once_in_order():
    with PgbenchCapture("capture-pgbench") as pair:
        cluster, log_dir = pair.source, pair.log_dir
        result = run_pgbench(cluster, ["-c", str(CLIENTS), "-j", "2", "-t", str(TRANSACTIONS_PER_CLIENT), "-n"])
        processed = [line for line in result.stdout.splitlines() if "processed" in line]
        print(f"pgbench: {processed[0].strip() if processed else result.stdout[-300:]}")
        # A write outside the publication after the run: the flow must pass it without logging it.
        cluster.query("CREATE TABLE unpublished(i int); INSERT INTO unpublished VALUES (1)")
        truth = truth_transactions(cluster, "public.pgbench_")
        if len(truth) < CLIENTS * TRANSACTIONS_PER_CLIENT:
            raise CaptureFailure(f"the truth slot shows {len(truth)} transactions, pgbench committed at least "
                                 f"{CLIENTS * TRANSACTIONS_PER_CLIENT}: the truth is incomplete")
        wait_caught_up(cluster, truth[-1][1])
        records = log_records(log_dir)
        logged, chunks = log_transactions(records)
        print(f"log {log_dir}: {len(records)} records, {chunks}")
        compare(truth, logged, "pgbench capture")
        status = cluster.query("SELECT state, consecutive_failures, coalesce(last_error, '') FROM trellara.status()")
        print(f"status(): {status}")
        if not status.startswith("running|0|"):
            raise CaptureFailure(f"the flow is not running cleanly after the run: {status}")
        pair.check_no_crashes()
        print("ok: flow_captures_every_committed_pgbench_transaction_once_in_order")


if __name__ == "__main__":
    flow_captures_every_committed_pgbench_transaction_once_in_order()
