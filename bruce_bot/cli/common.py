"""What every `bruce` command shares: its exit statuses, and loading the configuration with the
logging it asks for (configured secrets added to the log scrubber)."""

from __future__ import annotations

from bruce_bot.config import Config, load_config
from bruce_bot.logs import configure_logging

EXIT_UNEXPECTED = 1
EXIT_CONFIG = 2
EXIT_STARTUP = 3


def load(path: str | None, quiet: bool = False) -> Config:
    """The configuration at `path` (or the default one), logging set up as it says; `quiet` for
    the terminal commands, where routine log lines would drown what they print."""
    config = load_config(path)
    level = config.logging.level
    if quiet and level in ("debug", "info"):
        level = "warning"
    configure_logging(level, config.logging.json_output, config.secrets())
    return config
