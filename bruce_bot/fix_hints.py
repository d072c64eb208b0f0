"""Where the LLM settings come from, for the failure replies to name the right fix.

A turn that fails on a refused key or an unknown model tells the chat what to check
(`agent/failures.py`). That depends on where the value in use comes from — saved in the
dashboard's Settings (fixed there, no restart) or config.yml — and on whether a dashboard runs
to point to. The sources are read when a turn fails (the live settings cache them), and the
dashboard's address is known once its server listens (`app.public_url` when the config sets it,
else the address it bound).
"""

from __future__ import annotations

from bruce_bot.agent.failures import FixHints, Origin
from bruce_bot.settings.llm import LLMSettings


class FailureHints:
    def __init__(self, live_llm: LLMSettings | None, public_url: str | None = None) -> None:
        self._live_llm = live_llm  # None: the LLM is not the dashboard's to set (tests)
        self._public_url = public_url.rstrip("/") if public_url else None
        self._dashboard_url: str | None = None

    def dashboard_listening(self, url: str) -> None:
        """The dashboard serves at `url` (the configured public URL wins: it is the one
        reachable from the owner's browser)."""
        self._dashboard_url = self._public_url or url.rstrip("/")

    async def current(self) -> FixHints:
        sources: dict[str, Origin] = {}
        if self._live_llm is not None:
            sources = {view.name: view.source for view in await self._live_llm.view()}
        return FixHints(
            api_key=sources.get("api_key", "config"),
            model=sources.get("model", "config"),
            dashboard_url=self._dashboard_url,
        )
