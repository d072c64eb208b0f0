"""Integration tests of the agent area (tests/README.md, "Where a test goes")."""
