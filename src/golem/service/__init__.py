"""The approval service: a JSON API, a web inbox and an event stream over a `golem.durable.store`.

Needs the `[server]` extra (Starlette, Jinja2, uvicorn): `pip install 'golem-agents[server]'`.

```python
from golem.service import AuthConfig, ServiceSettings, create_app

settings = ServiceSettings(
    registry, "sqlite:///golem.db", auth=AuthConfig.from_env(), run_worker=True
)
app = create_app(settings)
```

Guides: `docs/guides/approvals-service.md`, `approval-inbox.md`, `approvals-security.md`.
"""

from __future__ import annotations

try:
    import jinja2  # noqa: F401
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"golem.service needs the [server] extra ({exc.name} is missing): "
        "pip install 'golem-agents[server]'"
    ) from exc

from golem.service.app import create_app
from golem.service.auth import Approver, AuthConfig, Credential
from golem.service.settings import ServiceSettings

__all__ = ["Approver", "AuthConfig", "Credential", "ServiceSettings", "create_app"]
