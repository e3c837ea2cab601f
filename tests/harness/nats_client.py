"""A minimal NATS client for tests: the core protocol over a socket and JetStream's JSON API.

An independent reader of what `trellara forward` published (it shares no code with the C client
the command uses): stream state, one message by sequence (headers and data), deleting a message
to play a broker that lost an acknowledged record, publishing a copy to play one that duplicates
or reorders. Request/reply only; no subscriptions kept.

It also reads (and, to play a broker that delivers something again, writes) the message format of
`trellara forward` on its own (docs/broker.md "Message format"): several records per message, or
one record as an older forwarder published it.
"""
import base64
import json
import socket
import struct
import subprocess
import time

# ---- the message format (docs/broker.md "Message format"), written apart from core/src/broker/pack.cpp

PACK_MAGIC = b"TRP1"
PACK_FORMAT = "1"
PACK_FORMAT_ZSTD = "2"   # a format-1 body compressed as one zstd frame


def zstd_content(data):
    """A format-2 body's format-1 content, decompressed by the zstd command (Debian's zstd), not by
    trellara's code; raises ValueError when it is not one whole zstd frame."""
    done = subprocess.run(["zstd", "-d", "-c", "-q"], input=bytes(data), capture_output=True)
    if done.returncode != 0:
        raise ValueError(f"compressed message does not decompress: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def _crc32c_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC32C = _crc32c_table()


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def lsn_text(lsn):
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def message_records(headers, data):
    """The records a message holds, in offset order, as (offset, type, commit LSN, payload); raises
    ValueError when the message is not one trellara forward writes (a torn body among them)."""
    first = int(headers["Trellara-Offset"])
    if "Trellara-Format" not in headers and "Trellara-Count" not in headers:   # an older forwarder's record
        lsn = headers["Trellara-Commit-Lsn"].split("/")
        return [(first, int(headers["Trellara-Type"]), (int(lsn[0], 16) << 32) | int(lsn[1], 16), data)]
    if headers.get("Trellara-Format") == PACK_FORMAT_ZSTD:
        data = zstd_content(data)
    elif headers.get("Trellara-Format") != PACK_FORMAT:
        raise ValueError(f"message format {headers.get('Trellara-Format')!r}")
    count = int(headers["Trellara-Count"])
    if data[:4] != PACK_MAGIC or struct.unpack_from("<I", data, 4)[0] != count:
        raise ValueError(f"packed message of offset {first}: bad magic or count")
    records, at = [], 8
    for i in range(count):
        kind, lsn, size, crc = struct.unpack_from("<BQII", data, at)
        payload = data[at + 17:at + 17 + size]
        if len(payload) != size or crc32c(payload, crc32c(data[at:at + 13])) != crc:
            raise ValueError(f"packed message of offset {first}: offset {first + i} is torn")
        records.append((first + i, kind, lsn, payload))
        at += 17 + size
    if at != len(data):
        raise ValueError(f"packed message of offset {first}: {len(data) - at} bytes past its last record")
    return records


def pack_message(flow, identity, records, refill=None):
    """(headers, body) of a packed message holding `records` [(offset, type, commit LSN, payload)],
    named "<flow>/<identity>/<first>+<count>" (a refill: "/refill-<n>" after it)."""
    body = bytearray(PACK_MAGIC + struct.pack("<I", len(records)))
    for _offset, kind, lsn, payload in records:
        head = struct.pack("<BQI", kind, lsn, len(payload))
        body += head + struct.pack("<I", crc32c(payload, crc32c(head))) + payload
    msg_id = f"{flow}/{identity}/{records[0][0]}+{len(records)}" + (f"/refill-{refill}" if refill is not None else "")
    return ({"Nats-Msg-Id": msg_id, "Trellara-Offset": str(records[0][0]), "Trellara-Format": PACK_FORMAT,
             "Trellara-Count": str(len(records))}, bytes(body))


def single_record_message(flow, identity, record, refill=None):
    """(headers, body) of one record as a forwarder before packing published it."""
    offset, kind, lsn, payload = record
    msg_id = f"{flow}/{identity}/{offset}" + (f"/refill-{refill}" if refill is not None else "")
    return ({"Nats-Msg-Id": msg_id, "Trellara-Offset": str(offset), "Trellara-Type": str(kind),
             "Trellara-Commit-Lsn": lsn_text(lsn)}, payload)


def message_name(msg_id):
    """(flow, log identity, first offset, count) named by a message id of either form."""
    base = msg_id.split("/refill-")[0]
    flow, rest = base.split("/", 1)
    identity, last = rest.rsplit("/", 1)
    first, _, count = last.partition("+")
    return flow, identity, int(first), int(count or 1)


class NatsError(Exception):
    pass


class NatsClient:
    def __init__(self, port, host="127.0.0.1", timeout_s=5.0):
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.buffer = b""
        self.timeout_s = timeout_s
        info = self._line()
        if not info.startswith(b"INFO "):
            raise NatsError(f"not a NATS server on port {port}: {info[:80]!r}")
        self.sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true,'
                          b'"name":"trellara-test"}\r\nSUB _INBOX.t.* 1\r\nPING\r\n')
        self._expect_pong()
        self.next_request = 0

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _fill(self):
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise NatsError("the NATS server closed the connection")
        self.buffer += chunk

    def _line(self):
        while b"\r\n" not in self.buffer:
            self._fill()
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    def _bytes(self, count):
        while len(self.buffer) < count + 2:
            self._fill()
        data, self.buffer = self.buffer[:count], self.buffer[count + 2:]
        return data

    def _expect_pong(self):
        while True:
            line = self._line()
            if line == b"PONG":
                return
            if line.startswith(b"-ERR"):
                raise NatsError(line.decode(errors="replace"))

    def request(self, subject, payload=b"", headers=None):
        """One request (with `headers`, a dict, as an HPUB); returns (headers text or None, data
        bytes) of the reply."""
        self.next_request += 1
        inbox = f"_INBOX.t.{self.next_request}"
        if headers:
            block = ("NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode()
            self.sock.sendall(f"HPUB {subject} {inbox} {len(block)} {len(block) + len(payload)}\r\n".encode() + block +
                              payload + b"\r\n")
        else:
            self.sock.sendall(f"PUB {subject} {inbox} {len(payload)}\r\n".encode() + payload + b"\r\n")
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            line = self._line()
            if line == b"PING":
                self.sock.sendall(b"PONG\r\n")
                continue
            if line.startswith(b"-ERR"):
                raise NatsError(line.decode(errors="replace"))
            parts = line.split()
            if parts and parts[0] == b"MSG":
                data = self._bytes(int(parts[-1]))
                if parts[1].decode() == inbox:
                    return None, data
            elif parts and parts[0] == b"HMSG":
                total = int(parts[-1])
                header_bytes = int(parts[-2])
                body = self._bytes(total)
                if parts[1].decode() == inbox:
                    headers = body[:header_bytes].decode(errors="replace")
                    if " 503" in headers.splitlines()[0]:
                        raise NatsError(f"no responders for {subject}")
                    return headers, body[header_bytes:]
        raise NatsError(f"no reply to {subject} within {self.timeout_s}s")

    def api(self, subject, body=None):
        _, data = self.request(subject, json.dumps(body).encode() if body is not None else b"")
        reply = json.loads(data)
        if "error" in reply:
            raise NatsError(f"{subject}: {reply['error']}")
        return reply

    def publish(self, subject, headers, payload):
        """Publishes into a stream (JetStream acknowledges): the stream's sequence of the message.
        Plays a broker that delivers a copy, or delivers out of order."""
        _, data = self.request(subject, payload, headers)
        reply = json.loads(data)
        if "error" in reply:
            raise NatsError(f"{subject}: {reply['error']}")
        return reply["seq"]

    def stream_info(self, stream):
        return self.api(f"$JS.API.STREAM.INFO.{stream}")

    def stream_message(self, stream, seq):
        """(headers dict, data bytes) of the message at `seq`, or None if there is none."""
        try:
            reply = self.api(f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq})
        except NatsError as error:
            if "no message found" in str(error).lower() or "10037" in str(error):
                return None
            raise
        message = reply["message"]
        headers = {}
        if message.get("hdrs"):
            for line in base64.b64decode(message["hdrs"]).decode().splitlines()[1:]:
                if ":" in line:
                    key, value = line.split(":", 1)
                    headers[key.strip()] = value.strip()
        return headers, base64.b64decode(message.get("data", ""))

    def delete_message(self, stream, seq):
        self.api(f"$JS.API.STREAM.MSG.DELETE.{stream}", {"seq": seq, "no_erase": True})

    def stream_messages(self, stream):
        """Every message of the stream in sequence order, as (seq, headers, data)."""
        state = self.stream_info(stream)["state"]
        out = []
        if state["last_seq"] == 0:   # nothing was ever stored (first_seq is 0 too: not a sequence)
            return out
        for seq in range(state["first_seq"], state["last_seq"] + 1):
            got = self.stream_message(stream, seq)
            if got is not None:
                out.append((seq, got[0], got[1]))
        return out

    def stream_records(self, stream):
        """Every record the stream's messages hold, in stream order, as (seq, headers, offset, type,
        commit LSN, payload); `headers` are its message's."""
        return [(seq, headers) + record for seq, headers, data in self.stream_messages(stream)
                for record in message_records(headers, data)]
