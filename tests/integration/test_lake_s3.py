#!/usr/bin/env python3
"""The fleet fan-in into an S3-compatible warehouse (docs/lake.md "Object stores"): four store
clusters fanned in by `trellara lake fanin run` into `[lake] warehouse = "s3://lake/wh"` of a local
s3rver (npm s3rver, pinned in tests/lake/package.json), started by this script on 127.0.0.1 with its
own port and directory and stopped by its PID.

s3rver 3.7.1 does not check SigV4 signatures (only that the access key id exists), so the fan-in
talks to it through SigV4Gate, a proxy here that checks every request's signature with this
script's own SigV4 computation and answers 403 SignatureDoesNotMatch as S3 would.

The objects are checked without Trellara's code: fetched with plain unsigned HTTP GETs from s3rver
(which serves anonymous reads) and compared byte for byte with s3rver's own storage directory; the
metadata file parsed here, the manifest list and manifests read by npm avsc, every data file by npm
hyparquet; the change log read back replayed per store equals each store's table.

Scenarios:
  - s3_warehouse_fanin_publishes_objects_read_back_exactly: first a fan-in whose secret key is wrong:
    it fails naming the endpoint, the bucket and HTTP status 403, and the bucket stays empty; then
    the right key: every epoch is published `complete` (4/4) as objects in the bucket, each data
    object's bytes (as s3rver stored them) hashed to the address its name carries, row counts per
    store as written, `lake fanin verify` agrees, and the change log replays to every store's table.
"""
import hashlib
import hmac
import http.client
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capture_support import TRELLARA_BIN, CaptureFailure, run_scenarios, scenario  # noqa: E402
from test_lake_fanin import (READERS_DIR, STORES, Fleet, ensure_readers, node, num,  # noqa: E402
                             require_verify, wait_epoch_passed)

BUCKET = "lake"
PREFIX = "wh"
S3RVER_KEY = "S3RVER"  # s3rver's built-in account: access key id and secret access key both S3RVER
WRITES_PER_STORE = 12


def ensure_s3rver():
    ensure_readers()  # lake_readers.py: s3rver is one of the pinned packages, installed under a lock


