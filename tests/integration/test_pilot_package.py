#!/usr/bin/env python3
"""Integration: `trellara pilot-package --config F --output DIR`, the proof bundle a DBA hands to a
reviewer (docs/pilot-package.md), against a real source and target.

Source: two tables (orders, items) in publication pub, flow app; the target has the same tables.
A few transactions are applied with `trellara apply --until-caught-up`, then a daemon applier runs
beside the scenarios (verify holds it at the source's point). Scenarios (in this order):
  - healthy_flow_bundle_passes: exit 0; every artefact file present; each manifest digest and size
    equals hashlib's over the file; `sha256sum -c SHA256SUMS` passes; the sample transaction is the
    newest applied one (its commit LSN is the one status reports applied); verify says match;
  - missing_report_is_recorded_and_exits_1: run from a directory without docs/correctness-report.html:
    exit 1, the manifest records the report as missing (no file, no digest), the message says how to
    generate it, and the other artefacts are still written and verifiable;
  - non_empty_output_is_refused: a directory holding a file is refused (exit 2, message says so,
    nothing written into it); with --force the bundle is written there (a stale manifest.json
    replaced, the other file untouched); a missing --output is a usage error (exit 2);
  - verify_mismatch_is_recorded_not_hidden: a row deleted behind the applier's back on the target:
    exit 1, verify.json present with status mismatch, manifest verify result fail with exit code 1.
The pair is a FlowPair (tests/integration/flow_pair.py). It must never leave a cluster or an
applier running (the harness stops clusters by PID; the applier is our child, stopped by its Popen
handle).
"""

import hashlib
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from capture_support import CaptureFailure, TRELLARA_BIN, log_records, run_scenarios, wait_for  # noqa: E402
from flow_pair import FlowPair, run_trellara  # noqa: E402

SCHEMA = ("CREATE TABLE orders (id bigint PRIMARY KEY, note text); "
          "CREATE TABLE items (id bigint PRIMARY KEY, qty int); ")
ARTEFACTS = ("check.json", "sample-transaction.txt", "sample-transaction.json", "snapshot.json", "verify.json",
             "status.json", "correctness-report.html")
BUNDLE_FILES = ARTEFACTS + ("manifest.json", "SHA256SUMS", "proof-bundle.md")


def pilot_package(config, output, *args, cwd=None):
    return subprocess.run([TRELLARA_BIN, "pilot-package", "--config", config, "--output", output, *args],
                          capture_output=True, text=True, timeout=300, cwd=cwd)


def expect_exit(result, code, what):
    if result.returncode != code:
        raise CaptureFailure(f"{what}: pilot-package exited {result.returncode}, expected {code}\n"
                             f"stdout: {result.stdout[-3000:]}\nstderr: {result.stderr[-3000:]}")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def manifest_of(bundle):
    with open(os.path.join(bundle, "manifest.json")) as f:
        return json.load(f)


def check_digests(bundle, manifest):
    """Every present artefact's manifest digest and size equal the file's; SHA256SUMS verifies with
    sha256sum and lists every file of the bundle but itself."""
    for artefact in manifest["artefacts"]:
        path = os.path.join(bundle, artefact["file"])
        if not artefact["present"]:
            if os.path.exists(path):
                raise CaptureFailure(f"{artefact['file']} is recorded as not present but exists")
            continue
        if artefact["sha256"] != sha256(path) or artefact["bytes"] != os.path.getsize(path):
            raise CaptureFailure(f"manifest digest of {artefact['file']} {artefact['sha256']}/{artefact['bytes']} "
                                 f"!= file {sha256(path)}/{os.path.getsize(path)}")
    check = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=bundle, capture_output=True, text=True)
    if check.returncode != 0:
        raise CaptureFailure(f"sha256sum -c SHA256SUMS failed: {check.stdout}{check.stderr}")
    with open(os.path.join(bundle, "SHA256SUMS")) as f:
        listed = {line.split("  ", 1)[1].strip(): line.split("  ", 1)[0] for line in f if line.strip()}
    expected = {name for name in os.listdir(bundle) if name != "SHA256SUMS"}
    if set(listed) != expected:
        raise CaptureFailure(f"SHA256SUMS lists {sorted(listed)}, the bundle holds {sorted(expected)}")
    for name, digest in listed.items():
        if digest != sha256(os.path.join(bundle, name)):
            raise CaptureFailure(f"SHA256SUMS digest of {name} differs from hashlib's")


def by_file(manifest):
    return {a["file"]: a for a in manifest["artefacts"]}


