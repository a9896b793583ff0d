"""The durable layer: runs kept in a store (SQLite or PostgreSQL) and the workers that drive them.

`golem.durable.store` holds runs, decisions and the audit log; `golem.durable.worker` claims runs
that are ready, resumes them at most once and writes what they did back.
"""

__all__: list[str] = []
