"""A WebSub subscriber's callback for tests: a real HTTP server on a free local port that
records every request (verifications and deliveries) and answers as told."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


@dataclass
class Call:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    arrived: float = field(default_factory=time.monotonic)


class Server(ThreadingHTTPServer):
    request_queue_size = 1024  # many deliveries connect at once
    daemon_threads = True


class CallbackServer:
    """`verify`: "echo" answers the challenge, "wrong" answers something else, "refuse"
    answers 404, "split" echoes it in two pieces a moment apart, "endless" echoes it and
    then sends bytes until the hub hangs up. `statuses`: what deliveries are answered, in
    turn (the last repeats); `endless_deliveries`: each with a body that never ends."""

    def __init__(self, *, verify: str = "echo", statuses: list[int] | None = None,
                 endless_deliveries: bool = False):
        self.verify, self.statuses = verify, list(statuses or [204])
        self.endless_deliveries = endless_deliveries
        self.calls: list[Call] = []
        self.arrived = threading.Condition()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def record(self) -> Call:
                url = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                call = Call(self.command, url.path,
                            {k: v[0] for k, v in parse_qs(url.query).items()},
                            {k.lower(): v for k, v in self.headers.items()},
                            self.rfile.read(length))
                with server.arrived:
                    server.calls.append(call)
                    server.arrived.notify_all()
                return call

            def answer(self, status: int, body: bytes = b"") -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def endless(self, status: int, start: bytes = b"") -> None:
                """A body without a length that goes on until the client hangs up (or
                for 20 s at most)."""
                self.close_connection = True
                self.send_response(status)
                self.send_header("Connection", "close")
                self.end_headers()
                deadline = time.monotonic() + 20
                try:
                    self.wfile.write(start)
                    while time.monotonic() < deadline:
                        self.wfile.write(b"x" * 65536)
                except OSError:
                    pass

            def do_GET(self):  # noqa: N802 - http.server's name
                call = self.record()
                challenge = call.query.get("hub.challenge", "").encode()
                if call.query.get("hub.mode") == "denied" or server.verify == "echo":
                    self.answer(200, challenge)
                elif server.verify == "wrong":
                    self.answer(200, b"not the challenge")
                elif server.verify == "split":
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(challenge)))
                    self.end_headers()
                    self.wfile.write(challenge[:5])
                    self.wfile.flush()
                    time.sleep(0.3)
                    self.wfile.write(challenge[5:])
                elif server.verify == "endless":
                    self.endless(200, challenge)
                else:
                    self.answer(404)

            def do_POST(self):  # noqa: N802
                self.record()
                deliveries = len(server.deliveries())
                status = server.statuses[min(deliveries, len(server.statuses)) - 1]
                if server.endless_deliveries:
                    self.endless(status)
                else:
                    self.answer(status)

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> CallbackServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def verifications(self) -> list[Call]:
        return [call for call in self.calls if call.method == "GET"]

    def deliveries(self) -> list[Call]:
        return [call for call in self.calls if call.method == "POST"]

    def wait_for(self, count: int, *, method: str = "POST", timeout: float = 5) -> list[Call]:
        with self.arrived:
            self.arrived.wait_for(
                lambda: len([c for c in self.calls if c.method == method]) >= count, timeout)
        return [call for call in self.calls if call.method == method]