def healthy_flow_bundle_passes(env):
    bundle = os.path.join(env["work"], "bundle-healthy")
    result = pilot_package(env["config"], bundle, "--report", env["report"])
    expect_exit(result, 0, "healthy flow")
    for name in BUNDLE_FILES:
        if not os.path.isfile(os.path.join(bundle, name)):
            raise CaptureFailure(f"{name} missing from the bundle: {sorted(os.listdir(bundle))}")
    manifest = manifest_of(bundle)
    artefacts = by_file(manifest)
    if set(artefacts) != set(ARTEFACTS):
        raise CaptureFailure(f"manifest artefacts {sorted(artefacts)} != {sorted(ARTEFACTS)}")
    if manifest["verdict"] != "pass" or manifest["flow"] != "app" or manifest["config_path"] != env["config"] \
            or not manifest["created_at"].endswith("Z") or not manifest["tool_version"]:
        raise CaptureFailure(f"manifest header: {json.dumps({k: v for k, v in manifest.items() if k != 'artefacts'})}")
    for name, artefact in artefacts.items():
        if not artefact["ok"] or artefact["result"] != "pass" or not artefact["command"]:
            raise CaptureFailure(f"{name} not ok in a healthy bundle: {artefact}")
    for name in ("check.json", "verify.json", "status.json", "sample-transaction.json"):
        if artefacts[name]["exit_code"] != 0 or TRELLARA_BIN.split("/")[-1] not in artefacts[name]["command"]:
            raise CaptureFailure(f"{name}: exit code / command {artefacts[name]}")
    if artefacts["snapshot.json"]["exit_code"] is not None or artefacts["correctness-report.html"]["exit_code"] is not None:
        raise CaptureFailure(f"the snapshot query and the report copy are not processes: {artefacts}")
    check_digests(bundle, manifest)

    with open(os.path.join(bundle, "verify.json")) as f:
        verify = json.load(f)
    if {t["status"] for t in verify["tables"]} != {"match"} or len(verify["tables"]) != 2:
        raise CaptureFailure(f"verify.json in a healthy bundle: {verify}")
    with open(os.path.join(bundle, "status.json")) as f:
        status = json.load(f)
    with open(os.path.join(bundle, "sample-transaction.json")) as f:
        sample = json.load(f)
    # Nothing was written since apply caught up: the newest applied transaction record is the log's
    # last envelope or commit marker.
    transactions = [r for r in log_records(env["log_dir"]) if r["type"] in ("envelope", "commit_marker")]
    newest = transactions[-1]
    if status["consumer_offset"] is None or newest["offset"] >= status["consumer_offset"]:
        raise CaptureFailure(f"the log's last transaction {newest} is not applied: {status}")
    if sample["tx"]["commit_lsn"] != newest["commit_lsn"] or sample["checksum_status"] != "match" \
            or f"log offset {newest['offset']} " not in artefacts["sample-transaction.json"]["detail"]:
        raise CaptureFailure(f"sample transaction {sample['tx']} ({sample['checksum_status']}, "
                             f"{artefacts['sample-transaction.json']['detail']}) is not the newest applied one {newest}")
    with open(os.path.join(bundle, "sample-transaction.txt")) as f:
        if newest["commit_lsn"] not in f.read():
            raise CaptureFailure("sample-transaction.txt does not show the sampled commit LSN")
    newest = newest["commit_lsn"]
    if status["flow"] != "app" or status["state"] in ("blocked", "target_unreachable"):
        raise CaptureFailure(f"status.json: {status}")
    with open(os.path.join(bundle, "snapshot.json")) as f:
        snapshot = json.load(f)
    if snapshot["flow"] != "app" or snapshot["tables"] != []:
        raise CaptureFailure(f"snapshot.json (no snapshot was taken): {snapshot}")
    with open(os.path.join(bundle, "correctness-report.html"), "rb") as src, open(env["report"], "rb") as orig:
        if src.read() != orig.read():
            raise CaptureFailure("correctness-report.html is not a copy of --report")
    with open(os.path.join(bundle, "proof-bundle.md")) as f:
        md = f.read()
    if "Verdict: **PASS**" not in md or "sha256sum -c SHA256SUMS" not in md or artefacts["check.json"]["sha256"] not in md:
        raise CaptureFailure(f"proof-bundle.md: {md[:2000]}")
    print(f"healthy bundle: {len(BUNDLE_FILES)} files, sample at {newest}")


def missing_report_is_recorded_and_exits_1(env):
    bundle = os.path.join(env["work"], "bundle-no-report")
    cwd = os.path.join(env["work"], "elsewhere")  # no docs/correctness-report.html under it
    os.makedirs(cwd, exist_ok=True)
    result = pilot_package(env["config"], bundle, cwd=cwd)
    expect_exit(result, 1, "missing correctness report")
    if "chaos report --output docs/correctness-report.html" not in result.stderr:
        raise CaptureFailure(f"the message must say how to generate the report: {result.stderr}")
    manifest = manifest_of(bundle)
    report = by_file(manifest)["correctness-report.html"]
    if report["result"] != "missing" or report["ok"] or report["present"] or report["sha256"] is not None \
            or os.path.join(cwd, "docs", "correctness-report.html") not in report["command"]:
        raise CaptureFailure(f"the manifest must record the report as missing: {report}")
    if manifest["verdict"] != "fail":
        raise CaptureFailure(f"verdict with a missing report: {manifest['verdict']}")
    others = [a for a in manifest["artefacts"] if a["file"] != "correctness-report.html"]
    if not all(a["ok"] and a["present"] for a in others):
        raise CaptureFailure(f"the other artefacts must still be written: {others}")
    with open(os.path.join(bundle, "proof-bundle.md")) as f:
        md = f.read()
    if "Verdict: **FAIL**" not in md or "| correctness-report.html | missing |" not in md:
        raise CaptureFailure(f"proof-bundle.md must show the missing report: {md[:2000]}")
    check_digests(bundle, manifest)
    print(f"missing report: {result.stderr.strip()[-300:]}")


