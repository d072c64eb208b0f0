"""Run-time overrides: values the dashboard saves in the `settings` table, winning over config.yml.

Each one is an `Override` (override.py): its key, the config.yml value it stands in for, its
validation, what makes a change count at once, and where the value in use comes from. The
overrides are the text settings of the Settings page (editable.py: the base system prompt, the
timezone, the agent's max turns), the LLM settings (llm.py), the platforms' bot tokens
(tokens.py) and allowlists (allowlists.py); sources.py tells the failure replies where the LLM
settings in use come from. The key/value rows themselves are storage/settings.py's.
"""
