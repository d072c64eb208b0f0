"""Tools the agent can call: `registry.py` plus one module per tool family."""
