#!/usr/bin/env python3
"""Integration: the extension inside real backends, preloaded and not.

Checks that the library works both when loaded through shared_preload_libraries and when only
CREATE EXTENSION loads it, and that trellara.envelope_json() answers every mutated record with
either a rendering or ERROR 22P03 -- never another SQLSTATE, never a crashed backend, never a
restarted postmaster. The mutations are seeded: the seed is printed and TRELLARA_SEED=<n>
reproduces a run. Defect faults (negative controls) need an explicit switch in both adapters: a
server whose environment names a `defect.*` point in TRELLARA_FAULTS does not start unless
trellara.enable_test_defects = on (superuser-only, postmaster-level), and the `trellara` command
exits 2 unless given --enable-test-defects; each refusal names the variable, the point and the
switch. This test must never leave a cluster running (the harness stops it by PID).
Bare clusters, not FlowPair: no check here runs a flow (one server each, some must refuse to start).
"""

import contextlib
import io
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import TRELLARA_BIN  # noqa: E402
from harness import Cluster, ClusterError  # noqa: E402

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


DEFECT_SPEC = "defect.t_switch_check:1:defect"


@contextlib.contextmanager
def server_environment(**variables):
    """Environment variables for the servers started inside (pg_ctl inherits ours); restored after."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def check_server_refuses_a_defect_without_its_switch():
    captured = io.StringIO()
    with server_environment(TRELLARA_FAULTS=DEFECT_SPEC):
        try:
            with contextlib.redirect_stderr(captured):  # the harness prints the server log tail there
                with Cluster("defect-refused"):
                    pass
        except ClusterError:
            pass
        else:
            raise AssertionError("a server with a defect in TRELLARA_FAULTS started without trellara.enable_test_defects")
    log = captured.getvalue()
    for needle in ("TRELLARA_FAULTS", "defect.t_switch_check", "trellara.enable_test_defects"):
        assert needle in log, f"the refusal does not name {needle!r}; server log tail:\n{log[-2000:]}"
    print("ok: a server whose TRELLARA_FAULTS names a defect does not start without trellara.enable_test_defects")

    with server_environment(TRELLARA_FAULTS=DEFECT_SPEC):
        with Cluster("defect-allowed", settings={"trellara.enable_test_defects": "on"}) as cluster:
            assert cluster.query("SHOW trellara.enable_test_defects") == "on"
            cluster.query("CREATE ROLE regress_not_super LOGIN")
            shown = cluster.psql("SET ROLE regress_not_super; SHOW trellara.enable_test_defects", check=False)
            assert shown.returncode != 0 and "trellara.enable_test_defects" in shown.stderr, \
                f"a non-superuser can read the switch: {shown.stdout} {shown.stderr}"
            changed = cluster.psql("SET trellara.enable_test_defects = off", check=False)
            assert changed.returncode != 0 and "without restarting" in changed.stderr, \
                f"the switch changed in a session: {changed.stderr}"
    with Cluster("defect-default") as cluster:
        assert cluster.query("SHOW trellara.enable_test_defects") == "off", "the switch is not off by default"
    print("ok: trellara.enable_test_defects is off by default, superuser-only and fixed at server start")


def check_command_refuses_a_defect_without_its_flag():
    env = dict(os.environ, TRELLARA_FAULTS=DEFECT_SPEC)
    refused = subprocess.run([TRELLARA_BIN, "log", "inspect", "--dir", "/nonexistent-trellara-log"],
                             capture_output=True, text=True, env=env, timeout=60)
    assert refused.returncode == 2, f"exit {refused.returncode}, expected 2: {refused.stderr}"
    for needle in ("TRELLARA_FAULTS", "defect.t_switch_check", "--enable-test-defects"):
        assert needle in refused.stderr, f"the refusal does not name {needle!r}: {refused.stderr}"
    allowed = subprocess.run([TRELLARA_BIN, "--enable-test-defects", "log", "inspect", "--dir",
                              "/nonexistent-trellara-log"], capture_output=True, text=True, env=env, timeout=60)
    assert "defect.t_switch_check" not in allowed.stderr, f"refused despite the flag: {allowed.stderr}"
    print("ok: the trellara command refuses a defect in TRELLARA_FAULTS without --enable-test-defects (exit 2)")


def main():
    seed = int(os.environ.get("TRELLARA_SEED", random.SystemRandom().randrange(2**32)))
    print(f"test_extension_backend: seed {seed} (reproduce with TRELLARA_SEED={seed})")
    check_extension_works_without_preload()
    check_mutated_records_never_crash_the_backend(seed)
    check_server_refuses_a_defect_without_its_switch()
    check_command_refuses_a_defect_without_its_flag()


if __name__ == "__main__":
    main()
