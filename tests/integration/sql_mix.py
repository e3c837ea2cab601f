"""An everyday SQL mix for a source with a live flow: seeded, several concurrent sessions, WAL
records of every size the relay has to read.

What it makes the relay read, and why each piece is here:
  - many small autocommit transactions per session, so one relay pass replays many transactions
    and every later WAL read of that pass happens after a replay (a relay whose reader allocates
    its buffers in the memory context a replay left current crashes here);
  - WAL records larger than the reader's 40 KiB record buffer and its 64 KiB decode buffer
    (records spanning pages, "oversized" decoded records): logical messages of growing size,
    transactional and not; index builds that WAL-log whole relations (GiST and SP-GiST on box and
    point grids: log_newpage_range records of up to 32 full pages); commit records carrying
    thousands of invalidation messages (one transaction creating hundreds of temporary tables);
  - rows of geometric types (box, polygon, path, point), arrays, wide and TOASTed values;
  - DDL between them: tables created, altered, indexed and dropped in an unpublished schema, and
    (published_ddl=True) indexes created and dropped on the published tables.

`published_tables()` are created by `setup_sql()`; the mix writes them (and `scratch.*`, which a
flow must not publish: the relay still reads all of its WAL). Every statement is deterministic
from the seed except values drawn from random() inside SQL, which only change sizes and content.
"""

import random
import subprocess
import threading

SCHEMA = "vw"

TABLES = {
    "small": "id bigint PRIMARY KEY, session int NOT NULL, n int NOT NULL, note text",
    "geo": "id bigint PRIMARY KEY, b box, p polygon, pa path, pt point",
    "wide": "id bigint PRIMARY KEY, t text, bin bytea, j jsonb",
    "arr": "id bigint PRIMARY KEY, ints int[], texts text[], pts point[]",
}


def published_tables():
    return [f"{SCHEMA}.{name}" for name in TABLES]


def setup_sql():
    statements = [f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}", "CREATE SCHEMA IF NOT EXISTS scratch"]
    for name, columns in TABLES.items():
        statements.append(f"CREATE TABLE {SCHEMA}.{name} ({columns})")
    return ";\n".join(statements) + ";\n"


def _key(session, n):
    return session * 10_000_000 + n


def _small_transactions(rng, session, counter, count):
    out = []
    for _ in range(count):
        counter[0] += 1
        key = _key(session, counter[0])
        roll = rng.random()
        out.append(f"INSERT INTO {SCHEMA}.small VALUES ({key}, {session}, {counter[0]}, 'n{counter[0]}');")
        if roll < 0.3 and counter[0] > 2:
            out.append(f"UPDATE {SCHEMA}.small SET n = n + 1, note = note || '+' WHERE id = {_key(session, counter[0] - 1)};")
        elif roll < 0.4 and counter[0] > 3:
            out.append(f"DELETE FROM {SCHEMA}.small WHERE id = {_key(session, counter[0] - 2)};")
    return out


