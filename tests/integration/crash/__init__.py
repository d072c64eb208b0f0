"""Integration tests of the crash area (tests/README.md, "Where a test goes")."""
