"""new_id: UUIDv7 strings."""

from __future__ import annotations

import re
import time
import uuid

from golem import new_id

UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def test_new_id_is_a_unique_lowercase_uuidv7_prefixed_by_the_unix_millisecond() -> None:
    before = time.time_ns() // 1_000_000
    value = new_id()
    after = time.time_ns() // 1_000_000
    assert before <= int(value.replace("-", "")[:12], 16) <= after
    parsed = uuid.UUID(value)
    assert (parsed.version, parsed.variant) == (7, uuid.RFC_4122)
    ids = [new_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    assert all(UUID7.match(i) for i in [value, *ids])
    a, b = new_id(), new_id()  # the random bits differ within one millisecond
    assert a.replace("-", "")[12:] != b.replace("-", "")[12:]
