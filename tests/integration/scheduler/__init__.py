"""Integration tests of the scheduler area (tests/README.md, "Where a test goes")."""
