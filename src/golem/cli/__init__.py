"""The `golem` command (`commands`) and the offline demo it runs (`demo`)."""

__all__: list[str] = []
