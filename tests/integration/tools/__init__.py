"""Integration tests of the tools area (tests/README.md, "Where a test goes")."""
