"""A local HTTP server, on a free port, for the end-to-end tests of the provider adapters."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Headers = Message
"""A request's headers (looked up by name whatever its case)."""

Respond = Callable[[str, Headers, bytes], tuple[int, str, bytes]]
"""What the server answers a POST to `path` with `headers` and `body`: status, content type
and payload."""


@contextmanager
def local_server(respond: Respond, *, keep_alive: bool = False) -> Iterator[str]:
    """Serve each POST with `respond` (HTTP/1.1 connections kept alive if `keep_alive`) and
    yield the server's address, `http://127.0.0.1:<port>`."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            status, ctype, payload = respond(self.path, self.headers, body)
            self.send_response(status)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
