"""Helpers the test modules share (never a test module of their own)."""
