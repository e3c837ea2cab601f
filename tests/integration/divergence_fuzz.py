"""A seeded differential fuzzer for silent divergence (docs/apply.md "Divergence fuzzer").

For one seed it generates a schema — columns of every built-in type family with and without
modifiers, a domain, arrays, a composite type, inheritance trees, declaratively partitioned
tables, a zero-column table, every replica-identity kind (primary key, unique index, FULL, none),
NOT VALID constraints — and a workload of single-row and set-oriented DML, TRUNCATE (ONLY and
not), runs of one-row UPDATEs (the merged path), large transactions (chunked: COPY runs and batched
UPDATEs), and DDL (ADD COLUMN with and without default, multi-subcommand ALTERs, widening
ALTER TYPE, USING rewrites, RENAME, CREATE TABLE AS and SELECT INTO, PARTITION BY / PARTITION OF /
ATTACH / DETACH PARTITION, ALTER TYPE ... RENAME TO, enum ADD VALUE / RENAME VALUE). The target
gets the schema the way users restore it (`pg_dump --schema-only`, publications included); the
flow publishes FOR ALL TABLES; part of the workload runs, then `trellara snapshot` copies one to
three tables (chunks of 50 rows) while the rest of the workload runs beside it (snapshot_plan); the
applier applies the log; then every table is compared with the source by its own rows (FROM ONLY).

The oracle: after `trellara apply --until-caught-up`,
  - exit 0 (caught up, nothing quarantined): every table must equal the source's, or the seed
    FAILS (silent divergence);
  - exit 3 (blocked): the flow halted at a quarantined transaction; the seed is "explained" when
    the quarantine names a cause (reason + detail), and the tables are not compared (what follows
    the halt is not applied by design). A seed may list the halts its generator expects (a USING
    rewrite must halt as ddl_unsupported): an unexpected reason is reported, not hidden.
Everything is deterministic from the seed except values drawn inside SQL.
"""

import random

SCALAR_TYPES = [
    # (type SQL, value generator) — generators return a SQL literal
    ("integer", lambda r: str(r.randint(-10**6, 10**6))),
    ("bigint", lambda r: str(r.randint(-10**12, 10**12))),
    ("smallint", lambda r: str(r.randint(-30000, 30000))),
    ("numeric(10,2)", lambda r: f"{r.randint(-10**7, 10**7) / 100:.2f}"),
    ("numeric", lambda r: f"{r.randint(-10**9, 10**9)}.{r.randint(0, 999999)}"),
    ("real", lambda r: f"{r.uniform(-1000, 1000):.3f}"),
    ("double precision", lambda r: repr(r.uniform(-1e6, 1e6))),
    ("text", lambda r: _text(r, 0, 40)),
    ("varchar(12)", lambda r: _text(r, 0, 12)),
    ("char(3)", lambda r: _text(r, 1, 3)),
    ("char(8)", lambda r: _text(r, 0, 8)),
    ("bit(4)", lambda r: "B'" + "".join(r.choice("01") for _ in range(4)) + "'"),
    ("varbit(10)", lambda r: "B'" + "".join(r.choice("01") for _ in range(r.randint(0, 10))) + "'"),
    ("boolean", lambda r: r.choice(["true", "false"])),
    ("date", lambda r: f"'2026-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}'"),
    ("timestamp(0)", lambda r: f"'2026-03-{r.randint(1, 28):02d} {r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}.{r.randint(0, 999999)}'"),
    ("timestamptz(3)", lambda r: f"'2026-05-{r.randint(1, 28):02d} 10:00:{r.randint(0, 59):02d}.{r.randint(0, 999999)}+0{r.randint(0, 9)}'"),
    ("time(2)", lambda r: f"'{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}.{r.randint(0, 9999)}'"),
    ("interval hour to minute", lambda r: f"'{r.randint(0, 99)} hours {r.randint(0, 59)} minutes {r.randint(0, 59)} seconds'"),
    ("uuid", lambda r: "'" + "%08x-%04x-%04x-%04x-%012x" % (r.getrandbits(32), r.getrandbits(16), r.getrandbits(16), r.getrandbits(16), r.getrandbits(48)) + "'"),
    ("bytea", lambda r: "'\\x" + "".join(r.choice("0123456789abcdef") for _ in range(2 * r.randint(0, 20))) + "'"),
    ("jsonb", lambda r: "'" + '{"k": %d, "s": "%s"}' % (r.randint(0, 99), _plain(r, 5)) + "'"),
    ("json", lambda r: "'" + '{"a": [%d, %d]}' % (r.randint(0, 9), r.randint(0, 9)) + "'"),
    ("inet", lambda r: f"'10.{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(1, 254)}/{r.choice([24, 32])}'"),
    ("macaddr", lambda r: "'" + ":".join("%02x" % r.randint(0, 255) for _ in range(6)) + "'"),
    ("point", lambda r: f"'({r.randint(-99, 99)},{r.randint(-99, 99)})'"),
    ("int4range", lambda r: f"'[{r.randint(0, 50)},{r.randint(51, 99)})'"),
    ("integer[]", lambda r: "'{" + ",".join(str(r.randint(0, 99)) for _ in range(r.randint(0, 5))) + "}'"),
    ("text[]", lambda r: "ARRAY[" + ",".join(_text(r, 0, 6) for _ in range(r.randint(1, 4))) + "]::text[]"),
    ("fz_code", lambda r: _text(r, 1, 5)),             # domain over varchar(5)
    ("fz_pair", lambda r: f"ROW({r.randint(0, 99)}, {_text(r, 0, 4)})::fz_pair"),  # composite
]
# Rows per statement of a large transaction: with the source's trellara.chunk_changes at
# CHUNK_CHANGES (set by the test), two such INSERTs and an UPDATE of the table make it chunked.
CHUNK_CHANGES = 128
LARGE_ROWS = 100
KEY_TYPES = [("integer", lambda r, n: str(n)), ("bigint", lambda r, n: str(n * 1000003)),
             ("text", lambda r, n: f"'k{n}'"), ("char(6)", lambda r, n: f"'c{n}'"), ("varchar(10)", lambda r, n: f"'v{n}'")]


