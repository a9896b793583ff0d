"""Identifiers: UUIDv7 strings for runs and conversations."""

from __future__ import annotations

import os
import time

__all__ = ["new_id"]


def new_id() -> str:
    """Return a new UUIDv7 string (time-ordered: 48-bit ms timestamp, then random bits)."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & 0xFFFF_FFFF_FFFF) << 80 | rand
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 9562 variant
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
