"""Stalled gRPC calls from a raw socket: HTTP/2 HEADERS for a unary method, and no DATA ever; and
whole calls written before the server's SETTINGS are read.

grpcio dispatches a unary call when its headers arrive and then blocks a worker thread reading the
request body, so each such call holds one server worker for as long as the connection lives.
Hand-written HTTP/2 (the preface, SETTINGS, one HEADERS frame per call, HPACK literals without
Huffman coding) keeps the test free of an h2 dependency; a reader thread ACKs the server's
SETTINGS and PINGs so the connection stays healthy.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from pathlib import Path
from types import TracebackType

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes([kind, flags])
        + struct.pack(">I", stream)
        + payload
    )


def _literal(name: str, value: str) -> bytes:
    """HPACK "literal header field without indexing, new name", no Huffman (RFC 7541 6.2.2)."""
    n, v = name.encode(), value.encode()
    assert len(n) < 127 and len(v) < 127
    return b"\x00" + bytes([len(n)]) + n + bytes([len(v)]) + v


def headers_block(method: str) -> bytes:
    fields = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", method),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]
    return b"".join(_literal(k, v) for k, v in fields)


class StalledCalls:
    """`count` unary calls to `method` over one connection, whose bodies never arrive."""

    def __init__(self, socket_path: Path, method: str, count: int) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(socket_path))
        self._lock = threading.Lock()
        self.reset: set[int] = set()  # streams the server ended with RST_STREAM
        self._reset_seen = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._send(PREFACE + frame(SETTINGS, 0, 0))
        self._reader.start()
        block = headers_block(method)
        for i in range(count):
            self._send(frame(HEADERS, END_HEADERS, 2 * i + 1, block))  # no END_STREAM, no DATA

    def _send(self, data: bytes) -> None:
        with self._lock:
            self.sock.sendall(data)

    def _recv_exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError
            buf += chunk
        return buf

    def _read(self) -> None:
        try:
            while True:
                head = self._recv_exact(9)
                length = int.from_bytes(head[:3], "big")
                kind, flags = head[3], head[4]
                payload = self._recv_exact(length) if length else b""
                if kind == SETTINGS and not flags & ACK:
                    self._send(frame(SETTINGS, ACK, 0))
                elif kind == PING and not flags & ACK:
                    self._send(frame(PING, ACK, 0, payload))
                elif kind == RST_STREAM:
                    with self._reset_seen:
                        self.reset.add(int.from_bytes(head[5:9], "big") & 0x7FFFFFFF)
                        self._reset_seen.notify_all()
                elif kind == GOAWAY:
                    return
        except (OSError, EOFError):
            return

    def wait_reset(self, count: int, timeout: float) -> bool:
        """Until the server has reset `count` of these streams (refused or cancelled them)."""
        with self._reset_seen:
            return self._reset_seen.wait_for(lambda: len(self.reset) >= count, timeout)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._reader.join(timeout=5)

    def __enter__(self) -> StalledCalls:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def grpc_message(body: bytes) -> bytes:
    """A gRPC length-prefixed message, uncompressed."""
    return b"\x00" + struct.pack(">I", len(body)) + body


def calls_before_settings(
    socket_path: Path, method: str, body: bytes, count: int, timeout: float
) -> dict[int, str]:
    """`count` whole unary calls (HEADERS, then DATA that ends the stream), all written before
    a byte of the server's is read, as a client does that sends before the SETTINGS arrive.
    Each stream's fate: "answered" (a response message, then the end of the stream), "failed"
    (the end of the stream with no message: a status other than OK), "reset:<code>" (RST_STREAM
    with that HTTP/2 error code, 7 REFUSED_STREAM), or "unanswered" within timeout."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(socket_path))
    fate = {2 * i + 1: "unanswered" for i in range(count)}
    got_data: set[int] = set()
    try:
        block, message = headers_block(method), grpc_message(body)
        out = [PREFACE, frame(SETTINGS, 0, 0)]
        for stream in fate:
            out += [
                frame(HEADERS, END_HEADERS, stream, block),
                frame(DATA, END_STREAM, stream, message),
            ]
        sock.sendall(b"".join(out))
        sock.settimeout(timeout)
        buf = b""
        while any(v == "unanswered" for v in fate.values()):
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            buf += chunk
            while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
                length = int.from_bytes(buf[:3], "big")
                kind, flags = buf[3], buf[4]
                stream = int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
                payload, buf = buf[9 : 9 + length], buf[9 + length :]
                if kind == SETTINGS and not flags & ACK:
                    sock.sendall(frame(SETTINGS, ACK, 0))
                elif kind == PING and not flags & ACK:
                    sock.sendall(frame(PING, ACK, 0, payload))
                elif stream in fate and fate[stream] == "unanswered":
                    if kind == DATA and payload:
                        got_data.add(stream)
                    if kind == RST_STREAM:
                        fate[stream] = f"reset:{int.from_bytes(payload, 'big')}"
                    elif kind in (DATA, HEADERS) and flags & END_STREAM:
                        fate[stream] = "answered" if stream in got_data else "failed"
    except (OSError, TimeoutError):
        pass
    finally:
        sock.close()
    return fate
