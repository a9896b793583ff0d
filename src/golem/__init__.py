"""golem."""
