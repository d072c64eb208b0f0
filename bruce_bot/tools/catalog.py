"""Which tools Bruce offers, decided by the `tools` config section.

Each tool family is enabled or disabled in config; a disabled family is neither offered to the
model nor mentioned in the guidelines layer (which is built from the registry's names).
"""

from __future__ import annotations

from bruce_bot.config import Config
from bruce_bot.tools.registry import ToolRegistry


def build_tools(config: Config) -> ToolRegistry:
    registry = ToolRegistry(default_timeout=config.agent.tool_timeout_seconds)
    # Tool families (web search, web fetch, artifacts, proactive tasks) register here as they land.
    return registry
