"""new_id: UUIDv7 strings."""

from __future__ import annotations

import re
import time
import uuid

from golem import new_id

UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def test_new_id_is_a_lowercase_uuidv7_string() -> None:
    value = new_id()
    assert isinstance(value, str)
    assert UUID7.match(value), value


def test_new_id_parses_as_uuid_version_7_rfc_variant() -> None:
    parsed = uuid.UUID(new_id())
    assert parsed.version == 7
    assert parsed.variant == uuid.RFC_4122


def test_new_id_prefix_is_the_current_unix_millisecond_timestamp() -> None:
    before = time.time_ns() // 1_000_000
    value = new_id()
    after = time.time_ns() // 1_000_000
    ms = int(value.replace("-", "")[:12], 16)
    assert before <= ms <= after


def test_new_ids_are_unique() -> None:
    ids = [new_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    assert all(UUID7.match(i) for i in ids)


def test_new_id_random_bits_differ_within_one_millisecond() -> None:
    # Two ids minted back to back share (almost always) the timestamp but never the rest.
    a, b = new_id(), new_id()
    assert a.replace("-", "")[12:] != b.replace("-", "")[12:]
