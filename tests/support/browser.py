"""Constants the browser tests share."""

from __future__ import annotations

WAIT_MS = 15_000  # a guard against a hung page, not a duration the test asserts
