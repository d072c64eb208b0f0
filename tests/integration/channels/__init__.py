"""Integration tests of the channels area (tests/README.md, "Where a test goes")."""