class S3rver:
    """npm s3rver on 127.0.0.1, its own free port and temp directory, bucket `lake` created at start;
    stopped by its PID."""

    def __enter__(self):
        ensure_s3rver()
        self.base = tempfile.mkdtemp(prefix="trellara-s3rver-")
        self.directory = os.path.join(self.base, "data")
        os.mkdir(self.directory)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = open(os.path.join(self.base, "s3rver.log"), "w")
        self.process = subprocess.Popen(
            ["node", os.path.join(READERS_DIR, "node_modules", "s3rver", "bin", "s3rver.js"), "-d", self.directory,
             "-a", "127.0.0.1", "-p", str(self.port), "--no-vhost-buckets", "--configure-bucket", BUCKET],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{self.endpoint}/{BUCKET}", timeout=2).read()
                break
            except (urllib.error.URLError, ConnectionError):
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.__exit__(None, None, None)
                    raise CaptureFailure(f"s3rver did not start on {self.endpoint} (see {self.log.name})")
                time.sleep(0.2)
        print(f"s3rver pid {self.process.pid} on {self.endpoint}, directory {self.directory}")
        return self

    def __exit__(self, *exc):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        shutil.rmtree(self.base, True)
        return False

    def get(self, location):
        """An object's bytes by an unsigned HTTP GET of its s3:// location."""
        if not location.startswith(f"s3://{BUCKET}/"):
            raise CaptureFailure(f"{location} is not an object of bucket {BUCKET}")
        key = location[len(f"s3://{BUCKET}/"):]
        with urllib.request.urlopen(f"{self.endpoint}/{BUCKET}/{urllib.request.quote(key)}", timeout=30) as r:
            return r.read()

    def stored(self, location):
        """The object's bytes as s3rver keeps them in its directory (<dir>/<bucket>/<key>._S3rver_object)."""
        key = location[len(f"s3://{BUCKET}/"):]
        path = os.path.join(self.directory, BUCKET, key + "._S3rver_object")
        with open(path, "rb") as f:
            return f.read()

    def object_keys(self):
        keys = []
        for root, _dirs, files in os.walk(os.path.join(self.directory, BUCKET)):
            for f in files:
                if f.endswith("._S3rver_object"):
                    rel = os.path.relpath(os.path.join(root, f), os.path.join(self.directory, BUCKET))
                    keys.append(rel[:-len("._S3rver_object")])
        return sorted(keys)


class SigV4Gate:
    """A proxy in front of s3rver that checks every request's AWS Signature Version 4 with this
    script's own computation (hashlib/hmac, AWS's documented steps), because s3rver 3.7.1 checks
    only that the access key id exists ("Signature version 4 calculation is unimplemented" in its
    authentication middleware). A request whose signature or payload hash does not match is answered
    403 SignatureDoesNotMatch, as S3 does; a matching one is forwarded to s3rver and its answer
    relayed. Counts what it checked."""

    def __init__(self, upstream_port, access_key_id, secret):
        self.upstream_port, self.access_key_id, self.secret = upstream_port, access_key_id, secret
        self.checked, self.refused = 0, 0

    def __enter__(self):
        gate = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def answer(self, status, body=b"", headers=()):
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                if not any(k.lower() == "content-length" for k, _ in headers):
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def handle_any(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                problem = gate.check(self.command, self.path, self.headers, body)
                if problem:
                    gate.refused += 1
                    self.answer(403, ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SignatureDoesNotMatch"
                                      f"</Code><Message>{problem}</Message></Error>").encode(),
                                [("Content-Type", "application/xml")])
                    return
                gate.checked += 1
                conn = http.client.HTTPConnection("127.0.0.1", gate.upstream_port, timeout=60)
                forwarded = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body if self.command == "PUT" else None, headers=forwarded)
                r = conn.getresponse()
                data = r.read()
                keep = [(k, v) for k, v in r.getheaders() if k.lower() in ("content-type", "etag", "content-length",
                                                                             "last-modified")]
                self.answer(r.status, data, keep)
                conn.close()

            do_GET = do_PUT = do_HEAD = handle_any

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        return False

    def check(self, method, raw_path, headers, body):
        """What is wrong with the request's signature, or None."""
        auth = headers.get("Authorization", "")
        if not auth.startswith("AWS4-HMAC-SHA256 "):
            return "not signed with AWS4-HMAC-SHA256"
        fields = dict(part.strip().split("=", 1) for part in auth[len("AWS4-HMAC-SHA256 "):].split(","))
        key_id, date, region, service, terminal = fields["Credential"].split("/")
        if key_id != self.access_key_id or terminal != "aws4_request" or service != "s3":
            return f"credential scope {fields['Credential']} is not this account's"
        payload = headers.get("x-amz-content-sha256", "")
        if payload != "UNSIGNED-PAYLOAD" and payload != hashlib.sha256(body).hexdigest():
            return "x-amz-content-sha256 is not the payload's SHA-256"
        signed = fields["SignedHeaders"].split(";")
        if not {"host", "x-amz-date", "x-amz-content-sha256"} <= set(signed):
            return f"SignedHeaders {fields['SignedHeaders']} leaves out host, x-amz-date or x-amz-content-sha256"
        path, _, query = raw_path.partition("?")
        canonical = "\n".join([method, path, query,
                               "".join(f"{h}:{' '.join((headers.get(h) or '').split())}\n" for h in signed),
                               fields["SignedHeaders"], payload])
        amz_date = headers.get("x-amz-date", "")
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, f"{date}/{region}/{service}/aws4_request",
                             hashlib.sha256(canonical.encode()).hexdigest()])
        k = ("AWS4" + self.secret).encode()
        for part in (date, region, service, "aws4_request"):
            k = hmac.new(k, part.encode(), hashlib.sha256).digest()
        if not hmac.compare_digest(hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest(), fields["Signature"]):
            return "The request signature we calculated does not match the signature you provided."
        return None


