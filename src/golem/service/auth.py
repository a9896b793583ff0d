"""Who may use the approval service: bearer tokens mapped to approver identities.

`AuthConfig(tokens={token: Approver(...)})`, or `AuthConfig.from_env()` from
`GOLEM_APPROVERS` (JSON: token, or `sha256:<hex>`, → approver), `GOLEM_APPROVERS_FILE` and
`GOLEM_SESSION_SECRET` (≥ 32 bytes; the same on every replica). A credential is a bearer
token (`/api`), the signed inbox session cookie (with a CSRF token for forms) or a signed
stream token (`/api/events`). See `docs/guides/approvals-security.md`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import threading
import time
import unicodedata
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

from golem import _tracing
from golem._display import has_hidden

__all__ = ["Approver", "AuthConfig", "Credential"]

MIN_SECRET_BYTES = 32
"""Shortest accepted signing key (`GOLEM_SESSION_SECRET`), in bytes."""

_SESSION = "session"
_STREAM = "stream"
_CSRF = "csrf"
_SUBJECT = "subject"


def _token_digest(token: str) -> str:
    """Return the hex SHA-256 of `token`, the form under which tokens are looked up."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Approver:
    """An identity that may use the service, and what it may touch."""

    identity: str
    """Name recorded as `decided_by` / `started_by` (for example an e-mail address); no
    control, format or invisible characters (`ValueError`)."""
    _: KW_ONLY
    agents: frozenset[str] | None = None
    """Agents whose runs this approver may see, start and decide; `None` means all."""
    tools: frozenset[str] | None = None
    """Tools whose calls this approver may decide; `None` means all."""
    can_start: bool = True
    """Whether this approver may start runs (of the agents it may see)."""

    def __post_init__(self) -> None:
        if not self.identity or not self.identity.strip():
            raise ValueError("an approver needs a non-empty identity")
        if has_hidden(self.identity) or "\n" in self.identity or "\t" in self.identity:
            raise ValueError(
                f"approver identity {self.identity!r} holds a control, format or invisible "
                "character"
            )
        if self.agents is not None and not isinstance(self.agents, frozenset):
            object.__setattr__(self, "agents", frozenset(self.agents))
        if self.tools is not None and not isinstance(self.tools, frozenset):
            object.__setattr__(self, "tools", frozenset(self.tools))

    def may_see(self, agent: str) -> bool:
        """Whether runs of `agent` are visible to this approver."""
        return self.agents is None or agent in self.agents

    def may_decide(self, agent: str, tool: str) -> bool:
        """Whether this approver may decide a call of `tool` in a run of `agent`."""
        return self.may_see(agent) and (self.tools is None or tool in self.tools)

    def may_start(self, agent: str) -> bool:
        """Whether this approver may start a run of `agent`."""
        return self.can_start and self.may_see(agent)


