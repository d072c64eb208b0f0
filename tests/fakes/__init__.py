"""Local fakes that speak the wire protocols of the services Bruce talks to (TESTING.md)."""
