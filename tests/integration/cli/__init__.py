"""Integration tests of the cli area (tests/README.md, "Where a test goes")."""
