"""Integration tests of the messaging area (tests/README.md, "Where a test goes")."""
