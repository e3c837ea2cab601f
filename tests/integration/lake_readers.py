"""The npm readers of the lake tests (tests/lake/package.json, pinned by its package-lock.json):
installed once with `npm ci` when one is missing. Several lake scripts run at once (tests/run-all
runs three at a time) and two concurrent `npm ci` in one directory break each other (ENOTEMPTY, seen
in CI), so the install holds an exclusive lock on tests/lake/.npm-ci.lock and looks again once it
has it. Never skips: no node or npm is a failure saying what to install."""
import fcntl
import os
import shutil
import subprocess

from capture_support import SOURCE_DIR, CaptureFailure

READERS_DIR = os.path.join(SOURCE_DIR, "tests", "lake")
PACKAGES = ("hyparquet", "hyparquet-compressors", "@duckdb/node-api", "avsc", "icebird", "s3rver")


def installed():
    modules = os.path.join(READERS_DIR, "node_modules")
    return all(os.path.exists(os.path.join(modules, package, "package.json")) for package in PACKAGES)


def ensure_readers():
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            raise CaptureFailure(f"{tool} is not installed: the lake tests read the lake with npm hyparquet, avsc and "
                                 "icebird; install Node.js (with npm) and run again")
    if installed():
        return
    with open(os.path.join(READERS_DIR, ".npm-ci.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not installed():
            print(f"npm ci in tests/lake ({', '.join(PACKAGES)})", flush=True)
            subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=READERS_DIR, check=True)
