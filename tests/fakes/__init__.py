"""Local fakes that speak the real wire protocols of the services Bruce talks to (see TESTING.md)."""
