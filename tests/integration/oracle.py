"""The oracle workload: a shared source workload whose expected target state the test process keeps
itself (it never reads the expected state back from the source), and a check of the target against
it. Any scenario with a source/target pair (`pair.source`, `pair.target`: harness Clusters) can run
it next to its own workload:

    pair = FlowPair(name, MY_DDL + oracle.DDL, MY_TABLES + oracle.TABLES)   # published + on the target
    work = oracle.Oracle(seed)
    work.setup(pair)              # seeds the accounts and counters on the source (they replicate)
    work.run(pair, 300)           # 300 source transactions, each outcome recorded
    ... apply, kill, restart, converge ...
    invariants = work.check(pair) # raises AssertionError naming the invariant and the offending keys

Three workloads, every transaction a single implicit transaction on one source connection:
  - ledger: a transfer between two random accounts (debit and credit in one transaction), so the sum
    of balances is conserved. Check: the target's sum equals the initial total, every target account
    equals the source's, and every account equals the oracle's own expected balance.
  - unique inserts: each transaction inserts a few rows with fresh ids (no unique constraint, so a
    duplicate would be stored and seen); an id is recorded as committed only after the source COMMIT
    returned. Check: the target holds exactly the committed ids, none twice, none missing.
  - per-key order: a per-key counter incremented by each transaction plus a history row (key, seq)
    whose seq is the counter's new value. Check: the target's counter equals the source's and the
    oracle's, and the target's history holds seq 1..n for each key without gaps or repeats.

A transaction whose commit outcome is unknown (the source connection was lost or the answer did not
come before the timeout, e.g. the source was killed) may be on the target or not: the check allows
either, but only the whole transaction (all of its ids, its increment and its transfer, or none), and
says explicitly how many were unknown and how each was resolved. A transaction the source rejected
with an error is expected to be absent.
"""

import os
import random
import select
import subprocess
import time

from capture_support import PG_BIN  # capture_support puts tests/ on sys.path for the harness

DDL = """
CREATE TABLE public.oracle_accounts (id int PRIMARY KEY, balance bigint NOT NULL);
CREATE TABLE public.oracle_events (id bigint NOT NULL, txn bigint NOT NULL, note text NOT NULL);
CREATE TABLE public.oracle_counters (k int PRIMARY KEY, n int NOT NULL);
CREATE TABLE public.oracle_key_history (k int NOT NULL, seq int NOT NULL, txn bigint NOT NULL);
"""
TABLES = ("public.oracle_accounts", "public.oracle_events", "public.oracle_counters", "public.oracle_key_history")

INVARIANTS = (
    "oracle: ledger sum of balances conserved on the target",
    "oracle: every target account equals the source's and the oracle's",
    "oracle: target holds exactly the committed insert ids, no duplicate, none missing",
    "oracle: per-key counter equals the source's and the oracle's",
    "oracle: per-key history seq 1..n without gaps or repeats",
)

ACCOUNTS = 40
KEYS = 12
INITIAL_BALANCE = 1000
END = "__trellara_oracle_end__"


class OracleViolation(AssertionError):
    pass


