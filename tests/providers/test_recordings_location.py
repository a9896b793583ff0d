"""Where the provider tests look for the recorded traffic (`GOLEM_RECORDINGS`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import recordings as _recordings


def test_the_default_is_next_to_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_recordings.ENV, raising=False)
    assert _recordings.location() == _recordings.ROOT.parent / "shared/recordings/pydantic-ai"
    assert _recordings.location("  ") == _recordings.DEFAULT


def test_the_variable_names_the_directory_or_the_one_above_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "recordings" / "pydantic-ai" / "gemini").mkdir(parents=True)
    monkeypatch.setenv(_recordings.ENV, str(tmp_path / "recordings"))
    assert _recordings.location() == tmp_path / "recordings" / "pydantic-ai"
    assert _recordings.location(str(tmp_path / "recordings" / "pydantic-ai")) == (
        tmp_path / "recordings" / "pydantic-ai"
    )
    assert _recordings.location(str(tmp_path / "nowhere")) == tmp_path / "nowhere"


def test_the_skip_reason_says_where_and_how() -> None:
    assert str(_recordings.RECORDINGS) in _recordings.MISSING
    assert "GOLEM_RECORDINGS" in _recordings.MISSING