def s3_settings(endpoint, secret):
    return (f's3_endpoint = "{endpoint}"\ns3_region = "us-east-1"\n'
            f's3_access_key_id = "{S3RVER_KEY}"\ns3_secret_access_key = "{secret}"\n')


def read_lake_through_s3rver(fleet, s3, scratch):
    """Every object of the items table's current snapshot, fetched by unsigned GETs, checked against
    s3rver's directory and read by avsc/hyparquet: (summary, rows, data objects)."""
    location = fleet.catalog.query("SELECT metadata_location FROM iceberg_tables WHERE catalog_name = 'fleet' "
                                   "AND table_namespace = 'fleet' AND table_name = 'public__items'")
    if not location or not location.startswith(f"s3://{BUCKET}/{PREFIX}/fleet/public__items/metadata/"):
        raise CaptureFailure(f"the catalog's metadata location of public__items is {location!r}")

    def local(loc):
        body = s3.get(loc)
        if body != s3.stored(loc):
            raise CaptureFailure(f"{loc}: the GET's bytes differ from s3rver's stored object")
        path = os.path.join(scratch, hashlib.sha256(loc.encode()).hexdigest()[:16] + "-" + loc.rsplit("/", 1)[-1])
        with open(path, "wb") as f:
            f.write(body)
        return path, body

    metadata = json.loads(local(location)[1])
    if metadata["location"] != f"s3://{BUCKET}/{PREFIX}/fleet/public__items":
        raise CaptureFailure(f"the table metadata's location is {metadata['location']}")
    current = next(s for s in metadata["snapshots"] if s["snapshot-id"] == metadata["current-snapshot-id"])
    rows, data_objects = [], []
    for manifest in node("read_avro.mjs", local(current["manifest-list"])[0])["records"]:
        for entry in node("read_avro.mjs", local(manifest["manifest_path"])[0])["records"]:
            data_location = entry["data_file"]["file_path"]
            path, body = local(data_location)
            if hashlib.sha256(body).hexdigest() not in data_location.rsplit("/", 1)[-1]:
                raise CaptureFailure(f"{data_location}: its bytes do not hash to the address its name carries")
            if len(body) != num(entry["data_file"]["file_size_in_bytes"]):
                raise CaptureFailure(f"{data_location}: {len(body)} bytes, its manifest says "
                                     f"{entry['data_file']['file_size_in_bytes']}")
            data = node("read_parquet.mjs", path)
            if num(data["footer"]["num_rows"]) != num(entry["data_file"]["record_count"]):
                raise CaptureFailure(f"{data_location}: {data['footer']['num_rows']} rows, its manifest says "
                                     f"{entry['data_file']['record_count']}")
            rows.extend(data["rows"])
            data_objects.append(data_location)
    return current["summary"], rows, data_objects


def expected_changes(count):
    """What Fleet.write(k, 1, count) changes: each insert, an update of the row before, every fifth a delete."""
    return count + (count - 1) + sum(1 for i in range(1, count + 1) if i % 5 == 4)


@scenario(suite="lake",
          invariants=("a wrong secret key: the fan-in fails naming the S3 endpoint, the bucket and HTTP status 403, "
                      "and writes no object",
                      "every epoch is published complete (4/4) as objects of the s3:// warehouse",
                      "every data object, fetched by unsigned GET and equal to s3rver's stored bytes, hashes to the "
                      "address in its name and is read by npm hyparquet with its manifest's row count",
                      "rows per store as written; lake fanin verify agrees; the change log replays to every "
                      "store's table"))