@dataclass(frozen=True, slots=True)
class Credential:
    """An authenticated request: the approver and the digest of the token it used."""

    approver: Approver
    """Who is asking."""
    digest: str
    """SHA-256 hex of the bearer token (the key of the approver in `AuthConfig`)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _approver_from_obj(key: str, obj: Any) -> Approver:
    if isinstance(obj, str):
        return Approver(identity=obj)
    if not isinstance(obj, dict):
        raise ValueError(
            f"approver for token {key[:12]!r}…: want an object or a string, got {obj!r}"
        )
    unknown = set(obj) - {"identity", "agents", "tools", "can_start"}
    if unknown:
        raise ValueError(f"approver {obj.get('identity')!r}: unknown keys {sorted(unknown)}")
    identity = obj.get("identity")
    if not isinstance(identity, str):
        raise ValueError(f"approver for token {key[:12]!r}…: 'identity' must be a string")
    agents, tools = obj.get("agents"), obj.get("tools")
    for name, value in (("agents", agents), ("tools", tools)):
        if value is not None and not (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        ):
            raise ValueError(f"approver {identity!r}: {name!r} must be a list of names or null")
    can_start = obj.get("can_start", True)
    if not isinstance(can_start, bool):
        raise ValueError(f"approver {identity!r}: 'can_start' must be true or false")
    return Approver(
        identity=identity,
        agents=None if agents is None else frozenset(agents),
        tools=None if tools is None else frozenset(tools),
        can_start=can_start,
    )


def _refuse_duplicates(identities: Iterable[str]) -> None:
    """`ValueError` when two identities are one after NFKC and case folding (`Alice`,
    `alice`); look-alike letters of other scripts are not checked (ADR 0080)."""
    seen: dict[str, str] = {}
    for identity in identities:
        other = seen.setdefault(unicodedata.normalize("NFKC", identity).casefold(), identity)
        if other != identity:
            raise ValueError(
                f"approver identities {other!a} and {identity!a} differ only in case or "
                "Unicode form: give each approver a distinct name"
            )


@dataclass(frozen=True)
class AuthConfig:
    """Bearer tokens (or `"sha256:<hex>"` digests) and the approvers they stand for, with
    the `secret` that signs sessions and stream tokens (random when omitted).

    Raises:
        ValueError: no tokens, a malformed digest, a secret under 32 bytes, a non-positive
            lifetime, or two identities that differ only in case or Unicode form.
    """

    tokens: Mapping[str, Approver] = field(repr=False)
    _: KW_ONLY
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    session_seconds: float = 12 * 3600
    stream_token_seconds: float = 300
    _by_digest: dict[str, Approver] = field(init=False, repr=False, compare=False)
    _by_subject: dict[str, str] = field(init=False, repr=False, compare=False)
    _revoked: dict[str, float] = field(init=False, repr=False, compare=False)
    _lock: threading.Lock = field(init=False, repr=False, compare=False)

    def __repr__(self) -> str:
        names = ", ".join(sorted(a.identity for a in self._by_digest.values()))
        return f"AuthConfig(approvers=[{names}], tokens=<{len(self._by_digest)} hidden>)"

    def __post_init__(self) -> None:
        if not self.tokens:
            raise ValueError("AuthConfig needs at least one token")
        if len(self.secret) < MIN_SECRET_BYTES:
            raise ValueError(
                f"AuthConfig.secret must be at least {MIN_SECRET_BYTES} bytes, got "
                f"{len(self.secret)} (GOLEM_SESSION_SECRET: e.g. `openssl rand -hex 32`)"
            )
        if self.session_seconds <= 0 or self.stream_token_seconds <= 0:
            raise ValueError("session and stream token lifetimes must be positive")
        by_digest: dict[str, Approver] = {}
        for key, approver in self.tokens.items():
            if not isinstance(approver, Approver):
                raise ValueError(f"token {key[:12]}…: want an Approver, got {approver!r}")
            if key.startswith("sha256:"):
                digest = key.removeprefix("sha256:").lower()
                if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                    raise ValueError(f"{key[:20]}…: want sha256: followed by 64 hex digits")
            elif not key:
                raise ValueError("a token must not be empty")
            else:
                digest = _token_digest(key)
            by_digest[digest] = approver
        _refuse_duplicates(a.identity for a in by_digest.values())
        object.__setattr__(self, "_by_digest", by_digest)
        object.__setattr__(self, "_by_subject", {self._subject(d): d for d in by_digest})
        object.__setattr__(self, "_revoked", {})
        object.__setattr__(self, "_lock", threading.Lock())

    @classmethod
    def from_json(cls, text: str, *, secret: bytes | None = None) -> AuthConfig:
        """A config from the `GOLEM_APPROVERS` JSON form; `ValueError` when malformed."""
        try:
            obj = json.loads(text)
        except ValueError as exc:  # not JSON, or a number past int's digit limit
            raise ValueError(f"approvers: not valid JSON ({exc})") from None
        except RecursionError:
            raise ValueError("approvers: not valid JSON (nested too deeply)") from None
        if not isinstance(obj, dict):
            raise ValueError("approvers: want a JSON object mapping token to approver")
        tokens = {str(k): _approver_from_obj(str(k), v) for k, v in obj.items()}
        if secret is None:
            return cls(tokens=tokens)
        return cls(tokens=tokens, secret=secret)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AuthConfig:
        """A config from `GOLEM_APPROVERS` (or `_FILE`) and `GOLEM_SESSION_SECRET`;
        `ValueError` when neither is set or one is malformed."""
        env = os.environ if environ is None else environ
        secret_text = env.get("GOLEM_SESSION_SECRET", "")
        secret = secret_text.encode("utf-8") if secret_text else None
        if env.get("GOLEM_APPROVERS"):
            return cls.from_json(env["GOLEM_APPROVERS"], secret=secret)
        path = env.get("GOLEM_APPROVERS_FILE", "")
        if path:
            try:
                text = Path(path).read_text(encoding="utf-8")
            except OSError as exc:
                raise ValueError(f"GOLEM_APPROVERS_FILE={path}: {exc.strerror}") from None
            except UnicodeDecodeError as exc:
                raise ValueError(f"GOLEM_APPROVERS_FILE={path}: not UTF-8 text ({exc})") from None
            return cls.from_json(text, secret=secret)
        raise ValueError(
            "no approvers configured: set GOLEM_APPROVERS to a JSON object "
            '(e.g. {"<token>": {"identity": "alice"}}) or GOLEM_APPROVERS_FILE to a file with it'
        )

    @property
    def approvers(self) -> Iterable[Approver]:
        """Every configured approver."""
        return self._by_digest.values()

    def authenticate(self, token: str) -> Credential | None:
        """Return the credential for a bearer token, or `None` when it is unknown."""
        if not token:
            return None
        digest = _token_digest(token)
        approver = self._by_digest.get(digest)
        if approver is None:
            return None
        _tracing.identify(approver.identity)
        return Credential(approver, digest)

    def from_authorization(self, header: str | None) -> Credential | None:
        """Authenticate an `Authorization: Bearer <token>` header value."""
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer":
            return None
        return self.authenticate(token.strip())

    def _mac(self, purpose: str, text: str) -> bytes:
        return hmac.new(self.secret, f"{purpose}.{text}".encode(), hashlib.sha256).digest()

    def _subject(self, digest: str) -> str:
        """The `sub` of signed values: a MAC of the token's SHA-256 under the secret (a
        reader of a session value gets nothing to test token guesses against)."""
        return _b64(self._mac(_SUBJECT, digest)[:18])

    def _sign(self, purpose: str, credential: Credential, exp: float, **extra: str) -> str:
        payload = {"sub": self._subject(credential.digest), "exp": exp, **extra}
        body = _b64(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode())
        return f"{body}.{_b64(self._mac(purpose, body))}"

    def _claims(self, purpose: str, value: str | None, now: float | None) -> dict[str, Any] | None:
        """The payload of a valid, unexpired, unrevoked signed value of `purpose`, else None."""
        body, _, mac = (value or "").partition(".")
        if not body or not mac:
            return None
        try:
            if not hmac.compare_digest(_unb64(mac), self._mac(purpose, body)):
                return None
            payload = json.loads(_unb64(body))
        except (ValueError, TypeError):
            return None
        if not isinstance(payload, dict):
            return None
        exp, subject, sid = payload.get("exp"), payload.get("sub"), payload.get("sid")
        if not isinstance(exp, int | float) or not isinstance(subject, str):
            return None
        if (time.time() if now is None else now) >= exp or subject not in self._by_subject:
            return None
        return None if isinstance(sid, str) and sid in self._revoked else payload

    def _verify(self, purpose: str, value: str | None, now: float | None) -> Credential | None:
        payload = self._claims(purpose, value, now)
        if payload is None:
            return None
        digest = self._by_subject[payload["sub"]]
        approver = self._by_digest[digest]
        _tracing.identify(approver.identity)
        return Credential(approver, digest)

    def issue_session(self, credential: Credential, *, now: float | None = None) -> str:
        """Return a signed inbox session value for `credential` (with its own session ID)."""
        exp = (time.time() if now is None else now) + self.session_seconds
        return self._sign(_SESSION, credential, exp, sid=_b64(secrets.token_bytes(12)))

    def verify_session(self, value: str | None, *, now: float | None = None) -> Credential | None:
        """Return the credential of a valid, unexpired, unrevoked session value, else `None`."""
        return self._verify(_SESSION, value, now)

    def revoke_session(self, value: str | None, *, now: float | None = None) -> bool:
        """End a session server-side (in this process, until it would have expired);
        whether `value` was a valid session."""
        payload = self._claims(_SESSION, value, now)
        if payload is None or not isinstance(payload.get("sid"), str):
            return False
        at = time.time() if now is None else now
        with self._lock:
            for sid, exp in list(self._revoked.items()):  # forget revocations that expired
                if exp <= at:
                    del self._revoked[sid]
            self._revoked[payload["sid"]] = float(payload["exp"])
        return True

    def expiry(
        self, value: str | None, *, stream: bool = False, now: float | None = None
    ) -> float | None:
        """The Unix time a valid session (or, with `stream`, stream token) value expires, else None."""
        payload = self._claims(_STREAM if stream else _SESSION, value, now)
        return None if payload is None else float(payload["exp"])

    def issue_stream_token(
        self, credential: Credential, *, now: float | None = None
    ) -> tuple[str, float]:
        """Return a signed stream token for `credential` and its expiry (Unix seconds)."""
        exp = (time.time() if now is None else now) + self.stream_token_seconds
        return self._sign(_STREAM, credential, exp), exp

    def verify_stream_token(
        self, value: str | None, *, now: float | None = None
    ) -> Credential | None:
        """Return the credential of a valid, unexpired stream token, else `None`."""
        return self._verify(_STREAM, value, now)

    def csrf_token(self, session: str) -> str:
        """Return the CSRF token the inbox forms must carry for `session`."""
        return _b64(self._mac(_CSRF, session))

    def check_csrf(self, session: str, token: str) -> bool:
        """Whether `token` is the CSRF token of `session`."""
        # compare_digest refuses str with non-ASCII characters: compare the UTF-8 bytes
        expected = self.csrf_token(session).encode()
        return bool(token) and hmac.compare_digest(expected, token.encode("utf-8", "replace"))


@dataclass
class LoginLimiter:
    """Sliding-window limit of `attempts` per client address per `window` seconds."""

    attempts: int = 10
    window: float = 60.0
    _seen: dict[str, deque[float]] = field(default_factory=lambda: defaultdict(deque))

    def __post_init__(self) -> None:
        if self.attempts < 1 or not self.window > 0:
            raise ValueError(
                f"{type(self).__name__} must allow at least 1 attempt in a positive window, "
                f"got {self.attempts} in {self.window!r} s"
            )

    def wait(self, address: str, now: float | None = None) -> float:
        """Seconds until `address` may try again (0: now), counting nothing."""
        at = time.monotonic() if now is None else now
        seen = self._seen.get(address)
        if not seen:
            return 0.0
        while seen and seen[0] <= at - self.window:
            seen.popleft()
        return seen[0] + self.window - at if len(seen) >= self.attempts else 0.0

    def count(self, address: str, now: float | None = None) -> None:
        """Count one attempt from `address`."""
        at = time.monotonic() if now is None else now
        seen = self._seen[address]
        seen.append(at)
        while len(seen) > self.attempts:  # only the newest `attempts` ever matter
            seen.popleft()
        if len(self._seen) > 10_000:  # forget idle addresses so memory stays bounded
            for key in [k for k, v in self._seen.items() if not v or v[-1] <= at - self.window]:
                del self._seen[key]

    def check(self, address: str, now: float | None = None) -> float:
        """Count one attempt from `address`; 0 when allowed, else seconds until it would be."""
        wait = self.wait(address, now)
        if wait == 0:
            self.count(address, now)
        return wait


@dataclass
class TokenFailures(LoginLimiter):
    """Wrong bearer tokens per client address (`count`): past `attempts` within `window`
    seconds, the address gets 429 on every request with a token (`wait`) until the oldest
    leaves the window."""

    attempts: int = 30