def non_empty_output_is_refused(env):
    bundle = os.path.join(env["work"], "bundle-occupied")
    os.makedirs(bundle)
    keep = os.path.join(bundle, "keep.txt")
    with open(keep, "w") as f:
        f.write("do not touch\n")
    result = pilot_package(env["config"], bundle, "--report", env["report"])
    expect_exit(result, 2, "non-empty output directory")
    if "not empty" not in result.stderr or "--force" not in result.stderr:
        raise CaptureFailure(f"the refusal must say why and what to do: {result.stderr}")
    if os.listdir(bundle) != ["keep.txt"]:
        raise CaptureFailure(f"a refused run wrote into {bundle}: {os.listdir(bundle)}")
    # --force writes the bundle there, replacing only the bundle's own files.
    with open(os.path.join(bundle, "manifest.json"), "w") as f:
        f.write("stale manifest of an earlier bundle\n")
    forced = pilot_package(env["config"], bundle, "--report", env["report"], "--force")
    expect_exit(forced, 0, "--force into a non-empty directory")
    with open(keep) as f:
        if f.read() != "do not touch\n":
            raise CaptureFailure("--force changed a file that is not the bundle's")
    if manifest_of(bundle)["verdict"] != "pass" or set(os.listdir(bundle)) != set(BUNDLE_FILES) | {"keep.txt"}:
        raise CaptureFailure(f"--force bundle: {sorted(os.listdir(bundle))}")
    usage = subprocess.run([TRELLARA_BIN, "pilot-package", "--config", env["config"]], capture_output=True, text=True,
                           timeout=60)
    if usage.returncode != 2 or "--output" not in usage.stderr:
        raise CaptureFailure(f"without --output: exit {usage.returncode}, stderr {usage.stderr}")
    print(f"refused: {result.stderr.strip()}")


def verify_mismatch_is_recorded_not_hidden(env):
    env["target"].query("DELETE FROM items WHERE id = 1")
    bundle = os.path.join(env["work"], "bundle-mismatch")
    result = pilot_package(env["config"], bundle, "--report", env["report"])
    expect_exit(result, 1, "verify mismatch")
    manifest = manifest_of(bundle)
    verify = by_file(manifest)["verify.json"]
    if verify["result"] != "fail" or verify["exit_code"] != 1 or not verify["present"] or "MISMATCH" not in verify["detail"]:
        raise CaptureFailure(f"the manifest must record verify's mismatch: {verify}")
    with open(os.path.join(bundle, "verify.json")) as f:
        tables = {t["table"]: t["status"] for t in json.load(f)["tables"]}
    if "mismatch" not in tables.values():
        raise CaptureFailure(f"verify.json must show the mismatch: {tables}")
    if "verify.json fail" not in result.stderr:
        raise CaptureFailure(f"the message must name the failed artefact: {result.stderr}")
    check_digests(bundle, manifest)
    print(f"mismatch recorded: {tables}")


def start_applier(config):
    applier = subprocess.Popen([TRELLARA_BIN, "apply", "--config", config], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)

    def running():
        if applier.poll() is not None:
            raise CaptureFailure(f"the applier exited {applier.returncode}: {applier.stderr.read()[-1500:]}")
        status = run_trellara(["status", "--config", config, "--format", "json"], expect=None, timeout_s=60)
        return status.returncode == 0 and json.loads(status.stdout).get("applier_running")
    wait_for("the applier to run", running, 60)
    return applier


if __name__ == "__main__":
    with FlowPair("pilot", source_sql=SCHEMA, tables=("orders", "items")) as pair:
        pair.source.query("INSERT INTO orders VALUES (1, 'a'), (2, 'b')")
        pair.source.query("INSERT INTO items VALUES (1, 3)")
        pair.source.query("UPDATE orders SET note = 'c' WHERE id = 2")
        pair.wait_log_covers_source()
        pair.apply()
        report = os.path.join(pair.work.name, "report.html")
        with open(report, "w") as f:
            f.write("<html><body>correctness report stand-in for the test</body></html>\n")
        applier = start_applier(pair.config)
        try:
            env = {"source": pair.source, "target": pair.target, "work": pair.work.name, "config": pair.config,
                   "report": report, "log_dir": pair.log_dir}
            run_scenarios([healthy_flow_bundle_passes,
                           missing_report_is_recorded_and_exits_1,
                           non_empty_output_is_refused,
                           verify_mismatch_is_recorded_not_hidden], env)
        finally:
            applier.terminate()
            applier.communicate(timeout=60)
