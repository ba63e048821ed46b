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
    answers 404. `statuses`: what deliveries are answered, in turn (the last repeats)."""

    def __init__(self, *, verify: str = "echo", statuses: list[int] | None = None):
        self.verify, self.statuses = verify, list(statuses or [204])
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

            def do_GET(self):  # noqa: N802 - http.server's name
                call = self.record()
                if call.query.get("hub.mode") == "denied" or server.verify == "echo":
                    self.answer(200, call.query.get("hub.challenge", "").encode())
                elif server.verify == "wrong":
                    self.answer(200, b"not the challenge")
                else:
                    self.answer(404)

            def do_POST(self):  # noqa: N802
                self.record()
                deliveries = len(server.deliveries())
                self.answer(server.statuses[min(deliveries, len(server.statuses)) - 1])

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
