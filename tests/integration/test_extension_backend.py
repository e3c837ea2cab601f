#!/usr/bin/env python3
"""Integration: the extension inside real backends, preloaded and not.

Checks that the library works both when loaded through shared_preload_libraries and when only
CREATE EXTENSION loads it, and that trellara.envelope_json() answers every mutated record with
either a rendering or ERROR 22P03 -- never another SQLSTATE, never a crashed backend, never a
restarted postmaster. The mutations are seeded: the seed is printed and TRELLARA_SEED=<n>
reproduces a run. This test must never leave a cluster running (the harness stops it by PID).
"""

import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from harness import Cluster  # noqa: E402

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = ["envelope", "chunk", "manifest", "commit-marker"]
MUTATIONS_PER_FIXTURE = 150

# Returns 'ok' for a rendered record, else the SQLSTATE of the error it raised.
TRY_RENDER = """
CREATE FUNCTION try_render(record bytea) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  PERFORM trellara.envelope_json(record);
  RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE;
END
$$;
"""


def fixture_bytes(name):
    with open(os.path.join(SOURCE_DIR, "tests", "fixtures", f"{name}-sample.hex")) as hex_file:
        return bytes.fromhex(hex_file.read().strip())


def mutate(rng, record):
    data = bytearray(record)
    kind = rng.choice(["flip", "truncate", "extend", "splice", "zero"])
    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            position = rng.randrange(len(data))
            data[position] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        del data[rng.randrange(len(data)):]
    elif kind == "extend":
        data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    elif kind == "splice":
        start = rng.randrange(len(data))
        data[start:start + rng.randint(1, 16)] = bytes(rng.randrange(256) for _ in range(rng.randint(0, 16)))
    else:
        start = rng.randrange(len(data))
        data[start:start + rng.randint(1, 32)] = bytes(rng.randint(1, 32))
    return bytes(data)


def check_extension_works_without_preload():
    with Cluster("no-preload", preload=False) as cluster:
        assert cluster.query("SHOW shared_preload_libraries") == "", "cluster was preloaded"
        cluster.query("CREATE EXTENSION trellara")
        assert cluster.query("SELECT trellara.version()") == cluster.query(
            "SELECT extversion FROM pg_extension WHERE extname = 'trellara'")
        record_type = cluster.query(
            f"SELECT trellara.envelope_json('\\x{fixture_bytes('envelope').hex()}')->>'type'")
        assert record_type == "envelope", f"expected an envelope, rendered {record_type!r}"
        print("ok: CREATE EXTENSION without shared_preload_libraries loads and renders")


def check_mutated_records_never_crash_the_backend(seed):
    rng = random.Random(seed)
    with Cluster("mutations") as cluster:
        assert cluster.query("SHOW shared_preload_libraries") == "trellara"
        cluster.query("CREATE EXTENSION trellara")
        cluster.query(TRY_RENDER)
        postmaster_before = cluster.pid
        results = {}
        for name in FIXTURES:
            record = fixture_bytes(name)
            values = ",".join(f"'\\x{mutate(rng, record).hex()}'::bytea" for _ in range(MUTATIONS_PER_FIXTURE))
            rows = cluster.query(
                f"SELECT try_render(r), count(*) FROM unnest(ARRAY[{values}]) AS r GROUP BY 1 ORDER BY 1")
            for row in rows.splitlines():
                outcome, count = row.split("|")
                results[(name, outcome)] = int(count)
        print(f"seed {seed}: outcomes per fixture: {results}")
        unexpected = {key: count for key, count in results.items() if key[1] not in ("ok", "22P03")}
        assert not unexpected, f"seed {seed}: outcomes other than ok/22P03: {unexpected}"
        assert sum(count for (_, outcome), count in results.items() if outcome == "22P03") > 0, \
            f"seed {seed}: no mutation was rejected; the mutator is not mutating"
        assert cluster.query("SELECT trellara.version()") != ""
        assert cluster.backend_crashes() == [], f"seed {seed}: crashed backends: {cluster.backend_crashes()}"
        assert cluster.is_running() and cluster.pid == postmaster_before, \
            f"seed {seed}: postmaster restarted ({postmaster_before} -> {cluster.pid})"
        print(f"ok: {len(FIXTURES) * MUTATIONS_PER_FIXTURE} mutated records, no crash (seed {seed})")


def main():
    seed = int(os.environ.get("TRELLARA_SEED", random.SystemRandom().randrange(2**32)))
    print(f"test_extension_backend: seed {seed} (reproduce with TRELLARA_SEED={seed})")
    check_extension_works_without_preload()
    check_mutated_records_never_crash_the_backend(seed)


if __name__ == "__main__":
    main()
