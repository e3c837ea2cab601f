"""A minimal NATS client for tests: the core protocol over a socket and JetStream's JSON API.

An independent reader of what `trellara forward` published (it shares no code with the C client
the command uses): stream state, one message by sequence (headers and data), deleting a message
to play a broker that lost an acknowledged record, publishing a copy to play one that duplicates
or reorders. Request/reply only; no subscriptions kept.
"""
import base64
import json
import socket
import time


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