def s3_warehouse_fanin_publishes_objects_read_back_exactly():
    with S3rver() as s3, SigV4Gate(s3.port, S3RVER_KEY, S3RVER_KEY) as gate, \
            tempfile.TemporaryDirectory(prefix="trellara-lake-s3-read-") as scratch:
        warehouse = f"s3://{BUCKET}/{PREFIX}"
        with Fleet("lake-s3", warehouse=warehouse, lake_settings=s3_settings(gate.endpoint, "not-the-secret")) as fleet:
            for k in range(STORES):
                fleet.write(k, 1, WRITES_PER_STORE)
            wait_epoch_passed(fleet)
            # 1. The wrong secret: refused by the server, named, nothing written.
            refused, done = None, None
            for _ in range(40):
                fleet.tick()
                done = fleet.run(expect=None)
                if done.returncode != 0:
                    refused = done
                    break
                time.sleep(0.5)
            if refused is None:
                raise CaptureFailure(f"the fan-in with a wrong secret key never failed: {done.stderr[-2000:]} "
                                     f"plan: {fleet.plan()['epochs']}")
            message = refused.stderr
            for needed in (gate.endpoint, f"bucket {BUCKET}", "HTTP status 403", "s3_secret_access_key"):
                if needed not in message:
                    raise CaptureFailure(f"the wrong-secret failure does not name {needed!r}: {message[-1500:]}")
            if s3.object_keys():
                raise CaptureFailure(f"objects were written with a wrong secret key: {s3.object_keys()[:5]}")
            print(f"wrong secret key refused (exit {refused.returncode}): {message.strip().splitlines()[-1][:300]}")
            # 2. The right secret, in the same configuration.
            with open(fleet.config) as f:
                text = f.read()
            with open(fleet.config, "w") as f:
                f.write(text.replace('s3_secret_access_key = "not-the-secret"', f's3_secret_access_key = "{S3RVER_KEY}"'))
            plan = fleet.settle({"complete"})
            for e in plan["epochs"]:
                if e["completeness"] != "4/4 complete, 0 missing, 0 quarantined":
                    raise CaptureFailure(f"{e['epoch']}: {e['completeness']}")
            if gate.checked == 0 or gate.refused == 0:
                raise CaptureFailure(f"the signature gate checked {gate.checked} requests and refused {gate.refused}")
            keys = s3.object_keys()
            if not keys or not all(k.startswith(f"{PREFIX}/fleet/") for k in keys):
                raise CaptureFailure(f"the bucket holds {keys[:10]}")
            summary, rows, data_objects = read_lake_through_s3rver(fleet, s3, scratch)
            for k in range(STORES):
                mine = sum(1 for r in rows if r["_source"] == f"store-0{k + 1}")
                if mine != expected_changes(WRITES_PER_STORE):
                    raise CaptureFailure(f"store-0{k + 1}: {mine} rows in the lake's data objects, "
                                         f"{expected_changes(WRITES_PER_STORE)} changes written")
            if summary.get("trellara.epoch-state") != "complete":
                raise CaptureFailure(f"the current snapshot's summary says {summary}")
            report = require_verify(fleet, "s3 warehouse")
            if report["data_files_checked"] < len(data_objects):
                raise CaptureFailure(f"verify checked {report['data_files_checked']} data files; the bucket holds "
                                     f"{len(data_objects)} of public__items alone")
            fleet.lake_rows = lambda table="public__items": read_lake_through_s3rver(fleet, s3, scratch)[:2]
            fleet.assert_lake_equals_stores("s3 warehouse")
            print(f"{gate.checked} requests with good signatures forwarded, {gate.refused} refused; "
                  f"{len(keys)} objects in s3://{BUCKET}/{PREFIX}, {len(data_objects)} data objects of public__items, "
                  f"{len(rows)} rows read back by hyparquet")
        print("ok: s3_warehouse_fanin_publishes_objects_read_back_exactly")


