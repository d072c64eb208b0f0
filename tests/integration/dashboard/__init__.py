"""Integration tests of the dashboard area (tests/README.md, "Where a test goes")."""