def _only(table):
    """ONLY for a plain table (a statement of the parent's own rows); a partitioned table's rows are
    its partitions'."""
    return "" if table.kind == "partitioned" else "ONLY "


def _plain(r, n):
    return "".join(r.choice("abcdefghij") for _ in range(n))


def _text(r, lo, hi):
    alphabet = "abcXYZ 09'\"\\,{}é"
    s = "".join(r.choice(alphabet) for _ in range(r.randint(lo, hi)))
    return "'" + s.replace("'", "''") + "'"


class Table:
    def __init__(self, name, key, key_type, columns, kind, identity):
        self.name, self.key, self.key_type, self.columns, self.kind, self.identity = \
            name, key, key_type, columns, kind, identity
        self.next_key = 1
        self.live = []        # keys of rows believed live (the generator's view; statements stay valid anyway)


class Generator:
    def __init__(self, seed, rounds=12):
        self.seed = seed
        self.r = random.Random(f"fuzz/{seed}")
        self.rounds = rounds
        self.tables = []
        self.expected_halts = []   # reasons the workload makes the flow halt at (e.g. a USING rewrite)
        self.created = []          # tables the workload creates (CREATE TABLE AS, SELECT INTO, partitions)
        self.mood = "fz_mood"      # the enum's current name
        self.object_ddl_kinds = []  # what _object_ddl generated, in order (for choosing CI seeds)

    # ---- schema ------------------------------------------------------------------------------
    def schema_sql(self):
        r = self.r
        out = ["CREATE SCHEMA fz", "CREATE DOMAIN fz_code AS varchar(5)",
               "CREATE TYPE fz_pair AS (n int, s text)", "CREATE TABLE fz.empty_cols ()",
               # An enum the workload renames (ALTER TYPE ... RENAME TO) under a table and an array column.
               "CREATE TYPE fz_mood AS ENUM ('calm', 'busy')",
               "CREATE TABLE fz.moody (k int PRIMARY KEY, m fz_mood, ms fz_mood[])"]
        for i in range(r.randint(4, 7)):
            name = f"fz.t{i}"
            key_type, _ = r.choice(KEY_TYPES)
            identity = r.choice(["pk", "pk", "pk", "unique_index", "full", "pk_and_other_index"])
            kind = r.choice(["plain", "plain", "plain", "inherits", "partitioned"])
            # A table matched on every column (REPLICA IDENTITY FULL, the child of a parent without a
            # primary key) takes every type too: json and point, which have no `=`, are matched by
            # their text (core value_types.h FullRowMatchPredicate).
            pool = [t for t, _ in SCALAR_TYPES]
            cols = [(f"c{j}", r.choice(pool)) for j in range(r.randint(1, 6))]
            if kind == "partitioned" and identity in ("unique_index", "pk_and_other_index"):
                identity = "pk"
            col_sql = ", ".join(f"{c} {t}" for c, t in cols)
            if kind == "partitioned":
                out.append(f"CREATE TABLE {name} (k {key_type} NOT NULL, {col_sql}, PRIMARY KEY (k)) PARTITION BY HASH (k)")
                for p in range(2):
                    out.append(f"CREATE TABLE {name}_p{p} PARTITION OF {name} FOR VALUES WITH (MODULUS 2, REMAINDER {p})")
            else:
                pk = ", PRIMARY KEY (k)" if identity in ("pk", "pk_and_other_index") else ""
                out.append(f"CREATE TABLE {name} (k {key_type} NOT NULL, {col_sql}{pk})")
                if identity == "unique_index":
                    out.append(f"CREATE UNIQUE INDEX t{i}_k ON {name} (k)")
                    out.append(f"ALTER TABLE {name} REPLICA IDENTITY USING INDEX t{i}_k")
                elif identity == "pk_and_other_index":
                    out.append(f"ALTER TABLE {name} ADD COLUMN alt bigint NOT NULL DEFAULT 0")
                    out.append(f"CREATE UNIQUE INDEX t{i}_alt ON {name} (alt, k)")
                    out.append(f"ALTER TABLE {name} REPLICA IDENTITY USING INDEX t{i}_alt")
                    cols.append(("alt", "bigint"))
                elif identity == "full":
                    out.append(f"ALTER TABLE {name} REPLICA IDENTITY FULL")
                if kind == "inherits":
                    out.append(f"CREATE TABLE {name}_child (extra int) INHERITS ({name})")
                    if identity == "pk":
                        out.append(f"ALTER TABLE {name}_child ADD PRIMARY KEY (k)")
                    else:
                        out.append(f"ALTER TABLE {name}_child REPLICA IDENTITY FULL")
            if r.random() < 0.3:
                out.append(f"ALTER TABLE {name} ADD CONSTRAINT t{i}_nv CHECK (k IS NOT NULL) NOT VALID")
            self.tables.append(Table(name, "k", key_type, cols, kind, identity))
            if kind == "inherits":
                child = Table(f"{name}_child", "k", key_type, cols + [("extra", "integer")], "child",
                              "pk" if identity == "pk" else "full")
                self.tables.append(child)
        return ";\n".join(out) + ";\n"

    def all_tables(self):
        """Every table that holds rows, partitions included (compared by their own rows)."""
        out = ["fz.empty_cols", "fz.moody"] + self.created
        for t in self.tables:
            out.append(t.name)
            if t.kind == "partitioned":
                out += [f"{t.name}_p{p}" for p in range(2)]
        return out

    # ---- workload ----------------------------------------------------------------------------
    def _value(self, type_sql):
        for t, gen in SCALAR_TYPES:
            if t == type_sql:
                return gen(self.r)
        return "NULL"

    def _key(self, table, n):
        for t, gen in KEY_TYPES:
            if t == table.key_type:
                return gen(self.r, n)
        raise ValueError(table.key_type)

    def _insert(self, table, rows=1):
        values = []
        for _ in range(rows):
            n = table.next_key
            table.next_key += 1
            table.live.append(n)
            vals = [self._key(table, n)] + [("NULL" if self.r.random() < 0.1 else self._value(t)) if c != "alt"
                                             else str(n) for c, t in table.columns]
            values.append("(" + ", ".join(vals) + ")")
        cols = ", ".join(["k"] + [c for c, _ in table.columns])
        return f"INSERT INTO {table.name} ({cols}) VALUES " + ", ".join(values)

    def _update_one(self, table):
        if not table.live:
            return self._insert(table)
        n = self.r.choice(table.live)
        settable = [(c, t) for c, t in table.columns if c != "alt"]
        if not settable:
            return self._insert(table)
        c, t = self.r.choice(settable)
        return f"UPDATE {_only(table)}{table.name} SET {c} = {self._value(t)} WHERE k = {self._key(table, n)}"

    def _delete_one(self, table):
        if not table.live:
            return self._insert(table)
        n = self.r.choice(table.live)
        table.live.remove(n)
        return f"DELETE FROM {_only(table)}{table.name} WHERE k = {self._key(table, n)}"

    def _ddl(self, table, round_no):
        r = self.r
        if table.kind != "plain":
            return None
        choice = r.randint(0, 7)
        col = f"d{round_no}"
        if choice in (6, 7):  # rows written before their DDL record: the applier runs the CREATE first
            name = f"fz.{'ct' if choice == 6 else 'si'}{round_no}"
            self.created.append(name)
            if choice == 6:
                return f"CREATE TABLE {name} AS SELECT * FROM {table.name}"
            return f"SELECT * INTO {name} FROM {table.name}"
        if choice == 0:
            table.columns.append((col, "text"))
            return f"ALTER TABLE {table.name} ADD COLUMN {col} text"
        if choice == 1:
            table.columns.append((col, "integer"))
            return f"ALTER TABLE {table.name} ADD COLUMN {col} integer DEFAULT 7"
        if choice == 2:   # multi-subcommand: ADD two columns, SET NOT NULL on one
            table.columns.append((col, "integer"))
            table.columns.append((col + "b", "varchar(12)"))
            return (f"ALTER TABLE {table.name} ADD COLUMN {col} integer NOT NULL DEFAULT 1, "
                    f"ADD COLUMN {col}b varchar(12)")
        if choice == 3:   # widening type change of an integer column, when there is one
            ints = [i for i, (c, t) in enumerate(table.columns) if t == "integer" and c != "alt"]
            if not ints:
                return None
            i = ints[0]
            table.columns[i] = (table.columns[i][0], "bigint")
            return f"ALTER TABLE {table.name} ALTER COLUMN {table.columns[i][0]} TYPE bigint"
        if choice == 4:   # a USING rewrite: the flow must halt (ddl_unsupported), never apply it as no change
            texts = [c for c, t in table.columns if t == "text"]
            if not texts:
                return None
            self.expected_halts.append("ddl_unsupported")
            return f"ALTER TABLE {table.name} ALTER COLUMN {texts[0]} TYPE text USING upper({texts[0]})"
        renamable = [i for i, (c, t) in enumerate(table.columns) if c != "alt"]
        if not renamable:
            return None
        i = renamable[-1]
        new = f"{table.columns[i][0]}_r{round_no}"
        old = table.columns[i][0]
        table.columns[i] = (new, table.columns[i][1])
        return f"ALTER TABLE {table.name} RENAME COLUMN {old} TO {new}"

    def _object_ddl(self, round_no):
        """DDL on objects other than the generated tables: a range-partitioned tree built with
        PARTITION OF and ATTACH PARTITION, then a DETACH; a rename of the enum fz.moody uses; or a
        label added to it (before another, or at the end), used, then renamed."""
        r = self.r
        draw = r.random()
        if 0.35 <= draw < 0.65:
            label = f"l{round_no}"
            where = " BEFORE 'busy'" if draw < 0.5 else ""
            self.object_ddl_kinds.append("enum_labels")
            return [[f"ALTER TYPE {self.mood} ADD VALUE '{label}'{where}"],
                    [f"INSERT INTO fz.moody VALUES ({2000 + round_no}, '{label}', '{{{label},busy}}')",
                     f"UPDATE fz.moody SET m = '{label}' WHERE k % 4 = 1"],
                    [f"ALTER TYPE {self.mood} RENAME VALUE '{label}' TO '{label}x'",
                     f"UPDATE fz.moody SET ms = ARRAY['{label}x', 'calm']::{self.mood}[] WHERE k % 3 = 0"]]
        if draw < 0.35:
            self.object_ddl_kinds.append("type_rename")
            new = f"fz_mood_r{round_no}"
            old, self.mood = self.mood, new
            return [[f"ALTER TYPE {old} RENAME TO {new}",
                     f"INSERT INTO fz.moody VALUES ({1000 + round_no}, 'busy', '{{calm,busy}}')",
                     "UPDATE fz.moody SET m = 'calm', ms = '{busy}' WHERE k % 2 = 0"]]
        p = f"fz.pr{round_no}"
        self.object_ddl_kinds.append("partitions")
        self.created += [f"{p}_lo", f"{p}_hi"]
        return [[f"CREATE TABLE {p} (k int NOT NULL, v text, PRIMARY KEY (k)) PARTITION BY RANGE (k)",
                 f"CREATE TABLE {p}_lo PARTITION OF {p} FOR VALUES FROM (MINVALUE) TO (100)",
                 f"CREATE TABLE {p}_hi (k int NOT NULL, v text, PRIMARY KEY (k))",
                 f"INSERT INTO {p}_hi SELECT g, 'h' || g FROM generate_series(100, 120) g",
                 f"ALTER TABLE {p} ATTACH PARTITION {p}_hi FOR VALUES FROM (100) TO (MAXVALUE)",
                 f"INSERT INTO {p} SELECT g, 'v' || g FROM generate_series(1, 150) g ON CONFLICT DO NOTHING"],
                [f"UPDATE {p} SET v = v || '!' WHERE k % 7 = 0", f"ALTER TABLE {p} DETACH PARTITION {p}_lo",
                 f"UPDATE {p}_lo SET v = 'detached' WHERE k % 3 = 0", f"DELETE FROM {p} WHERE k % 5 = 0"]]

    def snapshot_plan(self, transactions):
        """`trellara snapshot` beside the stream: the workload's transaction at which the snapshot
        starts (the rest of the workload runs while it copies) and the tables it copies — drawn from
        their own generator, so the schema and the workload of a seed stay what they were."""
        r = random.Random(self.seed * 7919 + 1)
        names = [t.name for t in self.tables] + ["fz.moody", "fz.empty_cols"]
        return r.randint(transactions // 3, 2 * transactions // 3), sorted(r.sample(names, r.randint(1, 3)))

    def workload(self):
        """Source transactions: a list of SQL scripts, each one transaction."""
        r = self.r
        txs = [["INSERT INTO fz.empty_cols SELECT FROM generate_series(1, 3)"],
               ["INSERT INTO fz.moody SELECT g, 'calm', '{calm,busy}' FROM generate_series(1, 20) g"]]
        for t in self.tables:
            txs.append([self._insert(t, rows=r.randint(5, 30))])
        for round_no in range(self.rounds):
            shape = r.random()
            t = r.choice(self.tables)
            if shape < 0.35:      # small mixed transactions
                for _ in range(r.randint(1, 6)):
                    tx = []
                    for _ in range(r.randint(1, 4)):
                        tt = r.choice(self.tables)
                        op = r.random()
                        tx.append(self._insert(tt) if op < 0.4 else self._update_one(tt) if op < 0.8
                                  else self._delete_one(tt))
                    txs.append(tx)
            elif shape < 0.55:    # a run of one-row UPDATEs of one shape: merged in a group
                settable = [(c, ty) for c, ty in t.columns if c != "alt"]
                if t.live and settable:
                    c, ty = r.choice(settable)
                    for n in r.sample(t.live, min(len(t.live), r.randint(8, 20))):
                        txs.append([f"UPDATE {_only(t)}{t.name} SET {c} = {self._value(ty)} WHERE k = {self._key(t, n)}"])
            elif shape < 0.7:     # a large transaction: chunked (COPY runs, batched UPDATEs)
                settable = [(c, ty) for c, ty in t.columns if c != "alt"]
                tx = [self._insert(t, rows=LARGE_ROWS), self._insert(t, rows=LARGE_ROWS)]
                if settable:
                    c, ty = r.choice(settable)
                    tx.append(f"UPDATE {_only(t)}{t.name} SET {c} = {self._value(ty)}")
                txs.append(tx)
            elif shape < 0.8:     # TRUNCATE, ONLY or the whole tree
                only = r.random() < 0.5
                txs.append([f"TRUNCATE {'ONLY ' if only and t.kind != 'partitioned' else ''}{t.name}"])
                t.live = []
                if not only:
                    for child in self.tables:
                        if child.name == t.name + "_child":
                            child.live = []
            elif shape < 0.85:
                ddl = self._ddl(t, round_no)
                if ddl:
                    txs.append([ddl, self._insert(t)])
            elif shape < 0.9:
                txs += self._object_ddl(round_no)
            else:                 # set-oriented UPDATE and DELETE of the whole table
                settable = [(c, ty) for c, ty in t.columns if c != "alt"]
                if settable:
                    c, ty = r.choice(settable)
                    txs.append([f"UPDATE {t.name} SET {c} = {self._value(ty)} WHERE random() < 0.5"])
                txs.append([f"DELETE FROM {_only(t)}{t.name} WHERE random() < 0.1"])
        return txs