@scenario(suite="lake",
          invariants=("an s3:// warehouse without s3_endpoint, without keys, with both keys and a credentials file, "
                      "or with a bad bucket name is refused (exit 2) naming the setting",
                      "s3_* settings with a directory warehouse are refused naming the setting",
                      "a credentials file's [default] keys are accepted in place of the settings"))
def s3_warehouse_settings_are_refused_naming_the_setting():
    with tempfile.TemporaryDirectory(prefix="trellara-lake-s3-config-") as work:
        credentials = os.path.join(work, "credentials")
        with open(credentials, "w") as f:
            f.write("[other]\naws_access_key_id = NO\n\n[default]\naws_access_key_id = S3RVER\n"
                    "aws_secret_access_key = S3RVER\n")
        endpoint = 's3_endpoint = "http://127.0.0.1:9"\n'
        keys = 's3_access_key_id = "a"\ns3_secret_access_key = "b"\n'
        cases = [
            ("s3://lake/wh", keys, "lake.s3_endpoint"),
            ("s3://lake/wh", endpoint, "lake.s3_access_key_id"),
            ("s3://lake/wh", endpoint + 's3_access_key_id = "a"\n', "lake.s3_secret_access_key"),
            ("s3://lake/wh", endpoint + keys + f'credentials = "{credentials}"\n', "lake.credentials"),
            ("s3://lake/wh", 's3_endpoint = "http://127.0.0.1:9/path"\n' + keys, "lake.s3_endpoint"),
            ("s3://Lake_Bucket/wh", endpoint + keys, "lake.warehouse"),
            ("s3://lake/wh", endpoint + keys + 's3_bucket = "x"\n', "lake.s3_bucket"),
            (os.path.join(work, "wh"), endpoint, "lake.s3_endpoint"),
            ("s3://lake/wh", endpoint + f'credentials = "{os.path.join(work, "none")}"\n', "lake.credentials"),
        ]
        config = os.path.join(work, "lake.toml")
        for warehouse, settings, named in cases:
            with open(config, "w") as f:
                f.write(f'[lake]\nname = "fleet"\nwarehouse = "{warehouse}"\ncatalog = "host=/nonexistent dbname=x"\n'
                        f'{settings}\n[[store]]\nname = "store-01"\nlog_directory = "/nonexistent"\n')
            done = subprocess.run([TRELLARA_BIN, "lake", "plan", "--config", config], capture_output=True, text=True,
                                  timeout=60)
            if done.returncode != 2 or f"configuration {config}: {named} " not in done.stderr:
                raise CaptureFailure(f"warehouse {warehouse} with {settings!r}: exit {done.returncode}, expected 2 "
                                     f"naming {named}: {done.stderr.strip()[-500:]}")
            print(f"refused naming {named}: {done.stderr.strip()[-160:]}")
        # The credentials file alone passes the configuration (it then fails on the catalog, not the setting).
        with open(config, "w") as f:
            f.write(f'[lake]\nname = "fleet"\nwarehouse = "s3://lake/wh"\ncatalog = "host=/nonexistent dbname=x"\n'
                    f'{endpoint}credentials = "{credentials}"\n\n[[store]]\nname = "store-01"\nlog_directory = "/nonexistent"\n')
        done = subprocess.run([TRELLARA_BIN, "lake", "plan", "--config", config], capture_output=True, text=True,
                              timeout=60)
        if "configuration" in done.stderr or "catalog" not in done.stderr:
            raise CaptureFailure(f"a credentials file's [default] keys were not accepted: {done.stderr.strip()[-500:]}")
    print("ok: s3_warehouse_settings_are_refused_naming_the_setting")


if __name__ == "__main__":
    run_scenarios([s3_warehouse_fanin_publishes_objects_read_back_exactly,
                   s3_warehouse_settings_are_refused_naming_the_setting])