class _Session:
    """One psql connection to the source (our child, killed by its Popen handle). execute() sends
    one implicit transaction (statements joined with psql's \\; so they go in one Query message)
    and returns ("committed" | "failed" | "not_sent" | "unknown", detail): failed = the source
    rejected it (rolled back), not_sent = psql could not connect, unknown = the connection was lost
    or no answer came, so it may or may not have committed."""

    def __init__(self, cluster, dbname="postgres"):
        self.command = ["stdbuf", "-oL", os.path.join(PG_BIN, "psql"), "-X", "-q", "-A", "-t",
                        "-h", cluster.socket_dir, "-p", str(cluster.port), "-U", "postgres", "-d", dbname]
        self.process = None

    def execute(self, statements, timeout_s):
        if self.process is None or self.process.poll() is not None:
            self.close()
            self.process = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT, text=True)
        sql = " \\; ".join(statements)
        try:
            self.process.stdin.write(f"{sql};\n\\echo {END} :ERROR :SQLSTATE\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError) as error:
            self.close()
            return "unknown", f"could not send to psql: {error}"
        buffered = b""
        deadline = time.monotonic() + timeout_s
        fd = self.process.stdout.fileno()
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buffered += chunk
            text = buffered.decode(errors="replace")
            marker = text.rfind(END + " ")
            if marker >= 0 and text.endswith("\n"):
                error_flag, _, sqlstate = text[marker + len(END) + 1:].strip().partition(" ")
                messages = text[:marker].strip()
                if "psql: error: connection to server" in messages:
                    # psql never connected: nothing was sent, so nothing committed.
                    self.close()
                    time.sleep(0.1)
                    return "not_sent", f"could not connect to the source: {messages[-300:]}"
                if error_flag == "false":
                    return "committed", ""
                # An ordinary statement error rolled the implicit transaction back; a connection
                # failure (class 08, 57P) leaves the outcome unknown.
                if sqlstate and not sqlstate.startswith(("08", "57P")) and sqlstate != "00000":
                    return "failed", f"SQLSTATE {sqlstate}: {messages[-300:]}"
                self.close()
                return "unknown", f"SQLSTATE {sqlstate or '-'}: {messages[-300:]}"
        text = buffered.decode(errors="replace")
        self.close()
        if "psql: error: connection to server" in text:
            time.sleep(0.1)
            return "not_sent", f"could not connect to the source: {text[-300:]}"
        return "unknown", f"no answer from the source within {timeout_s}s (connection lost or killed): " \
                          f"{buffered.decode(errors='replace')[-300:]}"

    def close(self):
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
            self.process = None


class Oracle:
    def __init__(self, seed=None, accounts=ACCOUNTS, keys=KEYS):
        if seed is None and os.environ.get("TRELLARA_ORACLE_SEED"):
            seed = int(os.environ["TRELLARA_ORACLE_SEED"])   # reproduces a printed seed
        self.seed = random.SystemRandom().randrange(1 << 31) if seed is None else seed
        self.rng = random.Random(self.seed)
        self.accounts, self.keys = accounts, keys
        self.balances = {}                 # account -> expected balance (committed transfers only)
        self.counters = {}                 # key -> expected counter (committed increments only)
        self.committed_ids = set()         # event ids whose transaction's COMMIT returned
        self.unknown = []                  # transactions whose outcome is unknown: dicts
        self.failed = 0
        self.next_id = 1
        self.next_txn = 1
        self.total = accounts * INITIAL_BALANCE
        self.last_report = None

    # ---- workload -------------------------------------------------------------------------------

    def setup(self, pair):
        """Seeds the oracle's tables on the source (the flow carries them to the target). The tables
        (DDL) must already exist on both sides and be published."""
        for cluster, side in ((pair.source, "source"), (pair.target, "target")):
            missing = [t for t in TABLES if cluster.query(f"SELECT to_regclass('{t}') IS NULL") == "t"]
            if missing:
                raise RuntimeError(f"oracle.setup: {side} cluster {cluster.name} lacks {missing}: create "
                                   f"oracle.DDL on both sides before the flow starts")
        published = pair.source.query("SELECT count(*) FROM pg_publication_tables WHERE schemaname = 'public' AND "
                                      "tablename LIKE 'oracle\\_%'")
        if int(published) < len(TABLES):
            raise RuntimeError(f"oracle.setup: only {published} of the {len(TABLES)} oracle tables are in a "
                               f"publication on {pair.source.name}: add oracle.TABLES to the flow's publication")
        pair.source.psql(f"INSERT INTO public.oracle_accounts SELECT g, {INITIAL_BALANCE} FROM "
                         f"generate_series(1, {self.accounts}) g;\n"
                         f"INSERT INTO public.oracle_counters SELECT g, 0 FROM generate_series(1, {self.keys}) g;")
        self.balances = {a: INITIAL_BALANCE for a in range(1, self.accounts + 1)}
        self.counters = {k: 0 for k in range(1, self.keys + 1)}
        print(f"oracle: seed {self.seed}, {self.accounts} accounts x {INITIAL_BALANCE}, {self.keys} keys")

    def _transaction(self):
        txn = self.next_txn
        self.next_txn += 1
        a, b = self.rng.sample(range(1, self.accounts + 1), 2)
        amount = self.rng.randint(1, 200)
        key = self.rng.randint(1, self.keys)
        ids = list(range(self.next_id, self.next_id + self.rng.randint(1, 3)))
        self.next_id += len(ids)
        statements = [
            f"UPDATE public.oracle_accounts SET balance = balance - {amount} WHERE id = {a}",
            f"UPDATE public.oracle_accounts SET balance = balance + {amount} WHERE id = {b}",
            "INSERT INTO public.oracle_events VALUES " + ", ".join(f"({i}, {txn}, 'txn {txn}')" for i in ids),
            f"UPDATE public.oracle_counters SET n = n + 1 WHERE k = {key}",
            f"INSERT INTO public.oracle_key_history SELECT k, n, {txn} FROM public.oracle_counters WHERE k = {key}",
        ]
        return {"txn": txn, "from": a, "to": b, "amount": amount, "key": key, "ids": ids}, statements

    def run(self, pair, transactions, timeout_s=30, stop=None):
        """Runs `transactions` source transactions (or until `stop()` is true), one at a time on one
        connection, and records each outcome. Returns {committed, failed, unknown} for this call."""
        session = _Session(pair.source)
        counts = {"committed": 0, "failed": 0, "not_sent": 0, "unknown": 0}
        try:
            for _ in range(transactions):
                if stop is not None and stop():
                    break
                txn, statements = self._transaction()
                outcome, detail = session.execute(statements, timeout_s)
                counts[outcome] += 1
                if outcome == "committed":
                    self.balances[txn["from"]] -= txn["amount"]
                    self.balances[txn["to"]] += txn["amount"]
                    self.counters[txn["key"]] += 1
                    self.committed_ids.update(txn["ids"])
                elif outcome in ("failed", "not_sent"):
                    self.failed += 1
                    txn["detail"] = detail
                    self.unknown.append(dict(txn, failed=True))
                else:
                    txn["detail"] = detail
                    self.unknown.append(txn)
        finally:
            session.close()
        print(f"oracle: ran {sum(counts.values())} transactions: {counts['committed']} committed, {counts['failed']} "
              f"rejected by the source, {counts['not_sent']} never sent (no connection to the source), "
              f"{counts['unknown']} with an unknown commit outcome")
        return counts

    # ---- check ----------------------------------------------------------------------------------

    @staticmethod
    def _rows(cluster, sql):
        text = cluster.query(sql)
        return [line.split("|") for line in text.splitlines() if line]

    def check(self, pair, label="oracle"):
        """Checks the target against the oracle's own expected state (and the source where the
        invariant says so). Returns the invariant names checked; raises OracleViolation (an
        AssertionError) naming the first violated invariant and the offending keys."""
        source, target = pair.source, pair.target
        failed = [t for t in self.unknown if t.get("failed")]
        unknown = [t for t in self.unknown if not t.get("failed")]

        # Which transactions of unknown outcome reached the target: decided by their event ids (all
        # or none of a transaction's ids: anything else is a torn transaction).
        target_ids = {}
        for event_id, txn, copies in self._rows(target, "SELECT id, txn, count(*) FROM public.oracle_events "
                                                        "GROUP BY 1, 2 ORDER BY 1"):
            target_ids[int(event_id)] = (int(txn), int(copies))
        duplicates = sorted(i for i, (_, copies) in target_ids.items() if copies > 1)
        if duplicates:
            raise OracleViolation(f"{label}: invariant 'no duplicate insert id' violated: ids {duplicates[:20]} "
                                  f"are on the target more than once")
        resolved, torn = {}, []
        for t in unknown:
            present = [i for i in t["ids"] if i in target_ids]
            if present and len(present) != len(t["ids"]):
                torn.append(t["txn"])
            resolved[t["txn"]] = bool(present)
        if torn:
            raise OracleViolation(f"{label}: invariant 'transactions are atomic on the target' violated: "
                                  f"transactions {torn} of unknown outcome are only partly on the target")
        rejected_present = [t["txn"] for t in failed if any(i in target_ids for i in t["ids"])]
        expected_ids = set(self.committed_ids)
        for t in unknown:
            if resolved[t["txn"]]:
                expected_ids.update(t["ids"])
        missing = sorted(expected_ids - set(target_ids))
        extra = sorted(set(target_ids) - expected_ids)
        if missing or extra or rejected_present:
            raise OracleViolation(
                f"{label}: invariant 'target holds exactly the committed insert ids' violated: missing "
                f"{missing[:20]}{' ...' if len(missing) > 20 else ''} ({len(missing)}), never committed but present "
                f"{extra[:20]} ({len(extra)}), rejected transactions present {rejected_present[:20]}")

        # Expected balances and counters: committed transactions plus the unknown ones the target
        # shows as applied (resolved above by their ids, so each is taken whole or not at all).
        balances, counters = dict(self.balances), dict(self.counters)
        for t in unknown:
            if resolved[t["txn"]]:
                balances[t["from"]] -= t["amount"]
                balances[t["to"]] += t["amount"]
                counters[t["key"]] += 1

        target_accounts = {int(a): int(b) for a, b in self._rows(target, "SELECT id, balance FROM "
                                                                          "public.oracle_accounts")}
        source_accounts = {int(a): int(b) for a, b in self._rows(source, "SELECT id, balance FROM "
                                                                          "public.oracle_accounts")}
        total = sum(target_accounts.values())
        wrong = sorted(a for a in set(balances) | set(target_accounts)
                       if target_accounts.get(a) != balances.get(a) or target_accounts.get(a) != source_accounts.get(a))
        if total != self.total or len(target_accounts) != self.accounts:
            raise OracleViolation(f"{label}: invariant 'ledger sum of balances conserved' violated: the target's "
                                  f"{len(target_accounts)} accounts sum to {total}, the initial total is {self.total} "
                                  f"over {self.accounts} accounts; accounts differing from the oracle or source: "
                                  f"{wrong}")
        if wrong:
            detail = ", ".join(f"{a}: target {target_accounts.get(a)} source {source_accounts.get(a)} oracle "
                               f"{balances.get(a)}" for a in wrong[:10])
            raise OracleViolation(f"{label}: invariant 'every target account equals the source's and the "
                                  f"oracle's' violated for accounts {wrong}: {detail}")

        target_counters = {int(k): int(n) for k, n in self._rows(target, "SELECT k, n FROM public.oracle_counters")}
        source_counters = {int(k): int(n) for k, n in self._rows(source, "SELECT k, n FROM public.oracle_counters")}
        wrong = sorted(k for k in set(counters) | set(target_counters)
                       if target_counters.get(k) != counters.get(k) or target_counters.get(k) != source_counters.get(k))
        if wrong:
            detail = ", ".join(f"{k}: target {target_counters.get(k)} source {source_counters.get(k)} oracle "
                               f"{counters.get(k)}" for k in wrong[:10])
            raise OracleViolation(f"{label}: invariant 'per-key counter equals the source's and the oracle's' "
                                  f"violated for keys {wrong}: {detail}")
        history = {}
        for k, seq in self._rows(target, "SELECT k, seq FROM public.oracle_key_history ORDER BY k, seq"):
            history.setdefault(int(k), []).append(int(seq))
        gaps = {k: history.get(k, []) for k in counters
                if history.get(k, []) != list(range(1, counters[k] + 1))}
        gaps.update({k: seqs for k, seqs in history.items() if k not in counters})
        if gaps:
            detail = "; ".join(f"key {k}: counter {counters.get(k)}, seqs {self._describe(seqs, counters.get(k))}"
                               for k, seqs in sorted(gaps.items())[:10])
            raise OracleViolation(f"{label}: invariant 'per-key history seq 1..n without gaps or repeats' "
                                  f"violated for keys {sorted(gaps)}: {detail}")

        applied_unknown = sorted(t for t, present in resolved.items() if present)
        absent_unknown = sorted(t for t, present in resolved.items() if not present)
        self.last_report = {"committed_ids": len(self.committed_ids), "unknown_applied": applied_unknown,
                            "unknown_absent": absent_unknown, "rejected": [t["txn"] for t in failed]}
        print(f"{label}: ok: {len(self.committed_ids)} committed ids, {sum(counters.values())} increments over "
              f"{len(counters)} keys, {len(balances)} accounts summing to {total}; "
              + (f"{len(unknown)} transactions of UNKNOWN commit outcome (source connection lost), allowed either "
                 f"way: on the target {applied_unknown}, absent {absent_unknown}" if unknown
                 else "no transaction of unknown commit outcome")
              + (f"; {len(failed)} rejected by the source or never sent, absent as expected" if failed else ""))
        return list(INVARIANTS)

    @staticmethod
    def _describe(seqs, n):
        if n is None:
            return f"{seqs[:10]} for a key the oracle never created"
        expected = set(range(1, n + 1))
        missing = sorted(expected - set(seqs))
        repeated = sorted({s for s in seqs if seqs.count(s) > 1})
        beyond = sorted(set(seqs) - expected)
        return f"missing {missing[:10]}, repeated {repeated[:10]}, beyond the counter {beyond[:10]}"
