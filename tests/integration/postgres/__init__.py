"""Integration tests of the postgres area (tests/README.md, "Where a test goes")."""
