"""Which tools Bruce offers, decided by the `tools` config section.

Each tool family is enabled or disabled in config; a disabled family is neither offered to the
model nor mentioned in the guidelines layer (which is built from the registry's names).
"""

from __future__ import annotations

from bruce_bot.config import Config
from bruce_bot.storage.stores import Stores
from bruce_bot.tools.approval import Approver
from bruce_bot.tools.artifacts import ArtifactSaveTool
from bruce_bot.tools.code_files import OutputSaver
from bruce_bot.tools.memory import memory_tools
from bruce_bot.tools.own_address import OwnAddress
from bruce_bot.tools.registry import ToolRegistry
from bruce_bot.tools.run_code import CodeFiles, RunCodeTool, run_code_enabled
from bruce_bot.tools.web_fetch import WebFetchTool
from bruce_bot.tools.web_search import WebSearchTool, provider_for


def empty_registry(config: Config) -> ToolRegistry:
    """A registry with the configured timeout, before any tool is added: what holds the actions
    waiting for the user can refer to it before the tools that need the scheduler exist."""
    return ToolRegistry(default_timeout=config.agent.tool_timeout_seconds)


def build_tools(
    config: Config,
    stores: Stores,
    own_address: OwnAddress | None = None,
    approver: Approver | None = None,
    registry: ToolRegistry | None = None,
) -> ToolRegistry:
    """The tools of `config` that need neither the scheduler nor the agent, in `registry` (None:
    a new one); `approver` asks the user before a run_code run that must ask (None: such a run
    is refused)."""
    registry = empty_registry(config) if registry is None else registry
    tools = config.tools
    if tools.web_search.enabled:
        registry.add(WebSearchTool(provider_for(tools.web_search)))
    if tools.web_fetch.enabled:
        own = own_address or OwnAddress.from_config(config)
        registry.add(WebFetchTool(tools.web_fetch, own=own))
    if tools.artifacts.enabled:
        registry.add(
            ArtifactSaveTool(
                stores.artifacts,
                config.app.data_dir / "artifacts",
                config.app.public_url,
                tools.artifacts.max_bytes,
            )
        )
    if config.memory.enabled:
        for tool in memory_tools(stores.memories):
            registry.add(tool)
    if run_code_enabled(tools.run_code):
        saver = None
        if tools.artifacts.enabled:
            saver = OutputSaver(stores.artifacts, config.app.data_dir / "artifacts")
        files = CodeFiles(stores.messages, saver, tools.artifacts.max_bytes)
        registry.add(RunCodeTool(tools.run_code, config.app.data_dir, files, approver))
    # The proactive-task and sub-agent tools need the scheduler and the agent: the composition
    # root adds them (bruce_bot/parts.py, `assemble_tools`).
    return registry
