"""Integrations with other systems: MCP servers as toolsets (`mcp`), OpenTelemetry spans (`otel`)."""

__all__: list[str] = []
