"""A local webhook receiver the notification tests share."""

from __future__ import annotations

import asyncio
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

WAIT = 20.0  # a guard against a hang, not a duration the test asserts


class Receiver:
    """A local HTTP server that records every POST; answers `statuses` in turn, then 200."""

    def __init__(self, statuses: list[int] | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.statuses = list(statuses or [])
        self.got = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                with receiver.got:
                    receiver.requests.append(
                        {"path": self.path, "headers": dict(self.headers), "body": body}
                    )
                    receiver.got.notify_all()
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    async def wait_for(self, count: int) -> list[dict[str, Any]]:
        def enough() -> bool:
            with self.got:
                return self.got.wait_for(lambda: len(self.requests) >= count, WAIT)

        assert await asyncio.to_thread(enough), f"only {len(self.requests)} of {count} arrived"
        return self.requests

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