def _large_record(rng, session, counter, round_no, published_ddl):
    """One statement group that writes at least one WAL record above 40 KiB."""
    kind = (round_no + session) % 8
    counter[0] += 1
    key = _key(session, counter[0])
    size = 50_000 + rng.randrange(0, 900_000)
    if kind == 0:   # non-transactional message: read, never replayed
        return [f"SELECT pg_logical_emit_message(false, 'sqlmix', repeat(md5(random()::text), {size // 32}));"]
    if kind == 1:   # transactional message in a transaction that also writes a published row
        return ["BEGIN;",
                f"INSERT INTO {SCHEMA}.small VALUES ({key}, {session}, {counter[0]}, 'with message');",
                f"SELECT pg_logical_emit_message(true, 'sqlmix', repeat(md5(random()::text), {size // 32}));",
                "COMMIT;"]
    if kind == 2:   # a grid of boxes, then an SP-GiST and a GiST index build on a scratch copy
        table = f"scratch.grid_{session}_{round_no}"
        side = 60 + rng.randrange(0, 60)
        return [f"INSERT INTO {SCHEMA}.geo SELECT {key}::bigint * 100000 + x * 1000 + y, box(point(x, y), point(x + 1, y + 1)), "
                f"NULL, NULL, point(x, y) FROM generate_series(1, 40) x, generate_series(1, 20) y;",
                f"CREATE TABLE {table} AS SELECT box(point(x, y), point(x + random(), y + random())) AS b, "
                f"point(x, y) AS p FROM generate_series(1, {side}) x, generate_series(1, {side}) y;",
                f"CREATE INDEX ON {table} USING spgist (b);",
                f"CREATE INDEX ON {table} USING gist (p);",
                f"DROP TABLE {table};"]
    if kind == 3:   # wide, TOASTed, poorly compressible values
        return [f"INSERT INTO {SCHEMA}.wide SELECT {key}, string_agg(md5(random()::text), '') , "
                f"decode(string_agg(md5(random()::text), ''), 'hex'), "
                f"jsonb_build_object('k', {key}, 'blob', string_agg(md5(random()::text), '')) "
                f"FROM generate_series(1, {size // 32});",
                f"UPDATE {SCHEMA}.wide SET t = t || 'x' WHERE id = {key};"]
    if kind == 4:   # arrays, a polygon and a path with many points
        points = 500 + rng.randrange(0, 3000)
        return [f"INSERT INTO {SCHEMA}.arr SELECT {key}, array_agg(g), array_agg(md5(g::text)), "
                f"array_agg(point(g, g * 2)) FROM generate_series(1, {points}) g;",
                f"INSERT INTO {SCHEMA}.geo SELECT {key}, NULL, polygon(path(array_to_string(array_agg("
                f"format('(%s,%s)', g, (g * 7) % 101)), ',')::text)), path(array_to_string(array_agg("
                f"format('(%s,%s)', g, g % 13)), ',')::text), NULL FROM generate_series(1, {points}) g;"]
    if kind == 5:   # a commit record with thousands of invalidation messages
        n = 150 + rng.randrange(0, 150)
        creates = [f"CREATE TEMP TABLE tmp_{session}_{round_no}_{i} (a int PRIMARY KEY, b text) ON COMMIT DROP;"
                   for i in range(n)]
        return ["BEGIN;", *creates,
                f"INSERT INTO {SCHEMA}.small VALUES ({key}, {session}, {counter[0]}, 'after temp tables');",
                "COMMIT;"]
    if kind == 6:   # DDL on unpublished tables between the writes, and an index on a published one
        table = f"scratch.t_{session}_{round_no}"
        out = [f"CREATE TABLE {table} (id int PRIMARY KEY, v text);",
               f"INSERT INTO {table} SELECT g, repeat(md5(g::text), 40) FROM generate_series(1, 300) g;",
               f"ALTER TABLE {table} ADD COLUMN w int DEFAULT 7;",
               f"ALTER TABLE {table} ALTER COLUMN v TYPE varchar(4000);",
               f"CREATE INDEX ON {table} (w);",
               f"DROP TABLE {table};"]
        if published_ddl:   # DDL records of published tables reach the log as transactions of their own
            out += [f"CREATE INDEX IF NOT EXISTS small_n_{session} ON {SCHEMA}.small (n);",
                    f"DROP INDEX IF EXISTS {SCHEMA}.small_n_{session};"]
        return out
    # kind 7: a multi-row COPY-like insert of many small rows (heap2 multi-insert records)
    return [f"INSERT INTO {SCHEMA}.small SELECT {key}::bigint * 1000 + g, {session}, g, repeat('m', g % 50) "
            f"FROM generate_series(1, 400) g;",
            f"DELETE FROM {SCHEMA}.small WHERE id BETWEEN {key}::bigint * 1000 + 1 AND {key}::bigint * 1000 + 100;"]


def session_script(seed, session, rounds, small_per_round=25, published_ddl=False):
    rng = random.Random(f"{seed}/{session}")
    counter = [0]
    lines = ["\\set ON_ERROR_STOP 1", "SET client_min_messages = warning;"]
    for round_no in range(rounds):
        lines += _small_transactions(rng, session, counter, small_per_round)
        lines += _large_record(rng, session, counter, round_no, published_ddl)
        lines += _small_transactions(rng, session, counter, rng.randrange(1, 6))
    return "\n".join(lines) + "\n"


def run_sessions(psql_command, env, seed, sessions, rounds, first_session=1, published_ddl=False, timeout_s=900):
    """Runs `sessions` psql processes concurrently, numbered from `first_session` (a session's number
    keys its rows and names its tables: later runs on the same database take new numbers); raises
    RuntimeError naming the session whose psql failed."""
    failures = []

    def one(session):
        script = session_script(seed, session, rounds, published_ddl=published_ddl)
        result = subprocess.run(psql_command, input=script, capture_output=True, text=True, env=env,
                                timeout=timeout_s)
        if result.returncode != 0:
            failures.append(f"session {session}: psql exited {result.returncode}: {result.stderr[-1500:]}")

    threads = [threading.Thread(target=one, args=(s,)) for s in range(first_session, first_session + sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError("; ".join(failures))
